"""The static cost of a body, in the steps counted against ``Limits.max_steps``: what the
compiler charges once per loop iteration, macro call or block (see guard/prices.py for the
price of each piece of run-time work).

The static cost of a body counts its expression and statement nodes once each (literals are
free), taking the costliest branch of every ``if``, and leaves out bodies that are charged on
their own when they run (nested loops, macros, call blocks). Charging it once per iteration or
call keeps the accounting out of the evaluator's inner loops.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any, Iterable

from ..syntax import nodes as n

#: Steps per AST node executed: most nodes cost about a tenth of a microsecond; calls,
#: filters and printing cost more. Literals are free (they are constants at run time).
NODE_STEPS = {
    n.Const: 0, n.TemplateData: 0, n.Break: 0, n.Continue: 0,
    n.Output: 4, n.Call: 5, n.Filter: 5, n.Test: 3, n.Assign: 2, n.AssignBlock: 5,
    n.FilterBlock: 5, n.With: 3,
}

# Bodies that charge for themselves when they run: only their header counts here.
_SELF_CHARGED = {n.For: ("iter",), n.Macro: (), n.CallBlock: ("call",)}


def body_cost(statements: Iterable[Any]) -> int:
    """The static cost of running ``statements`` once, in steps."""
    return sum(_cost(statement) for statement in statements)


def _cost(node: Any) -> int:
    # (loops rather than sum() of generators: compiling a long template walks its bodies here)
    if isinstance(node, (list, tuple)):
        total = 0
        for item in node:
            total += _cost(item)
        return total
    if not isinstance(node, n.Node):
        return 0
    kind = type(node)
    total = NODE_STEPS.get(kind, 1)
    if kind is n.If:
        branches = [node.body] + [branch.body for branch in node.elif_] + [node.else_ or []]
        tests = [node.test] + [branch.test for branch in node.elif_]
        return total + _cost(tests) + max(_cost(branch) for branch in branches)
    if kind is n.CondExpr:
        return total + _cost(node.test) + max(_cost(node.expr1), _cost(node.expr2))
    fields = _SELF_CHARGED.get(kind)
    for field in node.fields if fields is None else fields:
        total += _cost(getattr(node, field))
    return total
