"""Write minijinja_py/syntax/_regex_programs.py: the programs ``re`` compiles the scanner's
patterns to under this Python, kept beside those made under other Pythons, which the engine
hands straight to the regex engine (see minijinja_py/syntax/regex.py). A developer tool, not
shipped in the wheel; run it under each Python the file lists after changing a scanner pattern
(tests/test_cold_start.py says when): ``python tools/build_regex_programs.py``.
"""

from __future__ import annotations

import os
import pprint
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's package

from minijinja_py.syntax import regex as aot_regex  # noqa: E402
from minijinja_py.syntax.scanner import compile_all_patterns  # noqa: E402

PROGRAMS_FILE = "_regex_programs.py"


def programs_path() -> str:
    return os.path.join(os.path.dirname(os.path.abspath(aot_regex.__file__)), PROGRAMS_FILE)


def main() -> None:
    """Write the programs of the scanner's patterns for this Python into the shipped file,
    keeping those made under other Pythons: ``python tools/build_regex_programs.py``."""
    compile_all_patterns()
    try:
        from minijinja_py.syntax._regex_programs import PROGRAMS as shipped
    except ImportError:
        shipped = {}
    everything = dict(shipped)
    key_here = aot_regex.engine_key()
    everything[key_here] = {key: aot_regex.program(*key) for key in sorted(aot_regex.requested)}
    lines = ['"""Programs of the scanner\'s regular expressions per regex engine, written by',
             '``python tools/build_regex_programs.py``: do not edit (see syntax/regex.py)."""', "",
             "PROGRAMS = {"]
    for key in sorted(everything):
        lines.append(f"    {key!r}: {{")
        for entry in sorted(everything[key].items()):
            lines.append(f"        {pprint.saferepr(entry[0])}:")
            lines.append(f"            {pprint.saferepr(entry[1])},")
        lines.append("    },")
    lines.append("}")
    with open(programs_path(), "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
    print(f"wrote {programs_path()}: {len(everything[key_here])} programs for {key_here} "
          f"({len(everything)} engines)")


if __name__ == "__main__":
    main()
