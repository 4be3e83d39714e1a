"""The compiler of provenance renders: the ordinary compiler with the few changes that keep
origins (see provenance.py).

- the template's text and string constants become located :class:`~.provenance.PStr`;
- output, ``~`` and captured output (macros, ``set`` blocks, ``{% generation %}``) join
  their pieces keeping origins; a value printed that is not a str is printed, then derived
  from the inputs inside it;
- filters and calls return results with origins (exact for the filters that copy text, see
  ``provenance.FILTER_TRACERS``; derived from their operands otherwise);
- hot loops stay closures (generated code would not keep origins).

Everything else, the sandbox, the limits and the step budget included, is the ordinary
compiler's code: a provenance render refuses and fails exactly where a plain one does.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any, List

import copy

from ..syntax import nodes as n
from ..runtime.operators import apply as arith_apply
from ..runtime.objects import to_text as _to_text
from ..compiler.closures import Compiler, RenderContext, Scope, _locate
from ..exceptions import TemplateError
from ..guard.limits import check_string_size
from ..guard.prices import CHARS_SHIFT
from .origins import (PFloat, PInt, PStr, derive, escape_with_origins, fill_unknown, join_pieces,
                      joined_output, mark_safe, printable, settle, template_string, traced_filter)


class ProvenanceContext(RenderContext):
    """Render state of a provenance render: captured output keeps its origins."""

    __slots__ = ()
    join = staticmethod(join_pieces)
    output = staticmethod(joined_output)
    safe = staticmethod(mark_safe)


def _printed(value: Any) -> str:
    """How ``{{ value }}`` prints, with origins: a str as it is; anything else printed and
    derived from what it holds (a number from the input, the strings in a list)."""
    if isinstance(value, str) and type(value) is not str and not isinstance(value, PStr):
        return printable(value)  # Markup and other str subclasses
    if isinstance(value, str):
        return value
    if isinstance(value, (PInt, PFloat)):
        return str(value)
    return derive(_to_text(value), value)


def _folded_text(value: Any) -> str:
    """``str(value)`` for a piece of a `~` folded while compiling, with origins: a number or
    other constant printed is text the template computed."""
    return value if type(value) is PStr else derive(str(value), value)


def _add_one(value: Any, other: Any, link: n.Node) -> Any:
    """``value + other`` as the ordinary compiler computes one link of a `+` chain."""
    try:
        return arith_apply("+", value, other)
    except TemplateError as exc:
        exc._locate(link.lineno, link.column)
        raise
    except Exception as exc:
        raise _locate(exc, link) from exc


def _settled_call(result: Any, positional: list, keywords: dict) -> Any:
    """A call's result with origins: strings, numbers, and the keys of a fresh dict
    (``dict(id=call.id)``: a key named by a keyword argument is the template's text)."""
    inputs = (positional, tuple(keywords.values()))
    if type(result) is PStr:
        return fill_unknown(result, *inputs)
    if type(result) is dict and any(type(key) is str for key in result):
        return {(template_string(key, 0, 0) if key in keywords else derive(key, *inputs))
                if type(key) is str else key: value for key, value in result.items()}
    return settle(result, inputs)


class ProvenanceCompiler(Compiler):
    """Compiles a template whose string constants are located PStr (see
    :func:`locate_literals`) for renders that record every character's origin."""

    generates_code = False
    printer = staticmethod(_printed)
    join_text = staticmethod(join_pieces)
    fold_text = staticmethod(_folded_text)

    @staticmethod
    def escaped_text(value: Any) -> str:
        return printable(escape_with_origins(value))

    def __init__(self, env: Any) -> None:
        # Filters get an environment whose filter table gives results with origins, also
        # to the filters they call by name (`map('tojson')`, `select('string')`).
        traced = copy.copy(env)
        traced.filters = {name: traced_filter(name, function)
                          for name, function in env.filters.items()}
        super().__init__(traced)

    def e_binop(self, node: n.Node) -> Any:
        if node.op != "+":
            return super().e_binop(node)
        # `a + b + c ...`: while the operands are str, one join keeps all their origins
        # (Python's `+` one link at a time would build and merge every prefix)
        chain: List[n.Node] = []
        current = node
        while isinstance(current, n.BinOp) and current.op == "+":
            chain.append(current)
            current = current.left
        chain.reverse()
        operands = [self.expr(current)] + [self.expr(link.right) for link in chain]

        def add(scope: Scope) -> Any:
            pieces: List[str] = []
            built = 0
            total = 0
            value: Any = None
            for index, operand in enumerate(operands):
                item = operand(scope)
                if index and not pieces:
                    value = _add_one(value, item, chain[index - 1])
                    continue
                kind = type(item)
                if kind is PStr or kind is str:
                    pieces.append(item)
                    total += len(item)
                    if index:
                        built += total
                    continue
                value = join_pieces(pieces) if pieces else None
                value = item if value is None else _add_one(value, item, chain[index - 1])
                pieces = []
            if pieces:
                if total >= 1_000_000:
                    try:
                        check_string_size(total)
                    except TemplateError as exc:
                        exc._locate(node.lineno, node.column)
                        raise
                value = join_pieces(pieces)
            if built >> CHARS_SHIFT:
                try:
                    scope.ctx.charge(built >> CHARS_SHIFT)
                except TemplateError as exc:
                    raise _locate(exc, node) from None
            return value

        return add

    def e_call(self, node: n.Node) -> Any:
        if isinstance(node.node, n.Getattr):
            # methods: provenance.traced_method, reached through the sandbox's method table
            return super().e_call(node)
        args, _ = self.arguments(node)
        callee = self.expr(node.node)
        sandbox = self.sandbox

        def call(scope: Scope) -> Any:
            function = callee(scope)
            positional, keywords = args(scope)
            try:
                result = sandbox.call(function, positional, keywords)
            except Exception as exc:
                raise _locate(exc, node) from exc
            return _settled_call(result, positional, keywords)

        return call


ProvenanceCompiler.expressions = {**Compiler.expressions,
                                  n.BinOp: ProvenanceCompiler.e_binop,
                                  n.Call: ProvenanceCompiler.e_call}


def locate_literals(ast: n.Node) -> n.Node:
    """Turn the template's text and string constants into located PStr (in place: pass a
    freshly parsed AST, never the one plain renders use)."""
    for node in ast.find_all((n.TemplateData, n.Const)):
        if isinstance(node, n.TemplateData):
            node.data = template_string(node.data, node.lineno, node.column)
        elif type(node.value) is str:
            node.value = template_string(node.value, node.lineno, node.column)
    return ast
