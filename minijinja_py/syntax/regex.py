"""The scanner's regular expressions, compiled ahead of time.

``re.compile`` parses and compiles a pattern in Python code (re's parser and compiler) and
hands the resulting program to the C engine, ``_sre.compile``. For the scanner's patterns
that took a tenth of a cold start (about 6 million instructions, over a millisecond). Their
programs are shipped in ``_regex_programs.py``, written by ``python
tools/build_regex_programs.py`` under each Python it lists, and :func:`compile` hands them straight to ``_sre.compile``.

A program is only used under the regex engine it was made for: same Python version,
``_sre.MAGIC`` (the program format), code size and limits. Anywhere else, or for a pattern
not shipped, :func:`compile` is ``re.compile``. ``_sre`` checks every program it is given
(an invalid one raises, and :func:`compile` then compiles the pattern as usual), and the test
suite checks that the shipped programs are exactly what ``re`` makes of the patterns now.
"""

from __future__ import annotations

import re
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any, Dict, Set, Tuple

#: (pattern, flags) of every pattern compiled through :func:`compile` in this process: what
#: tools/build_regex_programs.py ships (see scanner.compile_all_patterns)
requested: "Set[Tuple[str, int]]" = set()
_programs: "Dict[Tuple[str, int], Any]" = {}
_loaded = False


def engine_key() -> str:
    """What a compiled program depends on: the Python version and its regex engine."""
    import _sre

    return repr((sys.version_info[:2], _sre.MAGIC, _sre.CODESIZE, _sre.MAXREPEAT,
                 _sre.MAXGROUPS))


def compile(pattern: str, flags: int = 0) -> "re.Pattern[str]":  # noqa: A001 - re's name
    """``re.compile(pattern, flags)``, from the shipped program when there is one."""
    global _loaded
    key = (pattern, int(flags))
    requested.add(key)
    if not _loaded:
        _programs.update(_shipped())
        _loaded = True
    program = _programs.get(key)
    if program is not None:
        import _sre

        final_flags, code, groups, groupindex, indexgroup = program
        try:
            return _sre.compile(pattern, final_flags, list(code), groups, dict(groupindex),
                                indexgroup)
        except Exception:  # noqa: BLE001 - refused by this engine: compile it as usual
            pass
    return re.compile(pattern, flags)


def _shipped() -> "Dict[Tuple[str, int], Any]":
    try:
        from ._regex_programs import PROGRAMS
    except (ImportError, SyntaxError):  # removed, or a half-written regeneration
        return {}
    return PROGRAMS.get(engine_key(), {}) if type(PROGRAMS) is dict else {}


def program(pattern: str, flags: int = 0) -> "Tuple[Any, ...]":
    """What ``re.compile`` hands ``_sre.compile`` for ``pattern`` under this Python: (flags,
    code, groups, group index, index group), with re's own parser and compiler."""
    try:
        from re import _compiler, _parser  # Python 3.11+
    except ImportError:  # pragma: no cover - Python 3.10
        import sre_compile as _compiler  # type: ignore[no-redef]
        import sre_parse as _parser  # type: ignore[no-redef]
    flags = int(flags)
    parsed = _parser.parse(pattern, flags)
    code = _compiler._code(parsed, flags)
    groupindex = dict(parsed.state.groupdict)
    indexgroup = [None] * parsed.state.groups
    for name, index in groupindex.items():
        indexgroup[index] = name
    # ints: re's opcodes are int subclasses whose repr is their name
    return (int(flags | parsed.state.flags), tuple(map(int, code)), parsed.state.groups - 1,
            groupindex, tuple(indexgroup))
