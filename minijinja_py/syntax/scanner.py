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

import re
import sys
TYPE_CHECKING = False  # typing is not imported at run time: it costs milliseconds
if TYPE_CHECKING:  # pragma: no cover
    from typing import Dict, List, Optional, Tuple

from .regex import compile as _compile_re  # re.compile, without its cost (see there)
from ..exceptions import LimitExceededError, TemplateSyntaxError
from ..guard.limits import check_deadline

#: Tags and tokens read between two looks at the parse deadline (Limits.max_seconds): a look
#: reads the clock, about as costly as reading a token.
DEADLINE_EVERY = 1024

# Segment kinds.
DATA = "data"
VAR = "var"
BLOCK = "block"
ERROR = "error"  # see ErrorSegment

# A token is (type, value, offset): offset is into the normalised source.
if TYPE_CHECKING:  # pragma: no cover
    Token = Tuple[str, str, int]

_TAG_OPEN_RE = _compile_re(r"\{([{%#])([-+]?)")  # a tag's start and its modifier
_WHITESPACE_RE = _compile_re(r"\s*")
_LSTRIPPABLE_RE = _compile_re(r"\s+")

# The order of the alternatives follows Jinja2's lexer: whitespace, float, integer, name,
# string, operator. A float may not start right after a dot, so `l.0.1` is l[0][1].
_TOKEN_PATTERNS = (
    ("FLOAT", r"(?<!\.)(?:\d+_)*\d+(?:(?:\.(?:\d+_)*\d+)?[eE][+\-]?(?:\d+_)*\d+|\.(?:\d+_)*\d+)"),
    ("INT", r"0[bB](?:_?[01])+|0[oO](?:_?[0-7])+|0[xX](?:_?[0-9a-fA-F])+|[1-9](?:_?\d)*|0(?:_?0)*"),
    ("NAME", r"[^\W\d]\w*"),
    ("STRING", r"'[^'\\]*(?:\\.[^'\\]*)*'" "|" r'"[^"\\]*(?:\\.[^"\\]*)*"'),
    ("op", r"\*\*|//|==|!=|>=|<=|[+\-*/%~\[\](){}<>=.:|,;]"),
)

# The ends of a `{{ }}` tag and of a `{% %}` tag (the `\n` after `%}` is only part of the end
# with trim_blocks).
_VAR_END = r"-\}\}\s*|\}\}"
_BLOCK_END = r"\+%\}|-%\}\s*|%\}(?P<nl>\n)?"

# Patterns most templates never need, compiled on first use, which a cold start would
# otherwise pay for (re compiles in Python, 0.1 ms apiece, where aot_regex ships no program):
# (pattern, flags) by name.
_RARE_PATTERNS = {
    # one token, or a run of whitespace, in Jinja2's order
    "token": ("(?P<ws>\\s+)|" + "|".join(f"(?P<{name}>{pattern})"
                                         for name, pattern in _TOKEN_PATTERNS), re.S),
    # the end of a `{{` or `{%` tag alone (only a repeated tag needs it)
    "var_end": (_VAR_END, 0),
    "block_end": (_BLOCK_END, 0),
    "newline": (r"\r\n|\r|\n", re.S),
    "raw_begin": (r"\{%([-+]?)\s*raw\s*(?:(-)%\}\s*|%\})", re.S),
    # the ends of a comment and of a raw block, and with trim_blocks (the newline after)
    "comment_end": (r"\+#\}|(-)#\}\s*|#\}", re.S),
    "comment_end_trim": (r"\+#\}|(-)#\}\s*|#\}\n?", re.S),
    "endraw": (r"\{%([-+]?)\s*endraw\s*(?:\+%\}|(-)%\}\s*|%\})", re.S),
    "endraw_trim": (r"\{%([-+]?)\s*endraw\s*(?:\+%\}|(-)%\}\s*|%\}\n?)", re.S),
}
_rare_compiled: "Dict[str, re.Pattern[str]]" = {}


def _rare(name: str) -> "re.Pattern[str]":
    """The pattern ``name`` of _RARE_PATTERNS, compiled the first time it is asked for."""
    pattern = _rare_compiled.get(name)
    if pattern is None:
        pattern = _rare_compiled[name] = _compile_re(*_RARE_PATTERNS[name])
    return pattern


def compile_all_patterns() -> None:
    """Compile the patterns compiled on first use too (for tools/build_regex_programs.py,
    which ships the programs of all of them)."""
    for name in _RARE_PATTERNS:
        _rare(name)


_TOKEN_PATTERNS_BY_NAME = dict(_TOKEN_PATTERNS)
_WORD_RE = _compile_re(r"\w")
# Blanks that are never given back: atomic groups and possessive quantifiers exist from Python
# 3.11. Nothing that follows blanks here can start with a blank, so on 3.10 plain ``\s*`` reads
# the same tokens (it only tries, and fails, to give blanks back before reporting an error).
_BLANKS, _BLANKS_KEPT = (("(?>\\s*)", "\\s*+") if sys.version_info >= (3, 11)
                         else ("\\s*", "\\s*"))
# In tags, one regex call reads the whitespace before a token and the token, or the end of
# either kind of tag (an end of the other kind, or inside brackets, is read again as operators
# with the `token` pattern). Its alternatives are in another order, commonest first: no text
# can match two of them except FLOAT and INT (digits), which keep their order, and operators
# and ends.
_TAG_TOKEN_RE = _compile_re(
    f"{_BLANKS}(?:(?P<vend>{_VAR_END})|(?P<bend>{_BLOCK_END})|"
    + "|".join(f"(?P<{name}>{_TOKEN_PATTERNS_BY_NAME[name]})"
               for name in ("op", "NAME", "FLOAT", "INT", "STRING"))
    + ")",
    re.S,
)
# A whole tag interior that is one name (``{{ x }}``, ``{% endif %}``) then an end: the
# commonest tags, read in one regex call. Matches exactly where _TAG_TOKEN_RE would read a
# NAME and then an end. Groups: blanks, name, blanks, var end, block end, newline of `%}\n`.
_NAME_TAG_RE = _compile_re(
    f"({_BLANKS_KEPT})({_TOKEN_PATTERNS_BY_NAME['NAME']})({_BLANKS_KEPT})(?:({_VAR_END})|("
    + _BLOCK_END.replace("(?P<nl>", "(") + "))",
    re.S,
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
#: The token types that are names to Jinja2 (its lexer makes keywords names).
NAME_KINDS = frozenset(["NAME", *KEYWORDS.values()])
_CLOSING = {")": "(", "]": "[", "}": "{"}
_OPENING = frozenset("([{")
_BRACKETS = frozenset("([{}])")


class Segment:
    """One piece of the template: literal text, a ``{{ }}`` tag or a ``{% %}`` tag.

    ``tokens`` (tags only) is a tuple of tokens: (type, value, offset in the normalised source).
    """

    __slots__ = ("kind", "text", "tokens", "offset", "end")

    def __init__(self, kind: str, offset: int, end: int, text: str = "",
                 tokens: Tuple[Token, ...] = ()) -> None:
        self.kind = kind
        self.text = text
        # a tuple of tuples of strings and ints: the garbage collector stops tracking those
        self.tokens = tokens
        self.offset = offset
        self.end = end

    def __repr__(self) -> str:  # debugging aid
        if self.kind == DATA:
            return f"Segment(data, {self.text!r})"
        return f"Segment({self.kind}, {[t[1] for t in self.tokens]!r})"


class ErrorSegment(Segment):
    """Where the scanner failed, with ``defer_errors``: always the last segment.

    ``error`` is the scanner's TemplateSyntaxError. ``tag_kind`` is VAR or BLOCK when it
    failed inside a tag (``tokens`` are that tag's tokens read before the failure, ``offset``
    the tag's start, ``end`` where the failure is), None elsewhere (a comment or raw block
    without its end). ``at_eof``: the source ended inside the tag, which Jinja2's lexer does
    not report itself (its parser then meets the end of the template).
    """

    __slots__ = ("error", "tag_kind", "at_eof")

    def __init__(self, error: TemplateSyntaxError, tag_kind: Optional[str], offset: int,
                 end: int, tokens: Tuple[Token, ...] = (), at_eof: bool = False) -> None:
        super().__init__(ERROR, offset, end, tokens=tokens)
        self.error = error
        self.tag_kind = tag_kind
        self.at_eof = at_eof


class LineIndex:
    """Maps offsets in the normalised source to 1-based (line, column)."""

    __slots__ = ("starts",)

    def __init__(self, source: str) -> None:
        starts = [0]
        find = source.find
        newline = find("\n")
        while newline != -1:
            starts.append(newline + 1)
            newline = find("\n", newline + 1)
        self.starts = starts

    def position(self, offset: int) -> Tuple[int, int]:
        line = line_number(self.starts, offset)
        return line, offset - self.starts[line - 1] + 1


def line_number(starts: List[int], offset: int) -> int:
    """The 1-based line holding ``offset``, given the offsets where lines start (a binary
    search, as ``bisect.bisect_right``: importing bisect costs a cold start more than the
    few searches a parse makes)."""
    low, high = 0, len(starts)
    while low < high:
        middle = (low + high) // 2
        if offset < starts[middle]:
            high = middle
        else:
            low = middle + 1
    return low


def normalize_source(source: str, keep_trailing_newline: bool) -> str:
    """CRLF and CR become LF; one trailing newline goes unless keep_trailing_newline."""
    if "\r" in source:
        source = _rare("newline").sub("\n", source)
    if not keep_trailing_newline and source.endswith("\n"):
        source = source[:-1]
    return source


class Scanner:
    """Turns normalised source into a list of :class:`Segment`."""

    def __init__(self, source: str, *, trim_blocks: bool, lstrip_blocks: bool,
                 name: Optional[str] = None, original_source: Optional[str] = None,
                 max_nesting: int = 128, defer_errors: bool = False) -> None:
        self.source = source
        # A syntax error ends the segments with an ErrorSegment instead of being raised: the
        # parser raises it when Jinja2's lazy lexer would, after any parse error before it.
        self.defer_errors = defer_errors
        self.max_nesting = max_nesting
        self.trim_blocks = trim_blocks
        self.lstrip_blocks = lstrip_blocks
        self.name = name
        self.original_source = original_source if original_source is not None else source
        self.lines = LineIndex(source)

    # -- errors -------------------------------------------------------------------------
    def error(self, message: str, offset: int) -> TemplateSyntaxError:
        line, column = self.lines.position(min(offset, len(self.source)))
        exc = TemplateSyntaxError(message, line, column, self.name, self.original_source)
        exc._offset = offset  # type: ignore[attr-defined]  # where, for an ErrorSegment
        return exc

    def check_deadline(self, offset: int) -> None:
        """Raise DeadlineExceededError, located at ``offset``, if the parse has run too long."""
        try:
            check_deadline()
        except LimitExceededError as exc:
            exc._locate(*self.lines.position(min(offset, len(self.source))))
            exc._attach_source(self.name, self.original_source)
            raise

    # -- main loop ----------------------------------------------------------------------
    def scan(self) -> List[Segment]:
        segments: List[Segment] = []
        # the tag being read token by token: (kind, start, tokens so far)
        self._tag: Optional[Tuple[str, int, List[Token]]] = None
        try:
            self._scan(segments)
        except TemplateSyntaxError as exc:
            if not self.defer_errors or isinstance(exc, LimitExceededError):
                raise
            tag = self._tag
            if tag is None:
                segments.append(ErrorSegment(exc, None, len(self.source), len(self.source)))
            else:
                kind, start, tokens = tag
                segments.append(ErrorSegment(
                    exc, VAR if kind == "{" else BLOCK, start, getattr(exc, "_offset", start),
                    tuple(tokens), getattr(exc, "_at_eof", False)))
        return segments

    def _scan(self, segments: List[Segment]) -> None:
        source = self.source
        add = segments.append
        pos = 0
        line_starting = True
        length = len(source)
        lstrip_blocks = self.lstrip_blocks
        trim_blocks = self.trim_blocks
        find_tag = _TAG_OPEN_RE.search
        name_tag = _NAME_TAG_RE.match
        token_at = _TAG_TOKEN_RE.match
        keywords = KEYWORDS
        operators = OPERATORS
        # tag interior (up to the first end marker) -> (tokens, body offset, end offset)
        seen: Dict[str, Tuple[Tuple[Token, ...], int, int]] = {}
        seen_blocks: Dict[str, Tuple[Tuple[Token, ...], int, int]] = {}
        countdown = DEADLINE_EVERY  # tags and tokens until the next look at the deadline
        while pos < length:
            countdown -= 1
            if countdown <= 0:
                countdown = DEADLINE_EVERY
                self.check_deadline(pos)
            match = find_tag(source, pos)
            if match is None:
                add(Segment(DATA, pos, length, source[pos:]))
                break
            start, body = match.span()
            kind, modifier = match.groups()
            # a tag that is one name (`{{ x }}`, `{% endif %}`, `{% raw %}`) and its end
            one_name = name_tag(source, body) if kind != "#" else None
            if one_name is not None and not one_name[2].isascii():
                one_name = None  # the general path checks non-ASCII names (see _identifier)
            raw = None
            if one_name is not None and kind == "%" and one_name[2] == "raw":
                # `{% raw %}` is exactly a one-name block tag `raw` not ended by `+%}`
                raw = _rare("raw_begin").match(source, start)
            if start > pos:
                text = source[pos:start]
                if modifier == "-" or (lstrip_blocks and modifier != "+" and kind != "{"):
                    text = self._strip_before_tag(text, modifier, kind != "{", line_starting)
                if text:
                    add(Segment(DATA, pos, start, text))
            if raw is not None:
                pos, line_starting = self._scan_raw(raw, segments)
                continue
            if kind == "#":
                pos, line_starting = self._scan_comment(start, body)
                continue
            # the end that ends this tag: `}}` (group "vend") or `%}` (group "bend")
            end_group = "vend" if kind == "{" else "bend"
            if one_name is not None:
                blank, value, blank_after, var_end, block_end, newline = one_name.groups()
                end = var_end if kind == "{" else block_end
                if end is not None:  # a one-name tag
                    offset = body + len(blank)
                    pos = offset + len(value) + len(blank_after)
                    add(Segment(VAR if kind == "{" else BLOCK, start, pos,
                                tokens=((keywords.get(value, "NAME"), value, offset),)))
                    if newline is not None and not trim_blocks:
                        end = end[:-1]  # `%}` and a newline that trim_blocks would take
                    pos += len(end)
                    line_starting = end.endswith("\n")
                    continue
            # A tag whose text up to the first `}}` (`%}`) is that of an earlier tag that ended
            # there has the same tokens, shifted: templates repeat their tags.
            marker = source.find("}}" if kind == "{" else "%}", body)
            if marker >= 0:
                interior = source[body:marker]
                known = seen.get(interior) if kind == "{" else seen_blocks.get(interior)
                if known is not None:
                    earlier_tokens, earlier_body, earlier_end = known
                    countdown -= len(earlier_tokens)
                    shift = body - earlier_body
                    offset = earlier_end + shift
                    end_re = _rare("var_end" if kind == "{" else "block_end")
                    match = end_re.match(source, offset)
                    end = match.group()  # type: ignore[union-attr]
                    if kind == "%" and not trim_blocks and match["nl"]:  # type: ignore[index]
                        end = end[:-1]  # see above
                    add(Segment(VAR if kind == "{" else BLOCK, start, offset,
                                tokens=tuple([(token_kind, token_value, token_offset + shift)
                                              for token_kind, token_value, token_offset
                                              in earlier_tokens])))
                    pos = offset + len(end)
                    line_starting = end.endswith("\n")
                    continue
            # the tag's tokens, one regex call each; inlined: this is the hot loop
            tokens: List[Token] = []
            push = tokens.append
            brackets: List[Tuple[str, int]] = []
            pos = body
            self._tag = (kind, start, tokens)
            while True:
                countdown -= 1
                if countdown <= 0:
                    countdown = DEADLINE_EVERY
                    self.check_deadline(pos)
                match = token_at(source, pos)
                if match is None:
                    begin = _WHITESPACE_RE.match(source, pos).end()  # type: ignore[union-attr]
                    if begin < length and source[begin].isidentifier():  # `℘` starts a name
                        value, pos = self._identifier(begin)
                        push((keywords.get(value, "NAME"), value, begin))
                        continue
                    self._tag_error(kind, start, pos, brackets)
                group = match.lastgroup  # type: ignore[union-attr]
                value = match[group]  # type: ignore[index]
                pos = match.end()  # type: ignore[union-attr]
                if group == "NAME":
                    if pos < length and source[pos] > "\x7f" or not value.isascii():
                        # identifier characters beyond \w (`a·`, `℘`): rare, checked here
                        value, pos = self._identifier(pos - len(value))
                    push((keywords.get(value, "NAME"), value, pos - len(value)))
                elif group == "op":
                    if value in _BRACKETS:
                        self._bracket(value, pos - len(value), brackets)
                    push((operators[value], value, pos - len(value)))
                elif group == "vend" or group == "bend":
                    offset = match.start(group)  # type: ignore[union-attr]
                    if group == end_group and not brackets:
                        if match["nl"] is not None and not trim_blocks:  # type: ignore[index]
                            value = value[:-1]  # see above
                            pos -= 1
                        segment_tokens = tuple(tokens)
                        add(Segment(VAR if kind == "{" else BLOCK, start, offset,
                                    tokens=segment_tokens))
                        line_starting = value.endswith("\n")
                        if marker - 1 <= offset <= marker:  # it ended at the first marker
                            (seen if kind == "{" else seen_blocks)[interior] = (
                                segment_tokens, body, offset)
                        self._tag = None
                        break
                    # the other tag's end, or an end inside brackets, is operators: in
                    # `{{ {'a': {}}}}` the first `}}` closes two braces
                    value = _rare("token").match(source, offset).group()  # type: ignore[union-attr]
                    pos = offset + len(value)
                    if value in _BRACKETS:
                        self._bracket(value, offset, brackets)
                    push((operators[value], value, offset))
                else:
                    push((group, value, pos - len(value)))  # type: ignore[arg-type]

    def _identifier(self, begin: int) -> Tuple[str, int]:
        """The name starting at ``begin`` that Jinja2 reads there, and where it ends.

        Jinja2 reads a name as a run of word characters and the other characters Python allows
        in identifiers (a middle dot, combining marks, ``℘``...), then refuses one that is not
        a Python identifier (``a²``: ``²`` is a word character but not an identifier one).
        """
        source = self.source
        end = begin
        while end < len(source):
            char = source[end]
            if not (_WORD_RE.match(char) or ("a" + char).isidentifier()):
                break
            end += 1
        value = source[begin:end]
        if not value.isidentifier():
            raise self.error("Invalid character in identifier", begin)
        return value, end

    def _tag_error(self, kind: str, start: int, pos: int,
                   brackets: List[Tuple[str, int]]) -> None:
        """Raise the error for a tag whose next token (at ``pos``, after blanks) is not one."""
        pos = _WHITESPACE_RE.match(self.source, pos).end()  # type: ignore[union-attr]
        if pos >= len(self.source):
            what = "print statement" if kind == "{" else "statement block"
            if brackets:
                exc = self.error(f"unexpected end of template, unclosed '{brackets[-1][0]}'",
                                 brackets[-1][1])
            else:
                exc = self.error(f"unexpected end of template, expected 'end of {what}'.", start)
            exc._at_eof = True  # type: ignore[attr-defined]
            raise exc
        char = self.source[pos]
        raise self.error(f"unexpected char {char!r} at {pos}", pos)

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
        end = _rare("endraw_trim" if self.trim_blocks else "endraw").search(self.source,
                                                                          body_start)
        if end is None:  # (Jinja2's line: after the raw tag, where its lexer looks for the end)
            raise self.error("Missing end of raw directive", body_start)
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
        end = _rare("comment_end_trim" if self.trim_blocks else "comment_end").search(
            self.source, body_start)
        if end is None:
            raise self.error("Missing end of comment tag", start)
        return end.end(), end.group(0).endswith("\n")

    def _bracket(self, value: str, pos: int, brackets: List[Tuple[str, int]]) -> None:
        if value in _OPENING:
            brackets.append((value, pos))
            if len(brackets) > self.max_nesting:
                line, column = self.lines.position(pos)
                raise LimitExceededError(
                    f"brackets nested deeper than {self.max_nesting} levels refused (limit"
                    f" Limits.max_nesting={self.max_nesting}; raise it with Environment("
                    "limits=Limits(max_nesting=...)) if this template is trusted)",
                    line, column, self.name, self.original_source)
        elif value in _CLOSING:
            if not brackets:
                raise self.error(f"unexpected '{value}'", pos)
            opener = brackets.pop()[0]
            if _CLOSING[value] != opener:
                expected = {"(": ")", "[": "]", "{": "}"}[opener]
                raise self.error(f"unexpected '{value}', expected '{expected}'", pos)


def scan(source: str, *, trim_blocks: bool = False, lstrip_blocks: bool = False,
         keep_trailing_newline: bool = False, name: Optional[str] = None,
         max_nesting: int = 128, defer_errors: bool = False,
         ) -> Tuple[List[Segment], LineIndex, str]:
    """Scan ``source``; returns the segments, a line index and the normalised source.

    With ``defer_errors``, a syntax error is not raised but ends the segments as an
    :class:`ErrorSegment`."""
    normalised = normalize_source(source, keep_trailing_newline)
    scanner = Scanner(normalised, trim_blocks=trim_blocks, lstrip_blocks=lstrip_blocks,
                      name=name, original_source=source, max_nesting=max_nesting,
                      defer_errors=defer_errors)
    return scanner.scan(), scanner.lines, normalised
