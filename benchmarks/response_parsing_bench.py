"""Parse time of derived response parsers against transformers' ``parse_response`` with the
exported ``response_template``, on the texts of tests/fixtures/response_template_judge.json
(the round-trip texts of the corpus templates whose layout the format carries: content, reasoning, 1 and 3 tool calls).

The two sides run in different venvs::

    python benchmarks/response_parsing_bench.py ours
    /tmp/tfvenv/bin/python benchmarks/response_parsing_bench.py transformers

Each prints the CPU time of one parse, averaged over ROUNDS passes over the texts (parsers and
templates are built before the clock starts). transformers is given ``prefix=""``: the texts
are the generated text alone.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "response_template_judge.json"
ROUNDS = 50


def _timed(parse, answers) -> float:
    start = time.process_time()
    for _ in range(ROUNDS):
        for answer in answers:
            parse(answer)
    return (time.process_time() - start) / (ROUNDS * len(answers)) * 1e6


def ours(fixture: dict) -> float:
    sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
    from response_roundtrip import HISTORY, TOOLS, TemplateRoundTrip

    options = {"bos_token": "<s>", "eos_token": "</s>"}
    parsers = {slug: TemplateRoundTrip(slug).parser(HISTORY, TOOLS, options, False)
               for slug in fixture["templates"]}
    return _timed(lambda answer: parsers[answer["template"]].parse(answer["text"]),
                  fixture["answers"])


def transformers(fixture: dict) -> float:
    from transformers.utils.chat_parsing import parse_response
    from transformers.utils.chat_parsing.response_templates import load_response_template

    templates = {slug: load_response_template(template)
                 for slug, template in fixture["templates"].items()}
    tools = fixture["tools"]  # the tools of the round-trip cases: arguments typed alike

    def parse(answer: dict) -> None:
        try:
            parse_response(answer["text"], templates[answer["template"]], prefix="", tools=tools)
        except ValueError:
            pass  # a text the template does not fit: timed like the others

    return _timed(parse, fixture["answers"])


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in ("ours", "transformers"):
        sys.exit(__doc__)
    data = json.loads(FIXTURE.read_text(encoding="utf-8"))
    side = sys.argv[1]
    microseconds = (ours if side == "ours" else transformers)(data)
    print(f"{side}: {microseconds:.1f} us per parse ({len(data['answers'])} texts x {ROUNDS})")
