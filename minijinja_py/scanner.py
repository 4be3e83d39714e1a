"""Scanner: splits template source into text and tag segments, exactly as Jinja2's lexer does.

First step of the flow (scanner -> parser -> compiler -> render). It settles everything about
whitespace: newline normalisation, the trailing newline, ``-``/``+`` modifiers, ``trim_blocks``
and ``lstrip_blocks``, ``raw`` blocks and comments. It also tokenizes the interior of every
``{{ }}`` and ``{% %}`` tag with one combined regex, balancing brackets so that ``}}`` inside a
dict literal does not end the tag, and skipping string literals so that nothing inside a
string is ever read as a tag end. The parser receives ready token lists.

This module must not import Lark: it also serves tools that only need the segments.
"""

from __future__ import annotations

import bisect
import re
TYPE_CHECKING = False  # typing is not imported at run time: it costs milliseconds
if TYPE_CHECKING:  # pragma: no cover
    from typing import List, Optional, Tuple

from .exceptions import TemplateSyntaxError

# Segment kinds.
DATA = "data"
VAR = "var"
BLOCK = "block"

# A token is (type, value, offset): offset is into the normalised source.
if TYPE_CHECKING:  # pragma: no cover
    Token = Tuple[str, str, int]

_NEWLINE_RE = re.compile(r"\r\n|\r|\n")
_TAG_START_RE = re.compile(r"\{([{%#])")
_RAW_BEGIN_RE = re.compile(r"\{%([-+]?)\s*raw\s*(?:(-)%\}\s*|%\})")
_WHITESPACE_RE = re.compile(r"\s*")
_LSTRIPPABLE_RE = re.compile(r"\s+")

# The order of the alternatives follows Jinja2's lexer: whitespace, float, integer, name,
# string, operator. A float may not start right after a dot, so `l.0.1` is l[0][1].
_TOKEN_RE = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<FLOAT>(?<!\.)(?:\d+_)*\d+(?:(?:\.(?:\d+_)*\d+)?[eE][+\-]?(?:\d+_)*\d+|\.(?:\d+_)*\d+))
  | (?P<INT>0[bB](?:_?[01])+|0[oO](?:_?[0-7])+|0[xX](?:_?[0-9a-fA-F])+|[1-9](?:_?\d)*|0(?:_?0)*)
  | (?P<NAME>[^\W\d]\w*)
  | (?P<STRING>'[^'\\]*(?:\\.[^'\\]*)*'|"[^"\\]*(?:\\.[^"\\]*)*")
  | (?P<op>\*\*|//|==|!=|>=|<=|[+\-*/%~\[\](){}<>=.:|,;])
    """,
    re.S | re.X,
)

OPERATORS = {
    "+": "ADD", "-": "SUB", "*": "MUL", "/": "DIV", "//": "FLOORDIV", "%": "MOD", "**": "POW",
    "~": "TILDE", "[": "LBRACKET", "]": "RBRACKET", "(": "LPAR", ")": "RPAR", "{": "LBRACE",
    "}": "RBRACE", "==": "EQ", "!=": "NE", ">": "GT", ">=": "GTEQ", "<": "LT", "<=": "LTEQ",
    "=": "ASSIGN", ".": "DOT", ":": "COLON", "|": "PIPE", ",": "COMMA", ";": "SEMICOLON",
}
KEYWORDS = {
    "and": "AND", "or": "OR", "not": "NOT", "in": "IN", "is": "IS", "if": "IF", "else": "ELSE",
}
_CLOSING = {")": "(", "]": "[", "}": "{"}


class Segment:
    """One piece of the template: literal text, a ``{{ }}`` tag or a ``{% %}`` tag."""

    __slots__ = ("kind", "text", "tokens", "offset", "end")

    def __init__(self, kind: str, offset: int, end: int, text: str = "",
                 tokens: Optional[List[Token]] = None) -> None:
        self.kind = kind
        self.text = text
        self.tokens = tokens if tokens is not None else []
        self.offset = offset
        self.end = end

    def __repr__(self) -> str:  # debugging aid
        if self.kind == DATA:
            return f"Segment(data, {self.text!r})"
        return f"Segment({self.kind}, {[t[1] for t in self.tokens]!r})"


class LineIndex:
    """Maps offsets in the normalised source to 1-based (line, column)."""

    __slots__ = ("starts",)

    def __init__(self, source: str) -> None:
        self.starts = [0] + [m.end() for m in re.finditer("\n", source)]

    def position(self, offset: int) -> Tuple[int, int]:
        line = bisect.bisect_right(self.starts, offset)
        return line, offset - self.starts[line - 1] + 1


def normalize_source(source: str, keep_trailing_newline: bool) -> str:
    """CRLF and CR become LF; one trailing newline goes unless keep_trailing_newline."""
    if "\r" in source:
        source = _NEWLINE_RE.sub("\n", source)
    if not keep_trailing_newline and source.endswith("\n"):
        source = source[:-1]
    return source


class Scanner:
    """Turns normalised source into a list of :class:`Segment`."""

    def __init__(self, source: str, *, trim_blocks: bool, lstrip_blocks: bool,
                 name: Optional[str] = None, original_source: Optional[str] = None,
                 max_nesting: int = 128) -> None:
        self.source = source
        self.max_nesting = max_nesting
        self.trim_blocks = trim_blocks
        self.lstrip_blocks = lstrip_blocks
        self.name = name
        self.original_source = original_source if original_source is not None else source
        self.lines = LineIndex(source)
        suffix = r"\n?" if trim_blocks else ""
        self._block_end_re = re.compile(r"\+%\}|(-)%\}\s*|%\}" + suffix)
        self._var_end_re = re.compile(r"(-)\}\}\s*|\}\}")
        self._comment_end_re = re.compile(r"\+#\}|(-)#\}\s*|#\}" + suffix, re.S)
        self._endraw_re = re.compile(
            r"\{%([-+]?)\s*endraw\s*(?:\+%\}|(-)%\}\s*|%\}" + suffix + ")", re.S
        )

    # -- errors -------------------------------------------------------------------------
    def error(self, message: str, offset: int) -> TemplateSyntaxError:
        line, column = self.lines.position(min(offset, len(self.source)))
        return TemplateSyntaxError(message, line, column, self.name, self.original_source)

    # -- main loop ----------------------------------------------------------------------
    def scan(self) -> List[Segment]:
        source = self.source
        segments: List[Segment] = []
        pos = 0
        line_starting = True
        length = len(source)
        while pos < length:
            match = _TAG_START_RE.search(source, pos)
            if match is None:
                segments.append(Segment(DATA, pos, length, source[pos:]))
                break
            start = match.start()
            kind = match.group(1)
            raw = _RAW_BEGIN_RE.match(source, start) if kind == "%" else None
            if raw is not None:
                modifier = raw.group(1)
            else:
                modifier = source[start + 2:start + 3]
                if modifier not in ("-", "+"):
                    modifier = ""
            text = source[pos:start]
            if text:
                text = self._strip_before_tag(text, modifier, kind != "{", line_starting)
                if text:
                    segments.append(Segment(DATA, pos, start, text))
            if raw is not None:
                pos, line_starting = self._scan_raw(raw, segments)
            elif kind == "#":
                pos, line_starting = self._scan_comment(start, start + 2 + len(modifier))
            else:
                pos, line_starting = self._scan_tag(
                    VAR if kind == "{" else BLOCK, start, start + 2 + len(modifier), segments
                )
        return segments

    def _strip_before_tag(self, text: str, modifier: str, lstrippable: bool,
                          line_starting: bool) -> str:
        if modifier == "-":
            return text.rstrip()
        if modifier != "+" and lstrippable and self.lstrip_blocks:
            line_start = text.rfind("\n") + 1
            if (line_start > 0 or line_starting) and _LSTRIPPABLE_RE.fullmatch(text, line_start):
                return text[:line_start]
        return text

    def _scan_raw(self, raw: "re.Match[str]", segments: List[Segment]) -> Tuple[int, bool]:
        body_start = raw.end()
        if body_start == len(self.source):
            return body_start, False  # Jinja2 drops a raw tag that ends the source
        end = self._endraw_re.search(self.source, body_start)
        if end is None:
            raise self.error("Missing end of raw directive", raw.start())
        body = self.source[body_start:end.start()]
        modifier = end.group(1)
        # Jinja2 lstrips before `{% endraw %}` as before any block tag, measuring the line start
        # from the raw tag itself.
        body = self._strip_before_tag(body, modifier, True, raw.group(0).endswith("\n"))
        if body:
            segments.append(Segment(DATA, body_start, end.start(), body))
        return end.end(), end.group(0).endswith("\n")

    def _scan_comment(self, start: int, body_start: int) -> Tuple[int, bool]:
        if body_start == len(self.source):
            return body_start, False  # Jinja2 drops a comment opener that ends the source
        end = self._comment_end_re.search(self.source, body_start)
        if end is None:
            raise self.error("Missing end of comment tag", start)
        return end.end(), end.group(0).endswith("\n")

    def _scan_tag(self, kind: str, start: int, pos: int,
                  segments: List[Segment]) -> Tuple[int, bool]:
        source = self.source
        end_re = self._var_end_re if kind == VAR else self._block_end_re
        tokens: List[Token] = []
        brackets: List[Tuple[str, int]] = []
        length = len(source)
        while True:
            if not brackets:
                end = end_re.match(source, pos)
                if end is not None:
                    segments.append(Segment(kind, start, pos, tokens=tokens))
                    return end.end(), end.group(0).endswith("\n")
            if pos >= length:
                what = "print statement" if kind == VAR else "statement block"
                if brackets:
                    raise self.error(f"unexpected end of template, unclosed '{brackets[-1][0]}'",
                                     brackets[-1][1])
                raise self.error(f"unexpected end of template, expected 'end of {what}'.", start)
            match = _TOKEN_RE.match(source, pos)
            if match is None:
                char = source[pos]
                raise self.error(f"unexpected char {char!r} at {pos}", pos)
            group = match.lastgroup
            value = match.group()
            if group == "op":
                if value in "([{":
                    brackets.append((value, pos))
                    if len(brackets) > self.max_nesting:
                        from .exceptions import LimitExceededError

                        line, column = self.lines.position(pos)
                        raise LimitExceededError(
                            f"brackets nested deeper than {self.max_nesting} levels refused (limit"
                            f" Limits.max_nesting={self.max_nesting}; raise it with Environment("
                            "limits=Limits(max_nesting=...)) if this template is trusted)",
                            line, column, self.name, self.original_source)
                elif value in ")]}":
                    if not brackets:
                        raise self.error(f"unexpected '{value}'", pos)
                    opener = brackets.pop()[0]
                    if _CLOSING[value] != opener:
                        expected = {"(": ")", "[": "]", "{": "}"}[opener]
                        raise self.error(f"unexpected '{value}', expected '{expected}'", pos)
                tokens.append((OPERATORS[value], value, pos))
            elif group == "NAME":
                tokens.append((KEYWORDS.get(value, "NAME"), value, pos))
            elif group != "ws":
                tokens.append((group, value, pos))  # type: ignore[arg-type]
            pos = match.end()


def scan(source: str, *, trim_blocks: bool = False, lstrip_blocks: bool = False,
         keep_trailing_newline: bool = False, name: Optional[str] = None,
         max_nesting: int = 128) -> Tuple[List[Segment], LineIndex, str]:
    """Scan ``source``; returns the segments, a line index and the normalised source."""
    normalised = normalize_source(source, keep_trailing_newline)
    scanner = Scanner(normalised, trim_blocks=trim_blocks, lstrip_blocks=lstrip_blocks,
                      name=name, original_source=source, max_nesting=max_nesting)
    return scanner.scan(), scanner.lines, normalised
