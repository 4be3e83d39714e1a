"""Parser: scanner segments -> AST, using the Lark grammar for every tag's interior.

Second step of the flow. Each ``{{ }}`` tag is parsed with the grammar's ``print_tag`` start
symbol and each ``{% %}`` tag with the start symbol of its statement; the tokens come from the
scanner through a custom Lark lexer, so Lark never re-lexes anything. A Lark ``Transformer``
maps grammar rules straight onto :mod:`nodes` classes during the LALR parse; a node takes the
position of its first token. Statements are then nested by a block assembler driven by the
``_BLOCKS`` table (opener -> middles and closer), which produces Jinja2's nesting messages
("Encountered unknown tag 'endfor'. Jinja was looking for ...") from its stack.

Lark is imported here only, on the first parse.
"""

from __future__ import annotations

import _thread
import warnings
from bisect import bisect_right as _bisect_right
TYPE_CHECKING = False  # typing is not imported at run time: it costs milliseconds
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any, Dict, Iterator, List, Optional, Tuple

from . import lalr
from . import nodes as n
from .exceptions import TemplateSyntaxError
from .scanner import BLOCK, DATA, LineIndex, Segment, scan

DEFAULT_MAX_NESTING = 128
START_SYMBOLS = ["print_tag", "expr_tag", "for_tag", "set_tag", "macro_tag", "signature_tag",
                  "filter_tag", "with_tag"]

_TOKEN_NAMES = {
    "$END": None, "NAME": "name", "STRING": "string", "INT": "integer", "FLOAT": "float",
}


class Token(str):
    """A token of a tag's interior: its text, plus ``type``, ``line`` and ``column``.

    A str subclass, as Lark's Token is, so the same transformer also runs under Lark.
    """

    # Lark reads these when it drives the parse (tests compare with Lark's own parser).
    start_pos = end_pos = end_line = end_column = None

    def __new__(cls, kind: str, value: str, line: int, column: int) -> "Token":
        token = str.__new__(cls, value)
        token.type = kind
        token.line = line
        token.column = column
        return token

    @property
    def value(self) -> str:
        return str(self)

    def __repr__(self) -> str:
        return f"Token({self.type!r}, {str(self)!r})"


_str_new = str.__new__
_NO_OFFSET = float("inf")

_tables: Any = None
_tables_lock = _thread.allocate_lock()
_parse_state = _thread._local()


def get_tables() -> Any:
    """The LALR tables compiled from grammar/jinja.lark (loaded once per process)."""
    global _tables
    if _tables is None:
        with _tables_lock:
            if _tables is None:
                _tables = lalr.load_tables(START_SYMBOLS)
    return _tables


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


def _pos(item: Any) -> Tuple[int, int]:
    if isinstance(item, n.Node):
        return item.lineno, item.column
    return getattr(item, "line", 0), getattr(item, "column", 0)


def _nodes_only(children: list) -> list:
    return [c for c in children if isinstance(c, (n.Node, CallArgs, list, tuple))]


def _syntax_error(message: str, at: Any) -> TemplateSyntaxError:
    line, column = _pos(at)
    return TemplateSyntaxError(message, line, column)


def unescape_string(literal: str, at: Any = None) -> str:
    """Decode a quoted string literal the way Jinja2 does (Python escapes; unknown kept)."""
    body = literal[1:-1]
    if "\\" not in body:
        return body
    try:
        with warnings.catch_warnings():
            # Python warns about unknown escapes such as "\d"; Jinja2 keeps them verbatim.
            warnings.simplefilter("ignore", DeprecationWarning)
            return body.encode("ascii", "backslashreplace").decode("unicode-escape")
    except Exception as exc:  # noqa: BLE001 - any codec complaint is a syntax error
        raise _syntax_error(str(exc).split(":")[-1].strip(), at) from None


def _build_transformer() -> Any:
    def is_tok(item: Any, kind: str) -> bool:
        return isinstance(item, Token) and item.type == kind

    def at(node: n.Node, item: Any) -> n.Node:
        if type(item) is Token:
            node.lineno = item.line
            node.column = item.column
        else:
            node.lineno, node.column = _pos(item)
        return node

    Const, Name, Getattr, Getitem, BinOp = n.Const, n.Name, n.Getattr, n.Getitem, n.BinOp
    int_ = int

    class ToAst:
        """Grammar rule (or alias) name -> AST node; called by the LALR driver."""

        @property
        def parenthesized(self) -> set:
            # ids of nodes written in parentheses, for the tag being parsed in this thread:
            # `(x is a) is b` is allowed, `x is a is b` is not.
            return _parse_state.parenthesized
        # -- start symbols --------------------------------------------------------------
        def print_tag(self, c):
            return c[0]

        expr_tag = print_tag

        def for_tag(self, c):
            target, iterable = c[0], c[2]
            test = None
            recursive = False
            rest = c[3:]
            if rest and is_tok(rest[0], "IF"):
                test = rest[1]
                rest = rest[2:]
            if rest:
                if rest[0] != "recursive":
                    raise _syntax_error(f"expected 'recursive', got {str(rest[0])!r}", rest[0])
                recursive = True
            return ("for", target, iterable, test, recursive)

        def set_assign(self, c):
            return ("assign", c[0], c[2])

        def set_block(self, c):
            if isinstance(c[0], n.TupleTarget):
                raise _syntax_error("a block assignment takes one name", c[0])
            return ("block", c[0], _chain_filters(c[1:]))

        def macro_tag(self, c):
            params = c[2] if isinstance(c[2], list) else []
            return (str(c[0]), params)

        def signature_tag(self, c):
            return c[1] if isinstance(c[1], list) else []

        def filter_tag(self, c):
            return _chain_filters(c)

        def with_tag(self, c):
            return [item for item in c if isinstance(item, tuple)]

        # -- statement pieces -----------------------------------------------------------
        def target(self, c):
            return c[0]

        def target_tuple(self, c):
            items = [item for item in c if isinstance(item, n.Node)]
            return at(n.TupleTarget(items), c[0])

        def target_paren(self, c):
            return c[1]

        def target_name(self, c):
            return at(n.NameTarget(str(c[0])), c[0])

        def target_nsref(self, c):
            return at(n.NSRef(str(c[0]), str(c[2])), c[0])

        def params(self, c):
            params = [item for item in c if isinstance(item, tuple)]
            seen_default = False
            for name, default, token in params:
                if default is not None:
                    seen_default = True
                elif seen_default:
                    raise _syntax_error("non-default argument follows default argument", token)
            return [(name, default) for name, default, _ in params]

        def param(self, c):
            return (str(c[0]), c[2] if len(c) > 2 else None, c[0])

        def with_assign(self, c):
            return (c[0], c[2])

        def filter_head(self, c):
            return (c[0], c[1] if len(c) > 1 else _NO_ARGS)

        def filter_item(self, c):
            return (c[1], c[2] if len(c) > 2 else _NO_ARGS)

        # -- expressions ----------------------------------------------------------------
        def tuple(self, c):
            return at(n.TupleLit([item for item in c if isinstance(item, n.Node)]), c[0])

        def paren(self, c):
            self.parenthesized.add(id(c[1]))
            return c[1]

        def empty_tuple(self, c):
            return at(n.TupleLit([]), c[0])

        def condexpr(self, c):
            expr2 = c[4] if len(c) > 4 else None
            return at(n.CondExpr(c[2], c[0], expr2), c[1])

        def or_op(self, c):
            return at(n.Or(c[0], c[2]), c[1])

        def and_op(self, c):
            return at(n.And(c[0], c[2]), c[1])

        def not_op(self, c):
            return at(n.Not(c[1]), c[0])

        def compare(self, c):
            # positioned at the first operator: `a < b` fails "at" the `<`
            node = at(n.Compare(c[0], [(op, right) for op, right, _ in c[1:]]), c[1][2])
            return node

        def comparison(self, c):
            op, token = c[0]
            return (op, c[1], token)

        def comp_op(self, c):
            if len(c) == 2:
                return ("notin", c[0])
            return (str(c[0]) if c[0].type != "IN" else "in", c[0])

        def binop(self, c):
            op = c[1]
            node = BinOp(str(op), c[0], c[2])
            node.lineno = op.line
            node.column = op.column
            return node

        def concat(self, c):
            return at(n.Concat([item for item in c if isinstance(item, n.Node)]), c[1])

        def filter(self, c):
            args = c[3] if len(c) > 3 else _NO_ARGS
            return at(n.Filter(c[0], c[2], args.args, args.kwargs, args.dyn_args, args.dyn_kwargs),
                      c[1])

        def test(self, c):
            node = c[0]
            if (isinstance(node, n.Test) and not node.args and not node.kwargs
                    and id(node) not in self.parenthesized):
                raise _syntax_error("You cannot chain multiple tests with is", c[1])
            rest = c[2:]
            negated = False
            if rest and is_tok(rest[0], "NOT"):
                negated = True
                rest = rest[1:]
            name = rest[0]
            args = _NO_ARGS
            if len(rest) > 1:
                arg = rest[1]
                args = arg if isinstance(arg, CallArgs) else CallArgs([arg], [], None, None)
            return at(n.Test(node, name, args.args, args.kwargs, args.dyn_args, args.dyn_kwargs,
                             negated), c[1])

        def neg(self, c):
            return at(n.Neg(c[1]), c[0])

        def pos(self, c):
            return at(n.Pos(c[1]), c[0])

        def getattr(self, c):
            token = c[2]
            if token.type == "INT":
                return at(n.Getitem(c[0], at(n.Const(_int_value(token)), token)), c[1])
            node = Getattr(c[0], str(token))
            dot = c[1]
            node.lineno = dot.line
            node.column = dot.column
            return node

        def getitem(self, c):
            subscripts = c[2]
            bracket = c[1]
            arg = subscripts[0] if len(subscripts) == 1 else at(n.TupleLit(subscripts), bracket)
            node = Getitem(c[0], arg)
            node.lineno = bracket.line
            node.column = bracket.column
            return node

        def getitem_empty(self, c):
            return at(n.Getitem(c[0], at(n.TupleLit([]), c[1])), c[1])

        def subscripts(self, c):
            return [item for item in c if isinstance(item, n.Node)]

        def slice(self, c):
            parts: List[Optional[n.Node]] = [None, None, None]
            index = 0
            for item in c:
                if is_tok(item, "COLON"):
                    index += 1
                else:
                    parts[index] = item
            first = c[0]
            return at(n.Slice(*parts), first)

        def call(self, c):
            args = c[1]
            return at(n.Call(c[0], args.args, args.kwargs, args.dyn_args, args.dyn_kwargs), c[0])

        def call_args(self, c):
            args, kwargs = [], []
            dyn_args = dyn_kwargs = None
            for item in c:
                if not isinstance(item, tuple):
                    continue
                kind, value, token = item
                # Jinja2's order: positional, keyword, *args, **kwargs.
                if kind == "positional":
                    if kwargs or dyn_args is not None or dyn_kwargs is not None:
                        raise _syntax_error("invalid syntax for function call expression", token)
                    args.append(value)
                elif kind == "keyword":
                    if dyn_kwargs is not None:
                        raise _syntax_error("invalid syntax for function call expression", token)
                    kwargs.append(value)
                elif kind == "star":
                    if dyn_args is not None or dyn_kwargs is not None:
                        raise _syntax_error("invalid syntax for function call expression", token)
                    dyn_args = value
                else:
                    if dyn_kwargs is not None:
                        raise _syntax_error("invalid syntax for function call expression", token)
                    dyn_kwargs = value
            return CallArgs(args, kwargs, dyn_args, dyn_kwargs)

        def positional_arg(self, c):
            return ("positional", c[0], c[0])

        def keyword_arg(self, c):
            return ("keyword", (str(c[0]), c[2]), c[0])

        def star_arg(self, c):
            return ("star", c[1], c[0])

        def starstar_arg(self, c):
            return ("starstar", c[1], c[0])

        def filter_name(self, c):
            return ".".join(str(item) for item in c if is_tok(item, "NAME"))

        def test_name(self, c):
            return ".".join(str(item) for item in c if not is_tok(item, "DOT"))

        def attr_name(self, c):
            return c[0]

        keyword_name = attr_name

        def name(self, c):
            token = c[0]
            value = str(token)
            if value in _CONSTANT_NAMES:
                node = Const(_CONSTANT_NAMES[value])
            else:
                node = Name(value)
            node.lineno = token.line  # at(node, token), inlined in the commonest rules
            node.column = token.column
            return node

        def string(self, c):
            token = c[0]
            if len(c) == 1:
                value = unescape_string(str(token), token)
            else:
                value = "".join(unescape_string(str(t), t) for t in c)
            node = Const(value)
            node.lineno = token.line
            node.column = token.column
            return node

        def int(self, c):
            token = c[0]
            node = Const(int_(str(token).replace("_", ""), 0))  # _int_value(token)
            node.lineno = token.line
            node.column = token.column
            return node

        def float(self, c):
            return at(n.Const(float(str(c[0]).replace("_", ""))), c[0])

        def list_lit(self, c):
            return at(n.ListLit([item for item in c if isinstance(item, n.Node)]), c[0])

        def dict_lit(self, c):
            return at(n.DictLit([item for item in c if isinstance(item, tuple)]), c[0])

        def pair(self, c):
            return (c[0], c[2])

    def _chain_filters(items: list) -> Optional[n.Node]:
        node: Optional[n.Node] = None
        for name, args in items:
            filter_node = n.Filter(node, name, args.args, args.kwargs, args.dyn_args,
                                   args.dyn_kwargs)
            node = filter_node
        return node

    return ToAst()


def _int_value(token: Any) -> int:
    return int(str(token).replace("_", ""), 0)


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

    __slots__ = ("tag", "head", "bodies", "lineno", "column", "middle")

    def __init__(self, tag: str, head: Any, lineno: int, column: int) -> None:
        self.tag = tag
        self.head = head
        self.bodies: List[Tuple[str, Any, list]] = [(tag, head, [])]
        self.lineno = lineno
        self.column = column
        self.middle = tag

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

    def __init__(self, source: str, *, name: Optional[str] = None, trim_blocks: bool = False,
                 lstrip_blocks: bool = False, keep_trailing_newline: bool = False,
                 max_nesting: int = DEFAULT_MAX_NESTING) -> None:
        self.source = source
        self.name = name
        self.max_nesting = max_nesting
        self.segments, self.lines, self.normalised = scan(
            source, trim_blocks=trim_blocks, lstrip_blocks=lstrip_blocks,
            keep_trailing_newline=keep_trailing_newline, name=name, max_nesting=max_nesting)
        self.tables = get_tables()
        self.max_depth = 1  # the most blocks open at once (+1), and the most levels an
        self.max_tag_depth = 0  # expression of one tag can have: see _check_depth
        self.parenthesized: set = set()
        _parse_state.parenthesized = self.parenthesized

    # -- helpers -------------------------------------------------------------------------
    def error(self, message: str, lineno: int, column: Optional[int]) -> TemplateSyntaxError:
        return TemplateSyntaxError(message, lineno, column, self.name, self.source)

    def iter_tokens(self, tokens: list) -> Iterator[Token]:
        """``Token(kind, value, *self.lines.position(offset))`` for each scanned token, one at
        a time (long tags need not hold all their tokens at once). Unrolled: the tokens of a
        tag mostly share a line, so the line is only looked up again past its end."""
        starts = self.lines.starts
        last_line = len(starts)
        line = line_start = 0
        next_start = -1
        for kind, value, offset in tokens:
            if offset >= next_start or offset < line_start:
                line = _bisect_right(starts, offset)
                line_start = starts[line - 1]
                next_start = starts[line] if line < last_line else _NO_OFFSET
            token = _str_new(Token, value)
            token.type = kind
            token.line = line
            token.column = offset - line_start + 1
            yield token

    def make_tokens(self, tokens: list) -> List[Token]:
        """The tokens of a tag, all at once."""
        return list(self.iter_tokens(tokens))

    def parse_tokens(self, tokens: list, start: str, segment: Segment) -> Any:
        """Run the LALR parser over one tag's tokens from the given start symbol."""
        if not tokens:
            what = "print statement" if start == "print_tag" else "statement block"
            line, column = self.lines.position(segment.offset)
            raise self.error(f"Expected an expression, got 'end of {what}'", line, column)
        count = len(tokens)
        depth = count if count <= lalr.TRACE_TOKENS else _expression_depth_bound(tokens)
        if depth > self.max_tag_depth:
            self.max_tag_depth = depth
        parenthesized = self.parenthesized
        if parenthesized:
            parenthesized.clear()  # it only ever holds nodes of the tag being parsed
        try:
            feed = (self.make_tokens(tokens) if count <= lalr.TRACE_TOKENS
                    else self.iter_tokens(tokens))
            return lalr.parse(self.tables, feed, start, _TRANSFORMER)
        except lalr.ParseError as exc:
            what = "print statement" if start == "print_tag" else "statement block"
            token = exc.token
            if token is None:
                line, column = self.lines.position(segment.end)
                raise self.error(f"unexpected end of {what}", line, column) from None
            raise self.error(f"unexpected {str(token)!r}", token.line, token.column) from None

    # -- assembly ------------------------------------------------------------------------
    def parse(self) -> n.Template:
        root = _Open("template", None, 1, 1)
        stack: List[_Open] = [root]
        # ids of nodes written in parentheses, for the tag being parsed in this thread
        self.parenthesized = _parse_state.parenthesized = set()
        self.max_tag_depth = 0
        try:
            for segment in self.segments:
                kind = segment.kind
                if kind == DATA:
                    self._append_output(stack[-1].body, n.TemplateData(segment.text), segment)
                elif kind == BLOCK:
                    self._statement(segment, stack)
                else:
                    expr = self.parse_tokens(segment.tokens, "print_tag", segment)
                    self._append_output(stack[-1].body, expr, segment)
        except TemplateSyntaxError as exc:
            exc._attach_source(self.name, self.source)
            raise
        if len(stack) > 1:
            raise self._unknown_tag(None, stack, *self.lines.position(len(self.normalised)))
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
        while level:
            if depth > limit:
                break
            below: List[n.Node] = []
            extend = below.extend
            for node in level:
                extend(node.child_nodes())
            level = below
            depth += 1
        else:
            return
        stack = [(template, 0)]
        while stack:
            node, depth = stack.pop()
            if depth > limit:
                raise _nesting_error(self.max_nesting, "expression or block nesting",
                                     node.lineno, node.column, self.name, self.source)
            for child in node.iter_child_nodes():
                stack.append((child, depth + 1))

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
            raise self.error("tag name expected", *self.lines.position(segment.offset))
        kind, tag, offset = tokens[0]
        rest = tokens[1:]
        top = stack[-1]
        if top.tag in _BLOCKS:
            middles, closer = _BLOCKS[top.tag]
            if tag == closer:
                self._expect_end(rest, tag, segment, top)
                stack.pop()
                node = self._close(top)
                stack[-1].body.append(node)
                return
            if tag in middles and top.middle != "else":
                head = None
                if tag == "elif":
                    head = self.parse_tokens(rest, "expr_tag", segment)
                else:
                    self._expect_end(rest, tag, segment)
                top.middle = tag
                top.bodies.append((tag, head, []))
                return
        line, column = self.lines.position(offset)
        handler = _STATEMENTS.get(tag) if kind in ("NAME", "IF") else None
        if handler is None:
            raise self._unknown_tag(tag, stack, line, column)
        handler(self, rest, segment, stack, line, column)

    def _expect_end(self, rest: list, tag: str, segment: Segment,
                    block: Optional["_Open"] = None) -> None:
        if (rest and tag == "endblock" and len(rest) == 1 and rest[0][0] == "NAME"
                and block is not None and rest[0][1] == block.head):
            return
        if rest:
            line, column = self.lines.position(rest[0][2])
            raise self.error(f"expected token 'end of statement block', got {rest[0][1]!r}",
                             line, column)

    def _open(self, stack: List[_Open], tag: str, head: Any, line: int, column: int) -> None:
        if len(stack) > self.max_nesting:
            raise _nesting_error(self.max_nesting, "block nesting", line, column, self.name,
                                 self.source)
        stack.append(_Open(tag, head, line, column))
        if len(stack) > self.max_depth:
            self.max_depth = len(stack)

    # -- statement heads -----------------------------------------------------------------
    def _stmt_if(self, rest, segment, stack, line, column):
        self._open(stack, "if", self.parse_tokens(rest, "expr_tag", segment), line, column)

    def _stmt_for(self, rest, segment, stack, line, column):
        depth = 0
        for index, (kind, _, offset) in enumerate(rest):
            depth += kind in ("LPAR", "LBRACKET", "LBRACE")
            depth -= kind in ("RPAR", "RBRACKET", "RBRACE")
            if kind == "IN" and depth == 0:
                if index and rest[index - 1][0] == "COMMA":
                    # Jinja2 reads `for a, in x` as `for (a, in) ...`: a syntax error
                    after = rest[index + 1] if index + 1 < len(rest) else None
                    got = repr(after[1]) if after else "'end of statement block'"
                    at = after[2] if after else offset
                    raise self.error(f"expected token 'in', got {got}",
                                     *self.lines.position(at))
                break
        head = self.parse_tokens(rest, "for_tag", segment)
        if any(isinstance(t, n.NSRef) for t in _targets(head[1])):
            raise self.error("can't assign to namespace attribute in a for loop", line, column)
        self._open(stack, "for", head, line, column)

    def _stmt_set(self, rest, segment, stack, line, column):
        head = self.parse_tokens(rest, "set_tag", segment)
        if head[0] == "assign":
            stack[-1].body.append(n.Assign(head[1], head[2], lineno=line, column=column))
        else:
            self._open(stack, "set", head, line, column)

    def _stmt_macro(self, rest, segment, stack, line, column):
        self._open(stack, "macro", self.parse_tokens(rest, "macro_tag", segment), line, column)

    def _stmt_call(self, rest, segment, stack, line, column):
        params: list = []
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
            raise self.error("expected call", line, column)
        self._open(stack, "call", (call, params), line, column)

    def _stmt_filter(self, rest, segment, stack, line, column):
        self._open(stack, "filter", self.parse_tokens(rest, "filter_tag", segment), line, column)

    def _stmt_with(self, rest, segment, stack, line, column):
        head = self.parse_tokens(rest, "with_tag", segment) if rest else []
        self._open(stack, "with", head, line, column)

    def _stmt_generation(self, rest, segment, stack, line, column):
        self._expect_end(rest, "generation", segment)
        self._open(stack, "generation", None, line, column)

    def _stmt_block(self, rest, segment, stack, line, column):
        if not rest or rest[0][0] != "NAME":
            raise self.error("block name expected", line, column)
        self._open(stack, "block", rest[0][1], line, column)

    def _stmt_autoescape(self, rest, segment, stack, line, column):
        self._open(stack, "autoescape", self.parse_tokens(rest, "expr_tag", segment), line,
                   column)

    def _stmt_loop_control(self, rest, segment, stack, line, column):
        tag = "break" if segment.tokens[0][1] == "break" else "continue"
        self._expect_end(rest, tag, segment)
        for block in reversed(stack):
            if block.tag in ("macro", "call"):
                break
            if block.tag == "for" and block.middle != "else":
                node_type = n.Break if tag == "break" else n.Continue
                stack[-1].body.append(node_type(lineno=line, column=column))
                return
        raise self.error(f"'{tag}' is only allowed inside a loop", line, column)

    def _stmt_no_loader(self, rest, segment, stack, line, column):
        stack[-1].body.append(n.NoLoader(segment.tokens[0][1], lineno=line, column=column))

    # -- closing blocks ------------------------------------------------------------------
    def _close(self, block: _Open) -> n.Node:
        make = _CLOSERS[block.tag]
        node = make(block)
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
    from .exceptions import LimitExceededError

    err = LimitExceededError(
        f"{what} deeper than {limit} levels refused (limit Limits.max_nesting={limit}; raise it "
        "with Environment(limits=Limits(max_nesting=...)) if this template is trusted)",
        lineno, column, name, source)
    return err


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
    "block": lambda block: n.Scope(block.body),
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
    "generation": Parser._stmt_generation,
    "block": Parser._stmt_block,
    "autoescape": Parser._stmt_autoescape,
    "break": Parser._stmt_loop_control,
    "continue": Parser._stmt_loop_control,
    **{tag: Parser._stmt_no_loader for tag in _NO_LOADER_TAGS},
}


def parse(source: str, *, name: Optional[str] = None, trim_blocks: bool = False,
          lstrip_blocks: bool = False, keep_trailing_newline: bool = False,
          max_nesting: int = DEFAULT_MAX_NESTING) -> n.Template:
    """Parse ``source`` into an AST; raises :class:`TemplateSyntaxError`."""
    parser = Parser(source, name=name, trim_blocks=trim_blocks, lstrip_blocks=lstrip_blocks,
                    keep_trailing_newline=keep_trailing_newline, max_nesting=max_nesting)
    return parser.parse()


_TRANSFORMER = _build_transformer()

__all__ = ["parse", "Parser", "Token", "unescape_string", "LineIndex", "START_SYMBOLS"]
