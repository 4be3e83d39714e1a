"""Parser: scanner segments -> AST, using the grammar's LALR tables for every tag's interior.

Second step of the flow. Each ``{{ }}`` tag is parsed with the grammar's ``print_tag`` start
symbol and each ``{% %}`` tag with the start symbol of its statement, by the table driver of
:mod:`lalr` over the scanner's tokens, ``(type, text, offset)`` tuples taken as they are. A
transformer (:class:`ToAst`, one per parse) maps grammar rules straight onto :mod:`nodes`
classes during the parse; a node takes the position of its first token, worked out from the
token's offset. Statements are then nested by a block assembler driven by the ``_BLOCKS`` table
(opener -> middles and closer), which produces Jinja2's nesting messages ("Encountered unknown
tag 'endfor'. Jinja was looking for ...") from its stack.

Parsing is bounded: the scanner, the driver and the assembler look at the parse deadline
(``Limits.max_seconds``) every thousand tokens or tags, and an operator chain nested deeper
than the depth check allows is refused as soon as it is (see :class:`ToAst`).

One file past 1,000 lines: the rule callbacks of :class:`ToAst`, the block table and the
assembler are one mapping from the grammar to the AST, changed together whenever the grammar
changes. Jinja2's exact syntax error messages are worked out elsewhere (:mod:`diagnostics`).
"""

from __future__ import annotations

import _thread
import warnings
TYPE_CHECKING = False  # typing is not imported at run time: it costs milliseconds
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any, Dict, Iterable, List, Optional, Tuple

from . import lalr
from . import nodes as n
from .._startup.gcpause import GC_PAUSE_SOURCE, PausedGC
from ..exceptions import LimitExceededError, TemplateAssertionError, TemplateSyntaxError
from ..guard.limits import check_deadline
from .scanner import (BLOCK, DATA, DEADLINE_EVERY, ERROR, NAME_KINDS, VAR, LineIndex, Segment,
                      line_number, scan)

DEFAULT_MAX_NESTING = 128
#: The extensions' statements transformers' chat environment has: ``{% generation %}``.
CHAT_EXTENSION_TAGS = ("generation",)
START_SYMBOLS = ["print_tag", "expr_tag", "if_tag", "for_tag", "set_tag", "macro_tag",
                  "signature_tag", "filter_tag", "with_tag"]

# A token of a tag's interior is the scanner's tuple (type, text, offset in the normalised
# source): the LALR driver and the transformer take them as they are (making an object per
# token cost more than the rest of reading it). Nodes get their line and column from the
# offset of their token, through the parse's :func:`_position_function`.
if TYPE_CHECKING:  # pragma: no cover
    Token = Tuple[str, str, int]

_NO_OFFSET = float("inf")

_tables: Any = None
_tables_lock = _thread.allocate_lock()


def get_tables() -> Any:
    """The LALR tables compiled from grammar/jinja.lark (loaded once per process)."""
    global _tables
    if _tables is None:
        with _tables_lock:
            if _tables is None:
                _tables = lalr.load_tables(START_SYMBOLS)
    return _tables


def _position_function(starts: List[int]) -> Any:
    """``position(offset) -> (line, column)`` over the line starts of a source. The tokens of a
    tag mostly share a line, so the line is only looked up again past its ends."""
    last_line = len(starts)
    line = 1
    line_start = 0
    next_start = starts[1] if last_line > 1 else _NO_OFFSET

    def position(offset: int) -> Tuple[int, int]:
        nonlocal line, line_start, next_start
        if offset >= next_start or offset < line_start:
            if offset >= next_start and (line + 1 >= last_line or offset < starts[line + 1]):
                line += 1  # the next line, the commonest move
            else:
                line = line_number(starts, offset)
            line_start = starts[line - 1]
            next_start = starts[line] if line < last_line else _NO_OFFSET
        return line, offset - line_start + 1

    return position


# ---- the transformer ------------------------------------------------------------------------
class CallArgs:
    """Arguments of a call, filter or test, as parsed."""

    __slots__ = ("args", "kwargs", "dyn_args", "dyn_kwargs")

    def __init__(self, args: list, kwargs: list, dyn_args: Any, dyn_kwargs: Any) -> None:
        self.args = args
        self.kwargs = kwargs
        self.dyn_args = dyn_args
        self.dyn_kwargs = dyn_kwargs


_NO_ARGS = CallArgs([], [], None, None)
_CONSTANT_NAMES = {"true": True, "True": True, "false": False, "False": False,
                   "none": None, "None": None}


def unescape_string(literal: str, at: Optional[Tuple[int, int]] = None) -> str:
    """Decode a quoted string literal the way Jinja2 does (Python escapes; unknown kept).
    ``at`` is the (line, column) a malformed escape is reported at."""
    body = literal[1:-1]
    if "\\" not in body:
        return body
    simple = _simple_unescape(body)
    if simple is not None:
        return simple
    try:
        with warnings.catch_warnings():
            # Python warns about unknown escapes such as "\d"; Jinja2 keeps them verbatim.
            warnings.simplefilter("ignore", DeprecationWarning)
            return body.encode("ascii", "backslashreplace").decode("unicode-escape")
    except Exception as exc:  # noqa: BLE001 - any codec complaint is a syntax error
        line, column = at if at is not None else (None, None)
        raise TemplateSyntaxError(str(exc).split(":")[-1].strip(), line, column) from None


#: The escapes most templates use, decoded as Python's unicode-escape codec decodes them
_SIMPLE_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "'": "'", '"': '"'}


def _simple_unescape(body: str) -> Optional[str]:
    """``body`` decoded when its only escapes are :data:`_SIMPLE_ESCAPES`, else None (for
    the codec, whose module a cold start then never imports)."""
    parts = body.split("\\")
    decoded = [parts[0]]
    index, last = 1, len(parts) - 1
    while index <= last:
        part = parts[index]
        if part:
            character = _SIMPLE_ESCAPES.get(part[0])
            if character is None:
                return None
            decoded.append(character)
            decoded.append(part[1:])
            index += 1
        elif index < last:  # an escaped backslash: the text after it is plain
            decoded.append("\\")
            decoded.append(parts[index + 1])
            index += 2
        else:  # a lone backslash at the end
            return None
    return "".join(decoded)


_LONG_INT = 4300  # characters: shorter integer literals always convert (Python's default limit)
_UNLIMITED_INT_DIGITS = 100_000  # the most decimal digits converted when Python sets no limit


def _int_literal(text: str) -> int:
    """The value of an INT token's text. A decimal literal longer than Python converts (its
    int-string conversion limit, ``sys.get_int_max_str_digits()``, 4,300 digits by default)
    raises ValueError with the message of the syntax error (Jinja2 lets int()'s escape)."""
    text = text.replace("_", "")
    if len(text) > _LONG_INT and text[:2].lower() not in ("0x", "0o", "0b"):
        import sys

        limit = getattr(sys, "get_int_max_str_digits", lambda: 4300)() or _UNLIMITED_INT_DIGITS
        digits = len(text.lstrip("0")) or 1
        if digits > limit:
            raise ValueError(f"integer literal of {digits:,} digits refused: integers are "
                             f"converted from at most {limit:,} digits")
    return int(text, 0)


def _is_tok(item: Any, kind: str) -> bool:
    return isinstance(item, tuple) and item[0] == kind


def _chain_filters(items: list) -> Optional[n.Node]:
    node: Optional[n.Node] = None
    for name, args in items:
        node = n.Filter(node, name, args.args, args.kwargs, args.dyn_args, args.dyn_kwargs)
    return node


_Const, _Name, _Getattr, _Getitem, _BinOp = n.Const, n.Name, n.Getattr, n.Getitem, n.BinOp


class ToAst:
    """Grammar rule (or alias) name -> AST node; called by the LALR driver with the rule's
    children: nodes, tokens (scanner tuples) and what other methods returned. One per parse:
    it holds the parse's ``position`` function and the tag's parenthesized nodes."""

    __slots__ = ("position", "parenthesized", "max_nesting", "chain_limit", "chain_end",
                 "chain_length", "max_stack", "lalr_callbacks", "deferred")

    def __init__(self, position: Any, max_nesting: int = DEFAULT_MAX_NESTING,
                 max_rule_size: int = 6) -> None:
        self.position = position
        # ids of nodes written in parentheses, in the tag being parsed: `(x is a) is b` is
        # allowed, `x is a is b` is not; and of tests with call parentheses, after which
        # Jinja2 reads another test too (`x is a() is b`)
        self.parenthesized: set = set()
        # Operator chains (`a.b.c...`, `1 + 1 + ...`, `x|f|f...`, `- - 1`) nest one level per
        # operator without brackets. The parser's depth check refuses an AST deeper than
        # 4 * max_nesting once it is built; a chain longer than that is refused as soon as it
        # is, so that a megabyte of `.b` costs no more than reading it: `chain_length` nodes,
        # each the child of the next, end with `chain_end`.
        self.max_nesting = max_nesting
        self.chain_limit = 4 * max_nesting
        self.chain_end: Any = None
        self.chain_length = 0
        # The LALR stack holds fewer than max_rule_size symbols per level of the tree being
        # built; a level is a node, or one of a few rules per level of brackets (at most
        # max_nesting, see the scanner). A deeper stack therefore means an AST deeper than
        # the depth check allows (twice over, for the margin): refused as the stack grows,
        # before a right-nested chain (`- - - ... 1`, `not not ...`) is even reduced.
        self.max_stack = 2 * max_rule_size * (8 * max_nesting + 4)
        self.lalr_callbacks: Any = None  # the driver's bound methods (lalr.Tables.callbacks)
        # The first error Jinja2 only finds compiling the parsed template (Python's SyntaxError
        # on its generated code): raised once the whole template has parsed (Parser.parse).
        self.deferred: Optional[TemplateSyntaxError] = None

    # -- helpers --------------------------------------------------------------------------
    def chain(self, node: n.Node, child: Any) -> n.Node:
        """``node``, whose child is ``child``: counts the chain of nodes it ends."""
        if child is self.chain_end:
            self.chain_length += 1
            if self.chain_length > self.chain_limit:
                raise self.too_deep(node)
        else:
            self.chain_length = 1
        self.chain_end = node
        return node

    def too_deep(self, item: Any) -> Exception:
        """The error for an expression nested deeper than the limits allow, at ``item``."""
        if isinstance(item, n.Node):
            line, column = item.lineno, item.column
        else:
            line, column = self.position(item[2])
        return _nesting_error(self.max_nesting, "expression or block nesting", line, column,
                              None, None)

    # -- helpers --------------------------------------------------------------------------
    def at(self, node: n.Node, item: Any) -> n.Node:
        """``node`` positioned at ``item`` (a token or a node)."""
        if isinstance(item, n.Node):
            node.lineno = item.lineno
            node.column = item.column
        else:
            node.lineno, node.column = self.position(item[2])
        return node

    def error(self, message: str, item: Any) -> TemplateSyntaxError:
        """A syntax error located at ``item`` (a token or a node)."""
        if isinstance(item, n.Node):
            return TemplateSyntaxError(message, item.lineno, item.column)
        return TemplateSyntaxError(message, *self.position(item[2]))

    def int_value(self, token: Any) -> int:
        try:
            return _int_literal(token[1])
        except ValueError as exc:
            raise self.error(str(exc), token) from None

    # -- start symbols --------------------------------------------------------------------
    def print_tag(self, c):
        return c[0]

    expr_tag = print_tag
    if_tag = print_tag

    def for_tag(self, c):
        target, iterable = c[0], c[2]
        test = None
        recursive = False
        rest = c[3:]
        if rest and _is_tok(rest[0], "IF"):
            test = rest[1]
            rest = rest[2:]
        if rest:
            if rest[0][1] != "recursive":
                raise self.error(f"expected 'recursive', got {rest[0][1]!r}", rest[0])
            recursive = True
        self._check_assignable(target)
        return ("for", target, iterable, test, recursive)

    def set_assign(self, c):
        self._check_assignable(c[0])
        return ("assign", c[0], c[2])

    def set_block(self, c):
        if isinstance(c[0], n.TupleTarget):
            raise self.error("a block assignment takes one name", c[0])
        self._check_assignable(c[0])
        return ("block", c[0], _chain_filters(c[1:]))

    def _check_assignable(self, target: n.Node) -> None:
        """Jinja2 reads ``true``/``none``/... as constants even where a name is assigned."""
        if isinstance(target, n.NameTarget) and target.name in _CONSTANT_NAMES:
            raise self.error("can't assign to 'const'", target)
        if isinstance(target, n.TupleTarget) and any(
                isinstance(item, n.NameTarget) and item.name in _CONSTANT_NAMES
                for item in _targets(target)):
            raise self.error("can't assign to 'tuple'", target)

    def macro_tag(self, c):
        if c[0][1] in _CONSTANT_NAMES:  # Jinja2's Name.can_assign()
            raise self.error("can't assign to 'name'", c[0])
        params = c[2] if isinstance(c[2], list) else []
        return (c[0][1], params)

    def signature_tag(self, c):
        return c[1] if isinstance(c[1], list) else []

    def filter_tag(self, c):
        return _chain_filters(c)

    def with_tag(self, c):
        return c[::2]  # with_assign (COMMA with_assign)* [COMMA]

    # -- statement pieces -----------------------------------------------------------------
    def target(self, c):
        return c[0]

    def target_tuple(self, c):
        items = [item for item in c if isinstance(item, n.Node)]
        return self.at(n.TupleTarget(items), c[0])

    def target_paren(self, c):
        return c[1]

    def target_name(self, c):
        return self.at(n.NameTarget(c[0][1]), c[0])

    def target_nsref(self, c):
        return self.at(n.NSRef(c[0][1], c[2][1]), c[0])

    def params(self, c):
        params = c[::2]  # param (COMMA param)* [COMMA]
        seen_default = False
        # a parameter named twice is refused by the compiler (Python's SyntaxError in Jinja2)
        for name, default, token in params:
            if default is not None:
                seen_default = True
            elif seen_default:
                raise self.error("non-default argument follows default argument", token)
        return [(name, default) for name, default, _ in params]

    def param(self, c):
        if c[0][1] in _CONSTANT_NAMES:  # Jinja2's Name.can_assign()
            raise self.error("can't assign to 'name'", c[0])
        return (c[0][1], c[2] if len(c) > 2 else None, c[0])

    def with_assign(self, c):
        if any(isinstance(item, n.NSRef) for item in _targets(c[0])):
            raise self.error("can't assign to a namespace attribute in `with`", c[0])
        self._check_assignable(c[0])
        return (c[0], c[2])

    def filter_head(self, c):
        return (c[0], c[1] if len(c) > 1 else _NO_ARGS)

    def filter_item(self, c):
        return (c[1], c[2] if len(c) > 2 else _NO_ARGS)

    # -- expressions ----------------------------------------------------------------------
    def tuple(self, c):
        return self.at(n.TupleLit([item for item in c if isinstance(item, n.Node)]), c[0])

    def paren(self, c):
        self.parenthesized.add(id(c[1]))
        return c[1]

    def empty_tuple(self, c):
        return self.at(n.TupleLit([]), c[0])

    def condexpr(self, c):
        expr2 = c[4] if len(c) > 4 else None
        node = self.at(n.CondExpr(c[2], c[0], expr2), c[1])
        return self.chain(node, c[0] if expr2 is None or c[0] is self.chain_end else expr2)

    def or_op(self, c):
        return self.chain(self.at(n.Or(c[0], c[2]), c[1]), c[0])

    def and_op(self, c):
        return self.chain(self.at(n.And(c[0], c[2]), c[1]), c[0])

    def not_op(self, c):
        return self.chain(self.at(n.Not(c[1]), c[0]), c[1])

    def compare(self, c):
        # positioned at the first operator: `a < b` fails "at" the `<`
        return self.at(n.Compare(c[0], [(op, right) for op, right, _ in c[1:]]), c[1][2])

    def comparison(self, c):
        op, token = c[0]
        return (op, c[1], token)

    def comp_op(self, c):
        if len(c) == 2:
            return ("notin", c[0])
        token = c[0]
        return (token[1] if token[0] != "IN" else "in", token)

    def binop(self, c):
        op = c[1]
        node = _BinOp(op[1], c[0], c[2])
        node.lineno, node.column = self.position(op[2])
        return self.chain(node, c[0])

    def concat(self, c):
        return self.at(n.Concat([item for item in c if isinstance(item, n.Node)]), c[1])

    def filter(self, c):
        args = c[3] if len(c) > 3 else _NO_ARGS
        return self.chain(self.at(n.Filter(c[0], c[2], args.args, args.kwargs, args.dyn_args,
                                           args.dyn_kwargs), c[1]), c[0])

    def test(self, c):
        node = c[0]
        if (isinstance(node, n.Test) and not node.args and not node.kwargs
                and id(node) not in self.parenthesized):
            raise self.error("You cannot chain multiple tests with is", c[1])
        rest = c[2:]
        negated = False
        if rest and _is_tok(rest[0], "NOT"):
            negated = True
            rest = rest[1:]
        name = rest[0]
        args = _NO_ARGS
        if len(rest) > 1:
            arg = rest[1]
            args = arg if isinstance(arg, CallArgs) else CallArgs([arg], [], None, None)
        test = self.chain(self.at(n.Test(node, name, args.args, args.kwargs, args.dyn_args,
                                         args.dyn_kwargs, negated), c[1]), node)
        if len(rest) > 1 and isinstance(rest[1], CallArgs):
            self.parenthesized.add(id(test))
        return test

    def neg(self, c):
        return self.chain(self.at(n.Neg(c[1]), c[0]), c[1])

    def pos(self, c):
        return self.chain(self.at(n.Pos(c[1]), c[0]), c[1])

    def getattr(self, c):
        token = c[2]
        if token[0] == "INT":
            index = self.at(_Const(self.int_value(token)), token)
            return self.chain(self.at(_Getitem(c[0], index), c[1]), c[0])
        node = _Getattr(c[0], token[1])
        node.lineno, node.column = self.position(c[1][2])
        return self.chain(node, c[0])

    def getitem(self, c):
        subscripts = c[2]
        bracket = c[1]
        arg = (subscripts[0] if len(subscripts) == 1
               else self.at(n.TupleLit(subscripts), bracket))
        node = _Getitem(c[0], arg)
        node.lineno, node.column = self.position(bracket[2])
        return self.chain(node, c[0])

    def getitem_empty(self, c):
        return self.chain(self.at(_Getitem(c[0], self.at(n.TupleLit([]), c[1])), c[1]), c[0])

    def subscripts(self, c):
        return [item for item in c if isinstance(item, n.Node)]

    def slice(self, c):
        parts: List[Optional[n.Node]] = [None, None, None]
        index = 0
        for item in c:
            if _is_tok(item, "COLON"):
                index += 1
            else:
                parts[index] = item
        return self.at(n.Slice(*parts), c[0])

    def call(self, c):
        args = c[1]
        return self.chain(self.at(n.Call(c[0], args.args, args.kwargs, args.dyn_args,
                                         args.dyn_kwargs), c[0]), c[0])

    def call_args(self, c):
        args, kwargs = [], []
        dyn_args = dyn_kwargs = None
        for kind, value, token in c[1:-1:2]:  # LPAR [argument (COMMA argument)* [COMMA]] RPAR
            # Jinja2's order: positional, keyword, *args, **kwargs.
            if kind == "positional":
                if kwargs or dyn_args is not None or dyn_kwargs is not None:
                    raise self.error("invalid syntax for function call expression", token)
                args.append(value)
            elif kind == "keyword":
                if dyn_kwargs is not None:
                    raise self.error("invalid syntax for function call expression", token)
                kwargs.append(value)
            elif kind == "star":
                if dyn_args is not None or dyn_kwargs is not None:
                    raise self.error("invalid syntax for function call expression", token)
                dyn_args = value
            else:
                if dyn_kwargs is not None:
                    raise self.error("invalid syntax for function call expression", token)
                dyn_kwargs = value
        return CallArgs(args, kwargs, dyn_args, dyn_kwargs)

    def positional_arg(self, c):
        return ("positional", c[0], c[0])

    def keyword_arg(self, c):
        return ("keyword", (c[0][1], c[2]), c[0])

    def star_arg(self, c):
        return ("star", c[1], c[0])

    def starstar_arg(self, c):
        return ("starstar", c[1], c[0])

    def filter_name(self, c):
        return ".".join([item[1] for item in c if item[0] != "DOT"])

    def test_name(self, c):
        return ".".join([item[1] for item in c if item[0] != "DOT"])

    def attr_name(self, c):
        return c[0]

    keyword_name = attr_name
    test_keyword = attr_name

    def name(self, c):
        token = c[0]
        value = token[1]
        if value in _CONSTANT_NAMES:
            node = _Const(_CONSTANT_NAMES[value])
        else:
            node = _Name(value)
        node.lineno, node.column = self.position(token[2])
        return node

    def string(self, c):
        token = c[0]
        position = self.position(token[2])
        if len(c) == 1:
            value = unescape_string(token[1], position)
        else:
            value = "".join([unescape_string(t[1], self.position(t[2])) for t in c])
            position = self.position(token[2])
        node = _Const(value)
        node.lineno, node.column = position
        return node

    def int(self, c):
        token = c[0]
        text = token[1]
        if len(text) > _LONG_INT:
            node = _Const(self.int_value(token))
        else:
            node = _Const(int(text.replace("_", ""), 0))
        node.lineno, node.column = self.position(token[2])
        return node

    def float(self, c):
        return self.at(_Const(float(c[0][1].replace("_", ""))), c[0])

    def list_lit(self, c):
        return self.at(n.ListLit([item for item in c if isinstance(item, n.Node)]), c[0])

    def dict_lit(self, c):
        return self.at(n.DictLit(c[1:-1:2]), c[0])  # LBRACE [pair (COMMA pair)* [COMMA]] RBRACE

    def pair(self, c):
        return (c[0], c[2])


# ---- the block assembler --------------------------------------------------------------------
# opener -> (middle tags it accepts, its closer)
_BLOCKS: Dict[str, Tuple[Tuple[str, ...], str]] = {
    "if": (("elif", "else"), "endif"),
    "for": (("else",), "endfor"),
    "macro": ((), "endmacro"),
    "call": ((), "endcall"),
    "filter": ((), "endfilter"),
    "set": ((), "endset"),
    "with": ((), "endwith"),
    "generation": ((), "endgeneration"),
    "block": ((), "endblock"),
    "autoescape": ((), "endautoescape"),
}
_NO_LOADER_TAGS = ("include", "import", "from", "extends")


class _Open:
    """A block being assembled: its opening tag, the head it parsed and the bodies so far."""

    __slots__ = ("tag", "head", "bodies", "lineno", "column", "middle", "closed_at")

    def __init__(self, tag: str, head: Any, lineno: int, column: int) -> None:
        self.tag = tag
        self.head = head
        self.bodies: List[Tuple[str, Any, list]] = [(tag, head, [])]
        self.lineno = lineno
        self.column = column
        self.middle = tag
        self.closed_at = 0  # offset of what follows the closing tag's name (Jinja2's line of
        # an error found closing the block)

    @property
    def body(self) -> list:
        return self.bodies[-1][2]

    def looking_for(self) -> Tuple[str, ...]:
        middles, closer = _BLOCKS[self.tag]
        if self.middle == "else":
            return (closer,)
        # Jinja2's own order: `for` looks for endfor/else, `if` for elif/else/endif
        return (closer,) + middles if self.tag == "for" else middles + (closer,)


class Parser:
    """Parses one template source into an :class:`nodes.Template`."""

    def __init__(self, source: str, *, name: Optional[str] = None,
                 extension_tags: Iterable[str] = CHAT_EXTENSION_TAGS, trim_blocks: bool = False,
                 lstrip_blocks: bool = False, keep_trailing_newline: bool = False,
                 max_nesting: int = DEFAULT_MAX_NESTING) -> None:
        self.source = source
        self.name = name
        self.max_nesting = max_nesting
        self.segments, self.lines, self.normalised = scan(
            source, trim_blocks=trim_blocks, lstrip_blocks=lstrip_blocks,
            keep_trailing_newline=keep_trailing_newline, name=name, max_nesting=max_nesting,
            defer_errors=True)
        # where the scanner failed, if it did: raised once the segments before it are parsed,
        # as Jinja2's lazy lexer raises its error after any parse error before it
        self.scan_error: Any = None
        if self.segments and self.segments[-1].kind == ERROR:
            self.scan_error = self.segments.pop()
        self.tables = get_tables()
        self.max_depth = 1  # the most blocks open at once (+1), and the most levels an
        self.max_tag_depth = 0  # expression of one tag can have: see _check_depth
        self.position = _position_function(self.lines.starts)
        self.block_names: set = set()  # `{% block %}` names: Jinja2 refuses one defined twice
        # the statements of the environment's extensions (`do`, `generation`) it accepts
        self.extension_tags = frozenset(extension_tags)
        self.transformer = ToAst(self.position, max_nesting, self.tables.max_rule_size)
        self.stack: List[_Open] = []  # the open blocks, innermost last (during parse())

    # -- helpers -------------------------------------------------------------------------
    def error(self, message: str, lineno: int, column: Optional[int]) -> TemplateSyntaxError:
        return TemplateSyntaxError(message, lineno, column, self.name, self.source)

    def check_deadline(self, lineno: Optional[int], column: Optional[int]) -> None:
        """Raise DeadlineExceededError, located there, if the parse has run too long."""
        try:
            check_deadline()
        except LimitExceededError as exc:
            exc._locate(lineno or None, column or None)
            exc._attach_source(self.name, self.source)
            raise

    def parse_tokens(self, tokens: list, start: str, segment: Segment) -> Any:
        """Run the LALR parser over one tag's tokens (all of them or its head's) from the given
        start symbol. A tag it refuses is reported with Jinja2's error (see jinja_error)."""
        if not tokens:
            what = "print statement" if start == "print_tag" else "statement block"
            raise self.jinja_error(segment, f"Expected an expression, got 'end of {what}'",
                                   segment.end)
        count = len(tokens)
        depth = count if count <= lalr.TRACE_TOKENS else _expression_depth_bound(tokens)
        if depth > self.max_tag_depth:
            self.max_tag_depth = depth
        transformer = self.transformer
        if transformer.parenthesized:
            transformer.parenthesized.clear()  # it only holds nodes of the tag being parsed
        try:
            return lalr.parse(self.tables, tokens, start, transformer)
        except lalr.ParseError as exc:
            token = exc.token
            end = "variable_end" if segment.kind == VAR else "block_end"
            raise self.jinja_error(segment, f"unexpected {_describe(token, end)!r}",
                                   segment.end if token is None else token[2]) from None
        except TemplateSyntaxError as exc:  # a check of the transformer's
            raise self.jinja_error(segment, exc) from None

    def jinja_error(self, segment: Segment, fallback: Any = None,
                    offset: Optional[int] = None) -> TemplateSyntaxError:
        """The error Jinja2 raises reading this tag (see :mod:`diagnostics`), which the parser
        refused; ``fallback`` when Jinja2 raises none there: an exception, or a message located
        at ``offset``."""
        role, block_name = self._role(segment)
        if segment.kind == ERROR:
            if segment.at_eof:  # Jinja2's end of template: on the line of the last token
                tokens = segment.tokens
                end = ("eof", "", tokens[-1][2] if tokens else segment.offset)
            else:
                end = ("error", segment.error, segment.end)
        else:
            end = ("variable_end" if segment.kind == VAR else "block_end", "", segment.end)
        from .jinja2_errors import diagnose  # only ever needed for a template in error

        try:
            found = diagnose(segment.tokens, end, unescape_string, role, block_name,
                             self.extension_tags)
        except LimitExceededError as exc:  # the parse deadline
            exc._locate(*self.position(segment.offset))
            exc._attach_source(self.name, self.source)
            raise
        if found is None:
            if isinstance(fallback, TemplateSyntaxError):
                fallback._attach_source(self.name, self.source)
                return fallback
            return self.error(fallback, *self.position(offset if offset is not None
                                                       else segment.offset))
        message, at, cls, ready = found
        if ready is not None:
            return ready
        line, column = self.position(at)
        return cls(message, line, column, self.name, self.source)

    def _role(self, segment: Segment) -> Tuple[str, Optional[str]]:
        """What a tag is to the innermost open block, for :func:`diagnostics.diagnose`."""
        kind = segment.tag_kind if segment.kind == ERROR else segment.kind  # type: ignore
        if kind == VAR:
            return "print", None
        tokens = segment.tokens
        if tokens and tokens[0][0] in NAME_KINDS and self.stack:
            tag = tokens[0][1]
            top = self.stack[-1]
            if top.tag in _BLOCKS:
                middles, closer = _BLOCKS[top.tag]
                if tag == closer:
                    return "closer", top.head[0] if top.tag == "block" else None
                if tag in middles and top.middle != "else":
                    return "middle", None
        return "statement", None

    def _scan_error(self, segment: Any, stack: List[_Open]) -> TemplateSyntaxError:
        """The error of the scanner's ErrorSegment, or the one Jinja2 raises before it."""
        tokens = segment.tokens
        if segment.tag_kind is None:
            return segment.error
        if segment.tag_kind == BLOCK and tokens and tokens[0][0] in NAME_KINDS:
            kind, tag, offset = tokens[0]
            if (self._role(segment)[0] == "statement"
                    and self._handler(kind, tag) is None):
                return self._unknown_tag(tag, stack, *self.position(offset))
        return self.jinja_error(segment, segment.error)

    def _defer(self, error: TemplateSyntaxError) -> None:
        """An error Jinja2 only raises compiling the parsed template: raised after the parse."""
        if self.transformer.deferred is None:
            self.transformer.deferred = error

    # -- assembly ------------------------------------------------------------------------
    def parse(self) -> n.Template:
        root = _Open("template", None, 1, 1)
        stack: List[_Open] = [root]
        self.stack = stack
        self.max_tag_depth = 0
        countdown = DEADLINE_EVERY  # segments until the next look at the parse deadline
        try:
            for segment in self.segments:
                countdown -= 1
                if not countdown:
                    countdown = DEADLINE_EVERY
                    self.check_deadline(*self.lines.position(segment.offset))
                kind = segment.kind
                if kind == DATA:
                    self._append_output(stack[-1].body, n.TemplateData(segment.text), segment)
                elif kind == BLOCK:
                    self._statement(segment, stack)
                else:
                    expr = self.parse_tokens(segment.tokens, "print_tag", segment)
                    self._append_output(stack[-1].body, expr, segment)
            if self.scan_error is not None:
                raise self._scan_error(self.scan_error, stack)
        except TemplateSyntaxError as exc:
            exc._attach_source(self.name, self.source)
            raise
        if len(stack) > 1:
            raise self._unknown_tag(None, stack, *self._eof_position())
        if self.transformer.deferred is not None:
            error = self.transformer.deferred
            error._attach_source(self.name, self.source)
            raise error
        template = n.Template(root.body, lineno=1, column=1)
        self._check_depth(template)
        return template

    def _check_depth(self, template: n.Template) -> None:
        """Refuse ASTs deeper than the compiler and evaluator can recurse safely.

        Brackets and blocks are bounded while scanning; this also bounds operator chains such
        as `1 + 1 + ... + 1` and filter chains, which nest without brackets.
        """
        limit = self.max_nesting * 4
        # Each open block adds at most two levels (`if` -> `elif` -> body), and an expression
        # at most _expression_depth_bound: most templates are shallow enough without looking.
        if 4 + 3 * self.max_depth + self.max_tag_depth <= limit:
            return
        # level by level first (cheap); only a template that is too deep is walked again in
        # the order that picks the node the error points at
        level: List[n.Node] = [template]
        depth = 0
        countdown = DEADLINE_EVERY
        while level:
            if depth > limit:
                break
            below: List[n.Node] = []
            extend = below.extend
            for node in level:
                countdown -= 1
                if not countdown:
                    countdown = DEADLINE_EVERY
                    self.check_deadline(node.lineno, node.column)
                extend(node.child_nodes())
            level = below
            depth += 1
        else:
            return
        stack = [(template, 0)]
        while stack:
            node, depth = stack.pop()
            countdown -= 1
            if not countdown:
                countdown = DEADLINE_EVERY
                self.check_deadline(node.lineno, node.column)
            if depth > limit:
                raise _nesting_error(self.max_nesting, "expression or block nesting",
                                     node.lineno, node.column, self.name, self.source)
            for child in node.iter_child_nodes():
                stack.append((child, depth + 1))

    def _eof_position(self) -> Tuple[int, int]:
        """Where the template ends, for "Unexpected end of template": Jinja2 reports the line
        of its last token (the start of the last text, the end of the last tag); the column
        is the end of the source when it is on that line."""
        end_line, end_column = self.lines.position(len(self.normalised))
        if not self.segments:
            return end_line, end_column
        last = self.segments[-1]
        line, column = self.position(last.offset if last.kind == DATA else last.end)
        return (end_line, end_column) if line == end_line else (line, column)

    def _append_output(self, body: list, item: n.Node, segment: Segment) -> None:
        if body and isinstance(body[-1], n.Output):
            if not item.lineno:
                item.lineno, item.column = self.lines.position(segment.offset)
            body[-1].nodes.append(item)
        else:
            line, column = self.lines.position(segment.offset)
            if not item.lineno:
                item.lineno, item.column = line, column
            body.append(n.Output([item], lineno=line, column=column))

    def _unknown_tag(self, name: Optional[str], stack: List[_Open], lineno: int,
                     column: int) -> TemplateSyntaxError:
        expected = set()
        for block in stack[1:]:
            expected.update(block.looking_for())
        if name is None:
            message = ["Unexpected end of template."]
        else:
            message = [f"Encountered unknown tag {name!r}."]
        if len(stack) > 1:
            looking = " or ".join(repr(tag) for tag in stack[-1].looking_for())
            if name is not None and name in expected:
                message.append("You probably made a nesting mistake. Jinja is expecting this tag,"
                               f" but currently looking for {looking}.")
            else:
                message.append(f"Jinja was looking for the following tags: {looking}.")
            message.append(f"The innermost block that needs to be closed is {stack[-1].tag!r}.")
        return self.error(" ".join(message), lineno, column)

    def _statement(self, segment: Segment, stack: List[_Open]) -> None:
        tokens = segment.tokens
        if not tokens:
            raise self.jinja_error(segment, "tag name expected", segment.offset)
        kind, tag, offset = tokens[0]
        if kind not in NAME_KINDS:
            raise self.jinja_error(segment, "tag name expected", offset)
        rest = tokens[1:]
        top = stack[-1]
        if top.tag in _BLOCKS:
            middles, closer = _BLOCKS[top.tag]
            if tag == closer:
                self._expect_end(rest, segment, top)
                top.closed_at = rest[0][2] if rest else segment.end
                stack.pop()
                node = self._close(top)
                stack[-1].body.append(node)
                return
            if tag in middles and top.middle != "else":
                head = None
                rest = _head(rest)
                if tag == "elif":
                    head = self.parse_tokens(rest, "if_tag", segment)
                else:
                    self._expect_end(rest, segment)
                top.middle = tag
                top.bodies.append((tag, head, []))
                return
        line, column = self.lines.position(offset)
        handler = self._handler(kind, tag)
        if handler is None:
            raise self._unknown_tag(tag, stack, line, column)
        handler(self, rest, segment, stack, line, column)

    def _handler(self, kind: str, tag: str) -> Any:
        """The method reading a statement's head, None for a tag Jinja2 does not know."""
        handler = _STATEMENTS.get(tag) if kind in ("NAME", "IF") else None
        if handler is None and kind == "NAME" and tag in self.extension_tags:
            handler = _EXTENSION_STATEMENTS[tag]
        return handler

    def _expect_end(self, rest: list, segment: Segment, block: Optional["_Open"] = None) -> None:
        """Nothing may follow the tag's name (a closer of `{% block %}`: that block's name)."""
        if (rest and len(rest) == 1 and rest[0][0] in NAME_KINDS and block is not None
                and block.tag == "block" and rest[0][1] == block.head[0]):
            return
        if rest:
            raise self.jinja_error(segment, f"expected token 'end of statement block', got"
                                            f" {_describe(rest[0], '')!r}",
                                   rest[0][2])

    def _open(self, stack: List[_Open], tag: str, head: Any, line: int, column: int) -> None:
        if len(stack) > self.max_nesting:
            raise _nesting_error(self.max_nesting, "block nesting", line, column, self.name,
                                 self.source)
        stack.append(_Open(tag, head, line, column))
        if len(stack) > self.max_depth:
            self.max_depth = len(stack)

    # -- statement heads -----------------------------------------------------------------
    # A block's opening tag may end with a colon, which Jinja2 skips (`{% if x: %}`): _head()
    def _stmt_if(self, rest, segment, stack, line, column):
        self._open(stack, "if", self.parse_tokens(_head(rest), "if_tag", segment), line, column)

    def _stmt_for(self, rest, segment, stack, line, column):
        head = self.parse_tokens(_head(rest), "for_tag", segment)
        if any(isinstance(t, n.NSRef) for t in _targets(head[1])):
            # Jinja2 reads the name, then wants `in` where the dot is
            raise self.jinja_error(segment, "can't assign to namespace attribute in a for loop",
                                   segment.offset)
        self._open(stack, "for", head, line, column)

    def _stmt_set(self, rest, segment, stack, line, column):
        tokens = _head(rest)
        head = self.parse_tokens(tokens, "set_tag", segment)
        if head[0] == "assign":
            if tokens is not rest:  # `{% set x = y: %}`: only a block assignment takes a colon
                raise self.jinja_error(segment, "unexpected ':'", rest[-1][2])
            stack[-1].body.append(n.Assign(head[1], head[2], lineno=line, column=column))
        else:
            self._open(stack, "set", head, line, column)

    def _stmt_macro(self, rest, segment, stack, line, column):
        self._open(stack, "macro", self.parse_tokens(_head(rest), "macro_tag", segment), line,
                   column)

    def _stmt_call(self, rest, segment, stack, line, column):
        params: list = []
        rest = _head(rest)
        if rest and rest[0][0] == "LPAR":
            depth = 0
            for index, token in enumerate(rest):
                if token[0] == "LPAR":
                    depth += 1
                elif token[0] == "RPAR":
                    depth -= 1
                    if depth == 0:
                        params = self.parse_tokens(rest[:index + 1], "signature_tag", segment)
                        rest = rest[index + 1:]
                        break
        call = self.parse_tokens(rest, "expr_tag", segment)
        if not isinstance(call, n.Call):
            raise self.jinja_error(segment, "expected call", segment.offset)
        self._open(stack, "call", (call, params), line, column)

    def _stmt_filter(self, rest, segment, stack, line, column):
        self._open(stack, "filter", self.parse_tokens(_head(rest), "filter_tag", segment), line,
                   column)

    def _stmt_with(self, rest, segment, stack, line, column):
        # (no colon: Jinja2 reads assignments up to the tag's end)
        head = self.parse_tokens(rest, "with_tag", segment) if rest else []
        self._open(stack, "with", head, line, column)

    def _stmt_generation(self, rest, segment, stack, line, column):
        self._expect_end(_head(rest), segment)
        self._open(stack, "generation", None, line, column)

    def _stmt_block(self, rest, segment, stack, line, column):
        # Jinja2: a name, then `scoped`, then `required` (in this order), then the end
        head = _head(rest)
        if not head or head[0][0] not in NAME_KINDS:
            raise self.jinja_error(segment, "block name expected", segment.offset)
        name = head[0][1]
        index = 1
        scoped = index < len(head) and head[index][:2] == ("NAME", "scoped")
        index += scoped
        required = index < len(head) and head[index][:2] == ("NAME", "required")
        index += required
        if index < len(head):
            raise self.jinja_error(segment, "expected token 'end of statement block', got"
                                   f" {_describe(head[index], '')!r}",
                                   head[index][2])
        if name in self.block_names:  # Jinja2: compiling the template
            self._defer(TemplateAssertionError(f"block {name!r} defined twice", line, column,
                                               self.name, self.source))
        self.block_names.add(name)
        self._open(stack, "block", (name, scoped, required), line, column)

    def _stmt_autoescape(self, rest, segment, stack, line, column):
        self._open(stack, "autoescape", self.parse_tokens(_head(rest), "expr_tag", segment),
                   line, column)

    def _stmt_loop_control(self, rest, segment, stack, line, column):
        # (one outside a loop is refused by the compiler, after Jinja2's own compile errors:
        # Python's SyntaxError compiling Jinja2's code for the template)
        node_type = n.Break if segment.tokens[0][1] == "break" else n.Continue
        self._expect_end(rest, segment)
        stack[-1].body.append(node_type(lineno=line, column=column))

    def _stmt_do(self, rest, segment, stack, line, column):
        expr = self.parse_tokens(rest, "print_tag", segment)  # Jinja2: a tuple too
        stack[-1].body.append(n.ExprStmt(expr, lineno=line, column=column))

    def _stmt_print(self, rest, segment, stack, line, column):
        """``{% print a, b %}`` prints each expression (no tuple: ``(a, b)`` prints one)."""
        if not rest:
            return
        if rest[-1][0] == "COMMA":  # Jinja2 wants another expression after each comma
            raise self.jinja_error(segment, "unexpected 'end of statement block'", segment.end)
        expr = self.parse_tokens(rest, "print_tag", segment)
        items = [expr]
        if (isinstance(expr, n.TupleLit) and expr.items
                and id(expr) not in self.transformer.parenthesized):
            items = expr.items
        for item in items:
            self._append_output(stack[-1].body, item, segment)

    def _stmt_no_loader(self, rest, segment, stack, line, column):
        # nothing is loaded, but the tag must read as Jinja2 reads it
        from .jinja2_errors import diagnose

        found = diagnose(segment.tokens, ("block_end", "", segment.end), unescape_string,
                         "statement")
        if found is not None:
            raise self.jinja_error(segment)
        stack[-1].body.append(n.NoLoader(segment.tokens[0][1], lineno=line, column=column))

    # -- closing blocks ------------------------------------------------------------------
    def _close(self, block: _Open) -> n.Node:
        make = _CLOSERS[block.tag]
        try:
            node = make(block)
        except TemplateSyntaxError as exc:  # Jinja2's line: what follows the closing tag's name
            exc._locate(*self.position(block.closed_at))
            exc._attach_source(self.name, self.source)
            raise
        node.lineno, node.column = block.lineno, block.column
        # filters of `{% filter %}` / `{% set x | f %}` heads: located at their tag
        chain = getattr(node, "filter", None)
        while isinstance(chain, n.Filter):
            if not chain.lineno:
                chain.lineno, chain.column = block.lineno, block.column
            chain = chain.node
        return node


_LEAF_TOKENS = ("NAME", "INT", "FLOAT", "STRING", "COMMA")


def _expression_depth_bound(tokens: Any) -> int:
    """At least the number of levels of the nodes the grammar can make of one tag's tokens.

    Every node owns a token of its own (its operator, bracket, dot, keyword...), and a node
    with children owns one that is not a name, a literal or a comma, except a tuple without
    parentheses (`a, b`), which cannot contain another one directly. So the levels are at
    most the number of those other tokens, plus one for such a tuple, plus one for the leaves.
    (The number of tokens is a bound too: :meth:`Parser.parse_tokens` uses it for short tags.)
    """
    kinds = [token[0] for token in tokens]
    return 2 + len(kinds) - sum(kinds.count(kind) for kind in _LEAF_TOKENS)


def _nesting_error(limit: int, what: str, lineno: int, column: int, name: Optional[str],
                   source: str) -> Exception:
    from ..exceptions import LimitExceededError

    err = LimitExceededError(
        f"{what} deeper than {limit} levels refused (limit Limits.max_nesting={limit}; raise it "
        "with Environment(limits=Limits(max_nesting=...)) if this template is trusted)",
        lineno, column, name, source)
    return err


def _describe(token: Any, end: str = "") -> str:
    """How Jinja2 names a token in a message (None: the tag's end, of Jinja2 type ``end``)."""
    from .jinja2_errors import describe_scanner_token

    return describe_scanner_token(token, end)


def _head(tokens: Any) -> Any:
    """A block opener's tokens without the colon that may end them (`{% for x in y: %}`):
    Jinja2 skips one there (Python's habit). The same object when there is none."""
    if tokens and tokens[-1][0] == "COLON":
        return tokens[:-1]
    return tokens


def _targets(target: n.Node) -> List[n.Node]:
    if isinstance(target, n.TupleTarget):
        result: List[n.Node] = []
        for item in target.items:
            result.extend(_targets(item))
        return result
    return [target]


def _close_if(block: _Open) -> n.Node:
    (_, test, body), *others = block.bodies
    elifs = []
    else_: list = []
    for tag, head, other_body in others:
        if tag == "elif":
            elifs.append(n.If(head, other_body, [], []))
        else:
            else_ = other_body
    return n.If(test, body, elifs, else_)


def _close_for(block: _Open) -> n.Node:
    _, target, iterable, test, recursive = block.head
    else_ = block.bodies[1][2] if len(block.bodies) > 1 else []
    return n.For(target, iterable, block.bodies[0][2], else_, test, recursive)


def _close_set(block: _Open) -> n.Node:
    _, target, filter_chain = block.head
    return n.AssignBlock(target, filter_chain, block.body)


def _close_macro(block: _Open) -> n.Node:
    name, params = block.head
    return n.Macro(name, params, block.body)


def _close_call(block: _Open) -> n.Node:
    call, params = block.head
    return n.CallBlock(call, params, block.body)


def _close_block(block: _Open) -> n.Node:
    name, scoped, required = block.head
    if required and any(not isinstance(item, n.Output) or not all(
            isinstance(part, n.TemplateData) and not part.data.strip() for part in item.nodes)
            for item in block.body):
        # located by Parser._close
        raise TemplateSyntaxError("Required blocks can only contain comments or whitespace")
    return n.Scope(name, scoped, required, block.body)


_CLOSERS = {
    "if": _close_if,
    "for": _close_for,
    "set": _close_set,
    "macro": _close_macro,
    "call": _close_call,
    "filter": lambda block: n.FilterBlock(block.head, block.body),
    "with": lambda block: n.With([t for t, _ in block.head], [v for _, v in block.head],
                                 block.body),
    "generation": lambda block: n.Generation(block.body),
    "block": _close_block,
    "autoescape": lambda block: n.AutoEscape(block.head, block.body),
}

_STATEMENTS = {
    "if": Parser._stmt_if,
    "for": Parser._stmt_for,
    "set": Parser._stmt_set,
    "macro": Parser._stmt_macro,
    "call": Parser._stmt_call,
    "filter": Parser._stmt_filter,
    "with": Parser._stmt_with,
    "block": Parser._stmt_block,
    "autoescape": Parser._stmt_autoescape,
    "break": Parser._stmt_loop_control,
    "continue": Parser._stmt_loop_control,
    "print": Parser._stmt_print,
    **{tag: Parser._stmt_no_loader for tag in _NO_LOADER_TAGS},
}
#: The statements an environment has only with the extension that makes them: Jinja2's `do`
#: and transformers' `generation` (its AssistantTracker). Tags for Parser's
#: ``extension_tags``.
_EXTENSION_STATEMENTS = {
    "do": Parser._stmt_do,
    "generation": Parser._stmt_generation,
}


def parse(source: str, *, name: Optional[str] = None, trim_blocks: bool = False,
          lstrip_blocks: bool = False, keep_trailing_newline: bool = False,
          max_nesting: int = DEFAULT_MAX_NESTING,
          extension_tags: Iterable[str] = CHAT_EXTENSION_TAGS) -> n.Template:
    """Parse ``source`` into an AST; raises :class:`TemplateSyntaxError`. ``extension_tags``
    are the extensions' statements it accepts besides Jinja2's own: ``"do"`` (``{% do expr
    %}``, Jinja2's ``do`` extension) and ``"generation"`` (transformers' ``{% generation
    %}``); by default those of transformers' chat environment."""
    with PausedGC(len(source)):
        parser = Parser(source, name=name, extension_tags=extension_tags,
                        trim_blocks=trim_blocks,
                        lstrip_blocks=lstrip_blocks,
                        keep_trailing_newline=keep_trailing_newline, max_nesting=max_nesting)
        return parser.parse()


__all__ = ["parse", "Parser", "CHAT_EXTENSION_TAGS", "PausedGC", "GC_PAUSE_SOURCE", "ToAst",
           "unescape_string", "LineIndex", "START_SYMBOLS"]
