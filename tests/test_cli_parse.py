"""``minijinja-py parse``: the derived response parser on the command line gives what
``ChatTemplate.response_parser`` gives in process, and bad input gets render's one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import minijinja_py as mj

from test_cli import EXAMPLE, run

CORPUS_GLM = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "templates" / \
    "hfjs-zai-org-glm-5.1.jinja"
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                    "days": {"type": "integer"}}}}}]
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Vienna", "days": 2}}\n' \
       '</tool_call>'


def test_parse_gives_the_in_process_message(tmp_path: Path) -> None:
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(TOOLS))
    result = run(["parse", str(EXAMPLE), "--text", "-", "--tools", str(tools), "--json"],
                 stdin=CALL)
    assert result.returncode == 0, result.stderr
    parser = mj.ChatTemplate(EXAMPLE.read_text(encoding="utf-8")).response_parser(tools=TOOLS)
    assert json.loads(result.stdout) == {"message": parser.parse(CALL),
                                         "unsupported": parser.unsupported}
    assert parser.parse(CALL)["tool_calls"][0]["function"]["arguments"] == {"city": "Vienna",
                                                                           "days": 2}
    plain = run(["parse", str(EXAMPLE), "--text", "-"], stdin=CALL)
    assert 'tool call: get_weather {"city": "Vienna", "days": 2}' in plain.stdout.splitlines()


def test_without_text_the_layout_is_shown_as_a_response_template() -> None:
    result = run(["parse", str(EXAMPLE)])
    assert result.returncode == 0, result.stderr
    parser = mj.ChatTemplate(EXAMPLE.read_text(encoding="utf-8")).response_parser()
    assert json.loads(result.stdout) == {"response_template": parser.response_template,
                                         "unsupported": parser.unsupported}


def test_variables_reach_the_derivation(tmp_path: Path) -> None:
    if not CORPUS_GLM.exists():
        pytest.skip(f"the shared corpus's GLM-5.1 template is not at {CORPUS_GLM}")
    thinking = run(["parse", str(CORPUS_GLM), "--text", "-", "--json"],
                   stdin="Let me check.</think>It is sunny.")
    assert json.loads(thinking.stdout)["message"] == {
        "role": "assistant", "content": "It is sunny.", "reasoning_content": "Let me check."}
    expected = mj.ChatTemplate(CORPUS_GLM.read_text(encoding="utf-8")).parse_response(
        "It is sunny.", enable_thinking=False)
    off = run(["parse", str(CORPUS_GLM), "--text", "-", "--json", "--var",
               "enable_thinking=false"], stdin="It is sunny.")
    assert json.loads(off.stdout)["message"] == expected


def test_bad_input_gets_the_same_one_line_errors_as_render(tmp_path: Path) -> None:
    syntax = tmp_path / "syntax.jinja"
    syntax.write_text("{% for m in messages %}")
    for target in (tmp_path / "missing.jinja", syntax):
        rendered = run(["render", str(target)])
        parsed = run(["parse", str(target)])
        assert parsed.returncode == rendered.returncode != 0, target
        assert parsed.stderr == rendered.stderr and parsed.stdout == ""
    missing_text = run(["parse", str(EXAMPLE), "--text", str(tmp_path / "nope.txt")])
    assert missing_text.returncode == 2 and "--text: no such file" in missing_text.stderr
    strict = run(["parse", str(EXAMPLE), "--text", "-", "--strict"], stdin=CALL[:-5])
    assert strict.returncode == 1 and strict.stderr.count("\n") == 1, strict.stderr
