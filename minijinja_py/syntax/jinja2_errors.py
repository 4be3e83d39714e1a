"""Jinja2's own syntax error for a tag the parser refused: message, line and exception class.

The grammar (``grammar/jinja.lark``) accepts what Jinja2's parser accepts, but an LALR parse
that fails only knows which terminals would have fitted, while Jinja2's messages come from
the recursive-descent procedure that noticed the problem: ``expected token 'end of print
statement', got 'b'`` from ``TokenStream.expect``, ``unexpected 'end of statement block'`` from
``parse_primary``, ``can't assign to 'const'``, ``You cannot chain multiple tests with is``...
So when a tag is refused (and only then: this costs nothing to templates that parse), the
parser hands the tag's tokens to :func:`diagnose`, which walks them the way Jinja2 3.1's
``jinja2/parser.py`` does, function by function, and reports the first error Jinja2 raises,
on the token Jinja2 takes its line from. Nodes are not built; only what an error message or
a check reads of them is kept (the node class, assignability, the token of its line). A tag
nested deeper than Python's stack allows this walk (Jinja2's parser overflows there too) is
left to the parser's own message.

Jinja2's lexer runs lazily, one token ahead of its parser: an error of the lexer (an
unexpected character, an unbalanced bracket, a bad escape in a string) is only raised when
the parser moves onto the token that fails, so a parse error before it wins. The scanner
reads the whole template first; when it fails in a tag, the parser gives this module the
tokens read so far and the scanner's error as the tag's last token (see ``scanner.scan``'s
``defer_errors``), and the error is raised where Jinja2 would raise it. At the end of the
source, the tag ends with Jinja2's ``end of template`` token.

Jinja2 quirks reproduced on purpose: ``extra_end_rules`` never end a tuple (Jinja2 passes the
tuple of rules to ``test_any`` as one argument), so ``{% for in x %}`` reads ``in`` as the
target and fails on ``x``.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported at run time: it costs milliseconds
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any, Container, List, Optional, Sequence, Tuple

from ..exceptions import TemplateAssertionError, TemplateSyntaxError
from ..guard.limits import check_deadline

# scanner token type -> Jinja2 token type (Jinja2 lexes keywords as names)
_TYPES = {
    "NAME": "name", "AND": "name", "OR": "name", "NOT": "name", "IN": "name", "IS": "name",
    "IF": "name", "ELSE": "name", "INT": "integer", "FLOAT": "float", "STRING": "string",
    "ADD": "add", "SUB": "sub", "MUL": "mul", "DIV": "div", "FLOORDIV": "floordiv",
    "MOD": "mod", "POW": "pow", "TILDE": "tilde", "LBRACKET": "lbracket",
    "RBRACKET": "rbracket", "LPAR": "lparen", "RPAR": "rparen", "LBRACE": "lbrace",
    "RBRACE": "rbrace", "EQ": "eq", "NE": "ne", "GT": "gt", "GTEQ": "gteq", "LT": "lt",
    "LTEQ": "lteq", "ASSIGN": "assign", "DOT": "dot", "COLON": "colon", "PIPE": "pipe",
    "COMMA": "comma", "SEMICOLON": "semicolon",
}
# jinja2.lexer.operators, reversed: how Jinja2 describes an operator token
_OPERATOR_TEXT = {
    "add": "+", "sub": "-", "div": "/", "floordiv": "//", "mul": "*", "mod": "%", "pow": "**",
    "tilde": "~", "lbracket": "[", "rbracket": "]", "lparen": "(", "rparen": ")",
    "lbrace": "{", "rbrace": "}", "eq": "==", "ne": "!=", "gt": ">", "gteq": ">=", "lt": "<",
    "lteq": "<=", "assign": "=", "dot": ".", "colon": ":", "pipe": "|", "comma": ",",
    "semicolon": ";",
}
_TYPE_TEXT = {
    "block_end": "end of statement block", "variable_end": "end of print statement",
    "eof": "end of template",
}
_COMPARE = frozenset(["eq", "ne", "lt", "lteq", "gt", "gteq"])
_MATH1 = frozenset(["add", "sub"])
_MATH2 = frozenset(["mul", "div", "floordiv", "mod"])
_CONSTANTS = frozenset(["true", "false", "True", "False", "none", "None"])
_TEST_ARGUMENT_STARTS = frozenset(
    ["name", "string", "integer", "float", "lparen", "lbracket", "lbrace"])
_STATEMENT_KEYWORDS = frozenset(["for", "if", "block", "extends", "print", "macro", "include",
                                 "from", "import", "set", "with", "autoescape"])
# Tokens read between two looks at the parse deadline (Limits.max_seconds).
_DEADLINE_EVERY = 1024


def describe_type(kind: str) -> str:
    """``jinja2.lexer._describe_token_type``."""
    return _OPERATOR_TEXT.get(kind) or _TYPE_TEXT.get(kind, kind)


def describe(token: "Tuple[str, Any, int]") -> str:
    """``jinja2.lexer.describe_token``: a name shows its value, any other token its type."""
    if token[0] == "name":
        return token[1]
    return describe_type(token[0])


def describe_scanner_token(token: "Optional[Tuple[str, str, int]]", end: str) -> str:
    """How Jinja2 describes a scanner token (None: the tag's end, ``end`` is its Jinja2 type)."""
    if token is None:
        return describe_type(end)
    kind = _TYPES.get(token[0], token[0])
    return token[1] if kind == "name" else describe_type(kind)


def _describe_expr(expr: str) -> str:
    """``jinja2.lexer.describe_token_expr``."""
    if ":" in expr:
        kind, value = expr.split(":", 1)
        if kind == "name":
            return value
    else:
        kind = expr
    return describe_type(kind)


class _Found(Exception):
    """The error Jinja2 raises: ``error`` is ready, or made of message, offset and class."""

    def __init__(self, message: str, offset: int, cls: type = TemplateSyntaxError,
                 error: "Optional[TemplateSyntaxError]" = None) -> None:
        super().__init__(message)
        self.message = message
        self.offset = offset
        self.cls = cls
        self.error = error


class _Node:
    """What the walk keeps of a Jinja2 node: its class name (lower case), the offset of the
    token Jinja2 takes its line from, and for a tuple whether every item is assignable."""

    __slots__ = ("kind", "offset", "assignable")

    def __init__(self, kind: str, offset: int, assignable: bool = False) -> None:
        self.kind = kind
        self.offset = offset
        self.assignable = assignable


class _Walk:
    """``jinja2.parser.Parser`` over one tag, with ``jinja2.lexer.TokenStream``'s moves."""

    def __init__(self, tokens: "List[Tuple[str, Any, int]]", unescape: Any) -> None:
        self.tokens = tokens  # Jinja2 tokens (type, value, offset), ending with the tag's end
        self.index = 0
        self.last = len(tokens) - 1
        self.unescape = unescape
        self.countdown = _DEADLINE_EVERY
        self.current = tokens[0]  # TokenStream.current
        self._lex(tokens[0])

    # -- the token stream ----------------------------------------------------------------
    def _lex(self, token: "Tuple[str, Any, int]") -> None:
        """What Jinja2's lexer does as it produces ``token``: raise its error."""
        kind = token[0]
        if kind == "error":
            raise _Found("", token[2], error=token[1])
        if kind == "string":
            try:
                self.unescape(token[1])
            except TemplateSyntaxError as exc:
                raise _Found(exc.message or "", token[2]) from None

    def next(self) -> "Tuple[str, Any, int]":
        token = self.current
        if self.index < self.last:
            self.index += 1
            self.current = self.tokens[self.index]
            if self.current[0] in ("string", "error"):
                self._lex(self.current)
            self.countdown -= 1
            if not self.countdown:
                self.countdown = _DEADLINE_EVERY
                check_deadline()
        return token

    def look(self) -> "Tuple[str, Any, int]":
        if self.index < self.last:
            token = self.tokens[self.index + 1]
            self._lex(token)
            return token
        return self.current

    def test(self, expr: str, token: "Optional[Tuple[str, Any, int]]" = None) -> bool:
        token = self.current if token is None else token
        if token[0] == expr:
            return True
        if ":" in expr:
            kind, value = expr.split(":", 1)
            return token[0] == kind and token[1] == value
        return False

    def skip_if(self, expr: str) -> bool:
        if self.test(expr):
            self.next()
            return True
        return False

    def expect(self, expr: str) -> "Tuple[str, Any, int]":
        if not self.test(expr):
            described = _describe_expr(expr)
            current = self.current
            if current[0] == "eof":
                self.fail(f"unexpected end of template, expected {described!r}.")
            self.fail(f"expected token {described!r}, got {describe(current)!r}")
        return self.next()

    def fail(self, message: str, offset: "Optional[int]" = None,
             cls: type = TemplateSyntaxError) -> None:
        raise _Found(message, self.current[2] if offset is None else offset, cls)

    # -- statements ----------------------------------------------------------------------
    def statement(self, role: str, block_name: "Optional[str]",
                  extension_tags: "Container[str]") -> bool:
        """``Parser.parse_statement`` (and what ``subparse`` does after it). False when the tag
        is not one Jinja2 knows here (the parser reports unknown tags itself)."""
        token = self.current
        if token[0] != "name":
            self.fail("tag name expected", token[2])
        tag = token[1]
        if role == "closer":
            self.next()
            if block_name is not None:
                self.skip_if("name:" + block_name)
        elif role == "middle":
            self.next()
            if tag == "elif":
                self.parse_tuple(with_condexpr=False)
            self.statements()
        elif tag in _STATEMENT_KEYWORDS:
            getattr(self, "parse_" + tag)()
        elif tag == "call":
            self.parse_call_block()
        elif tag == "filter":
            self.next()
            self.parse_filter(start_inline=True)
            self.statements()
        # the extensions of the environments minijinja_py models: Jinja2's loopcontrols
        # (always there), transformers' `generation` and Jinja2's `do` (when the environment
        # has them)
        elif tag == "generation" and tag in extension_tags:
            self.next()
            self.statements()
        elif tag in ("break", "continue"):
            self.next()
        elif tag == "do" and tag in extension_tags:
            self.next()
            self.parse_tuple()
        else:
            return False
        self.expect("block_end")
        return True

    def statements(self) -> None:
        """The head of ``parse_statements``: an optional colon, then the tag's end."""
        self.skip_if("colon")
        self.expect("block_end")

    def parse_set(self) -> None:
        self.next()
        self.parse_assign_target(with_namespace=True)
        if self.skip_if("assign"):
            self.parse_tuple()
            return
        self.parse_filter()
        self.statements()

    def parse_for(self) -> None:
        self.expect("name:for")
        self.parse_assign_target()
        self.expect("name:in")
        self.parse_tuple(with_condexpr=False)
        if self.skip_if("name:if"):
            self.parse_expression()
        self.skip_if("name:recursive")
        self.statements()

    def parse_if(self) -> None:
        self.expect("name:if")
        self.parse_tuple(with_condexpr=False)
        self.statements()

    def parse_with(self) -> None:
        self.next()
        first = True
        while self.current[0] != "block_end":
            if not first:
                self.expect("comma")
            first = False
            self.parse_assign_target()
            self.expect("assign")
            self.parse_expression()
        self.statements()

    def parse_autoescape(self) -> None:
        self.next()
        self.parse_expression()
        self.statements()

    def parse_block(self) -> None:
        self.next()
        self.expect("name")
        self.skip_if("name:scoped")
        self.skip_if("name:required")
        if self.current[0] == "sub":
            self.fail("Block names in Jinja have to be valid Python identifiers and may not"
                      " contain hyphens, use an underscore instead.")
        self.statements()

    def parse_extends(self) -> None:
        self.next()
        self.parse_expression()

    def _import_context(self) -> None:
        if ((self.test("name:with") or self.test("name:without"))
                and self.test("name:context", self.look())):
            self.next()
            self.next()

    def parse_include(self) -> None:
        self.next()
        self.parse_expression()
        if self.test("name:ignore") and self.test("name:missing", self.look()):
            self.next()
            self.next()
        self._import_context()

    def parse_import(self) -> None:
        self.next()
        self.parse_expression()
        self.expect("name:as")
        self.parse_assign_target(name_only=True)
        self._import_context()

    def parse_from(self) -> None:
        self.next()
        self.parse_expression()
        self.expect("name:import")
        names = 0

        def parse_context() -> bool:
            if (self.current[1] in ("with", "without")
                    and self.test("name:context", self.look())):
                self.next()
                self.next()
                return True
            return False

        while True:
            if names:
                self.expect("comma")
            if self.current[0] == "name":
                if parse_context():
                    break
                target = self.current
                self.parse_assign_target(name_only=True)
                if target[1].startswith("_"):
                    self.fail("names starting with an underline can not be imported",
                              target[2], TemplateAssertionError)
                if self.skip_if("name:as"):
                    self.parse_assign_target(name_only=True)
                names += 1
                if parse_context() or self.current[0] != "comma":
                    break
            else:
                self.expect("name")

    def parse_print(self) -> None:
        self.next()
        first = True
        while self.current[0] != "block_end":
            if not first:
                self.expect("comma")
            first = False
            self.parse_expression()

    def parse_signature(self) -> None:
        self.expect("lparen")
        args = defaults = 0
        while self.current[0] != "rparen":
            if args:
                self.expect("comma")
            self.parse_assign_target(name_only=True)
            if self.skip_if("assign"):
                self.parse_expression()
                defaults += 1
            elif defaults:
                self.fail("non-default argument follows default argument")
            args += 1
        self.expect("rparen")

    def parse_call_block(self) -> None:
        tag = self.next()
        if self.current[0] == "lparen":
            self.parse_signature()
        if self.parse_expression().kind != "call":
            self.fail("expected call", tag[2])
        self.statements()

    def parse_macro(self) -> None:
        self.next()
        self.parse_assign_target(name_only=True)
        self.parse_signature()
        self.statements()

    def parse_assign_target(self, with_tuple: bool = True, name_only: bool = False,
                            with_namespace: bool = False) -> _Node:
        if name_only:
            token = self.expect("name")
            target = _Node("name", token[2], token[1] not in _CONSTANTS)
        elif with_tuple:
            target = self.parse_tuple(simplified=True, with_namespace=with_namespace)
        else:  # pragma: no cover - no statement of Jinja2's parses it so
            target = self.parse_primary(with_namespace=with_namespace)
        if not target.assignable:
            self.fail(f"can't assign to {target.kind!r}", target.offset)
        return target

    # -- expressions ---------------------------------------------------------------------
    def parse_expression(self, with_condexpr: bool = True) -> _Node:
        if with_condexpr:
            return self.parse_condexpr()
        return self.parse_or()

    def parse_condexpr(self) -> _Node:
        start = self.current[2]
        expr = self.parse_or()
        while self.skip_if("name:if"):
            self.parse_or()
            if self.skip_if("name:else"):
                self.parse_condexpr()
            expr = _Node("condexpr", start)
            start = self.current[2]
        return expr

    def parse_or(self) -> _Node:
        start = self.current[2]
        left = self.parse_and()
        while self.skip_if("name:or"):
            self.parse_and()
            left = _Node("or", start)
            start = self.current[2]
        return left

    def parse_and(self) -> _Node:
        start = self.current[2]
        left = self.parse_not()
        while self.skip_if("name:and"):
            self.parse_not()
            left = _Node("and", start)
            start = self.current[2]
        return left

    def parse_not(self) -> _Node:
        if self.test("name:not"):
            token = self.next()
            self.parse_not()
            return _Node("not", token[2])
        return self.parse_compare()

    def parse_compare(self) -> _Node:
        start = self.current[2]
        expr = self.parse_math1()
        operands = False
        while True:
            if self.current[0] in _COMPARE:
                self.next()
            elif self.skip_if("name:in"):
                pass
            elif self.test("name:not") and self.test("name:in", self.look()):
                self.next()
                self.next()
            else:
                break
            self.parse_math1()
            operands = True
            start = self.current[2]
        return _Node("compare", start) if operands else expr

    def parse_math1(self) -> _Node:
        start = self.current[2]
        left = self.parse_concat()
        while self.current[0] in _MATH1:
            kind = self.next()[0]
            self.parse_concat()
            left = _Node(kind, start)
            start = self.current[2]
        return left

    def parse_concat(self) -> _Node:
        start = self.current[2]
        node = self.parse_math2()
        if self.current[0] != "tilde":
            return node
        while self.current[0] == "tilde":
            self.next()
            self.parse_math2()
        return _Node("concat", start)

    def parse_math2(self) -> _Node:
        start = self.current[2]
        left = self.parse_pow()
        while self.current[0] in _MATH2:
            kind = self.next()[0]
            self.parse_pow()
            left = _Node(kind, start)
            start = self.current[2]
        return left

    def parse_pow(self) -> _Node:
        start = self.current[2]
        left = self.parse_unary()
        while self.current[0] == "pow":
            self.next()
            self.parse_unary()
            left = _Node("pow", start)
            start = self.current[2]
        return left

    def parse_unary(self, with_filter: bool = True) -> _Node:
        kind = self.current[0]
        start = self.current[2]
        if kind == "sub" or kind == "add":
            self.next()
            self.parse_unary(False)
            node = _Node("neg" if kind == "sub" else "pos", start)
        else:
            node = self.parse_primary()
        node = self.parse_postfix(node)
        if with_filter:
            node = self.parse_filter_expr(node)
        return node

    def parse_primary(self, with_namespace: bool = False) -> _Node:
        token = self.current
        kind = token[0]
        if kind == "name":
            self.next()
            if token[1] in _CONSTANTS:
                return _Node("const", token[2])
            if with_namespace and self.current[0] == "dot":
                self.next()
                self.expect("name")
                return _Node("nsref", token[2], True)
            return _Node("name", token[2], True)
        if kind == "string":
            self.next()
            while self.current[0] == "string":
                self.next()
            return _Node("const", token[2])
        if kind in ("integer", "float"):
            self.next()
            return _Node("const", token[2])
        if kind == "lparen":
            self.next()
            node = self.parse_tuple(explicit_parentheses=True)
            self.expect("rparen")
            return node
        if kind == "lbracket":
            return self.parse_list()
        if kind == "lbrace":
            return self.parse_dict()
        self.fail(f"unexpected {describe(token)!r}", token[2])
        raise AssertionError  # pragma: no cover - fail() raises

    def parse_tuple(self, simplified: bool = False, with_condexpr: bool = True,
                    explicit_parentheses: bool = False, with_namespace: bool = False) -> _Node:
        # (Jinja2's extra_end_rules never match: see the module docstring.)
        start = self.current[2]
        items: List[_Node] = []
        is_tuple = False
        while True:
            if items:
                self.expect("comma")
            if self.current[0] in ("variable_end", "block_end", "rparen"):
                break
            if simplified:
                items.append(self.parse_primary(with_namespace=with_namespace))
            else:
                items.append(self.parse_expression(with_condexpr=with_condexpr))
            if self.current[0] == "comma":
                is_tuple = True
            else:
                break
            start = self.current[2]
        if not is_tuple:
            if items:
                return items[0]
            if not explicit_parentheses:
                self.fail(f"Expected an expression, got {describe(self.current)!r}")
        return _Node("tuple", start, all(item.assignable for item in items))

    def parse_list(self) -> _Node:
        token = self.expect("lbracket")
        items = 0
        while self.current[0] != "rbracket":
            if items:
                self.expect("comma")
            if self.current[0] == "rbracket":
                break
            self.parse_expression()
            items += 1
        self.expect("rbracket")
        return _Node("list", token[2])

    def parse_dict(self) -> _Node:
        token = self.expect("lbrace")
        items = 0
        while self.current[0] != "rbrace":
            if items:
                self.expect("comma")
            if self.current[0] == "rbrace":
                break
            self.parse_expression()
            self.expect("colon")
            self.parse_expression()
            items += 1
        self.expect("rbrace")
        return _Node("dict", token[2])

    def parse_postfix(self, node: _Node) -> _Node:
        while True:
            kind = self.current[0]
            if kind == "dot" or kind == "lbracket":
                node = self.parse_subscript()
            elif kind == "lparen":
                node = self.parse_call()
            else:
                return node

    def parse_filter_expr(self, node: _Node) -> _Node:
        while True:
            kind = self.current[0]
            if kind == "pipe":
                node = self.parse_filter()  # type: ignore[assignment]
            elif kind == "name" and self.current[1] == "is":
                node = self.parse_test()
            elif kind == "lparen":
                node = self.parse_call()
            else:
                return node

    def parse_subscript(self) -> _Node:
        token = self.next()
        if token[0] == "dot":
            attr = self.current
            self.next()
            if attr[0] == "name":
                return _Node("getattr", token[2])
            if attr[0] != "integer":
                self.fail("expected name or number", attr[2])
            return _Node("getitem", token[2])
        items = 0  # a bracket
        while self.current[0] != "rbracket":
            if items:
                self.expect("comma")
            self.parse_subscribed()
            items += 1
        self.expect("rbracket")
        return _Node("getitem", token[2])

    def parse_subscribed(self) -> None:
        if self.current[0] == "colon":
            self.next()
        else:
            self.parse_expression()
            if self.current[0] != "colon":
                return
            self.next()
        if self.current[0] != "colon" and self.current[0] not in ("rbracket", "comma"):
            self.parse_expression()
        if self.current[0] == "colon":
            self.next()
            if self.current[0] not in ("rbracket", "comma"):
                self.parse_expression()

    def parse_call_args(self) -> None:
        token = self.expect("lparen")
        keywords = dyn_args = dyn_kwargs = False
        require_comma = False

        def ensure(condition: bool) -> None:
            if not condition:
                self.fail("invalid syntax for function call expression", token[2])

        while self.current[0] != "rparen":
            if require_comma:
                self.expect("comma")
                if self.current[0] == "rparen":
                    break
            if self.current[0] == "mul":
                ensure(not dyn_args and not dyn_kwargs)
                self.next()
                self.parse_expression()
                dyn_args = True
            elif self.current[0] == "pow":
                ensure(not dyn_kwargs)
                self.next()
                self.parse_expression()
                dyn_kwargs = True
            elif self.current[0] == "name" and self.look()[0] == "assign":
                ensure(not dyn_kwargs)
                self.next()
                self.next()
                self.parse_expression()
                keywords = True
            else:
                ensure(not dyn_args and not dyn_kwargs and not keywords)
                self.parse_expression()
            require_comma = True
        self.expect("rparen")

    def parse_call(self) -> _Node:
        token = self.current
        self.parse_call_args()
        return _Node("call", token[2])

    def parse_filter(self, start_inline: bool = False) -> "Optional[_Node]":
        node = None
        while self.current[0] == "pipe" or start_inline:
            if not start_inline:
                self.next()
            token = self.expect("name")
            while self.current[0] == "dot":
                self.next()
                self.expect("name")
            if self.current[0] == "lparen":
                self.parse_call_args()
            node = _Node("filter", token[2])
            start_inline = False
        return node

    def parse_test(self) -> _Node:
        token = self.next()
        negated = False
        if self.test("name:not"):
            self.next()
            negated = True
        self.expect("name")
        while self.current[0] == "dot":
            self.next()
            self.expect("name")
        current = self.current
        if current[0] == "lparen":
            self.parse_call_args()
        elif current[0] in _TEST_ARGUMENT_STARTS and not (
                current[0] == "name" and current[1] in ("else", "or", "and")):
            if current[0] == "name" and current[1] == "is":
                self.fail("You cannot chain multiple tests with is")
            self.parse_postfix(self.parse_primary())
        return _Node("not" if negated else "test", token[2])


def jinja_tokens(tokens: "Sequence[Tuple[str, str, int]]") -> "List[Tuple[str, Any, int]]":
    """The scanner's tokens as Jinja2's lexer types them."""
    types = _TYPES
    return [(types.get(kind, kind), text, offset) for kind, text, offset in tokens]


def diagnose(tokens: "Sequence[Tuple[str, str, int]]", end: "Tuple[str, Any, int]",
             unescape: Any, role: str = "print", block_name: "Optional[str]" = None,
             extension_tags: "Container[str]" = ()
             ) -> "Optional[Tuple[str, int, type, Any]]":
    """The first error Jinja2 raises reading this tag, or None when it raises none.

    ``tokens`` are the tag's scanner tokens (a statement's tag name first); ``end`` is the
    Jinja2 token that follows them: ``("variable_end", "", offset)``, ``("block_end", "",
    offset)``, ``("eof", "", offset)`` or ``("error", exception, offset)`` for a scanner error
    Jinja2's lexer would raise when it gets there. ``role`` is ``"print"`` for ``{{ }}``, else
    what the tag is to the innermost open block: ``"closer"`` (``endfor``...; ``block_name``
    for ``endblock``), ``"middle"`` (``else``, ``elif``) or ``"statement"``. ``unescape(text)``
    decodes a string literal, raising TemplateSyntaxError as Jinja2's lexer does.
    ``extension_tags`` are the extensions' statements the environment has (``"do"``,
    ``"generation"``).

    Returns ``(message, offset, exception class, ready error)``: the ready error is the
    scanner's own exception (then the rest is unused), else None.
    """
    walk_tokens = jinja_tokens(tokens)
    walk_tokens.append(end)
    try:
        walk = _Walk(walk_tokens, unescape)
        if role == "print":
            walk.parse_tuple()
            walk.expect("variable_end")
        else:
            walk.statement(role, block_name, extension_tags)
    except _Found as found:
        return found.message, found.offset, found.cls, found.error
    except RecursionError:  # nested deeper than Python's stack allows (Jinja2's parser too)
        return None
    return None


__all__ = ["diagnose", "describe", "describe_type", "describe_scanner_token", "jinja_tokens"]
