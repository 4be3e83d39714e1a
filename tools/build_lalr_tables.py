"""Write minijinja_py/syntax/_lalr_tables.py, the LALR tables Lark compiles from
grammar/jinja.lark, which the engine ships so that it never runs Lark on a start (see
minijinja_py/syntax/lalr.py). A developer tool, not shipped in the wheel; run it after editing
the grammar (tests/test_grammar.py says when): ``python tools/build_lalr_tables.py``; with
``--show``, print the shipped tables readably.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's package

from minijinja_py.syntax import lalr  # noqa: E402
from minijinja_py.syntax.lalr import build_tables, read_grammar  # noqa: E402
from minijinja_py.syntax.parser import START_SYMBOLS  # noqa: E402

TABLES_FILE = "_lalr_tables.py"


def tables_path() -> str:
    return os.path.join(os.path.dirname(os.path.abspath(lalr.__file__)), TABLES_FILE)


#: The marshal format the shipped tables are written in: every supported Python reads it.
MARSHAL_VERSION = 4
_BLOB_LINE = 99  # characters per line of the generated module, at most
_QUOTED = frozenset(b"\\'")  # written escaped in a bytes literal


def tables_module_text(data: Dict[str, Any]) -> str:
    """The text of ``_lalr_tables.py`` holding ``data``: marshal data in a bytes literal
    (its lines joined by the compiler into one constant), loaded with ``marshal.loads``.
    Loading builds the dicts and lists directly; a module of dict literals ran bytecode twice
    the data's size to build them (0.5 ms more of a cold start, and 50 more pages of memory
    touched). ``python tools/build_lalr_tables.py --show`` prints the tables readably."""
    import marshal

    blob = marshal.dumps(data, MARSHAL_VERSION)
    lines = ['"""LALR tables of grammar/jinja.lark, written by ``python tools/build_lalr_tables.py``:',
             "do not edit. Marshal data (format %d) of a dict: format, grammar, rules, states,"
             % MARSHAL_VERSION,
             'start_states, end_states (``python tools/build_lalr_tables.py --show`` prints it)."""',
             "", "from marshal import loads as _loads", "", "TABLES = _loads(("]
    line = "    b'"
    for byte in blob:
        char = chr(byte) if 32 <= byte < 127 and byte not in _QUOTED else f"\\x{byte:02x}"
        if len(line) + len(char) >= _BLOB_LINE:
            lines.append(line + "'")
            line = "    b'"
        line += char
    lines.append(line + "'")
    lines.append("))")
    return "\n".join(lines) + "\n"


def main(argv: Optional[List[str]] = None) -> None:
    """Regenerate the shipped tables from the grammar: ``python tools/build_lalr_tables.py``;
    with ``--show``, print the shipped tables instead."""
    import pprint

    if "--show" in (sys.argv[1:] if argv is None else argv):
        from minijinja_py.syntax._lalr_tables import TABLES

        pprint.pprint(TABLES, width=100)
        return
    data = build_tables(read_grammar(), START_SYMBOLS)
    with open(tables_path(), "w", encoding="utf-8") as handle:
        handle.write(tables_module_text(data))
    print(f"wrote {tables_path()}: {len(data['states'])} states, {len(data['rules'])} rules")


if __name__ == "__main__":
    main()
