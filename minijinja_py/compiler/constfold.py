"""Jinja2's compile-time evaluation of printed constant expressions, where it differs.

Jinja2 evaluates every ``{{ ... }}`` child made only of constants while it compiles the
template (``Node.as_const``), through its sandbox, and prints the value if that worked; at run
time it would evaluate the same expression differently in one place: a slice. At run time
``x[a:b]`` is Python's subscript (``0[:]`` is a TypeError), while at compile time it goes
through ``environment.getitem``, which turns the TypeError into an undefined value: so
``{{ 0[:] }}`` prints nothing, ``{{ 0 ~ 0[:] }}`` prints ``0`` and ``{{ 0[:] is defined }}``
prints ``False`` in Jinja2, while ``{% if 0[:] %}`` raises.

The compiler asks :func:`fold_printed` about each printed expression that slices a constant;
everything else prints the same either way and is left to the ordinary evaluation. It asks
too about each expression holding what Jinja2 could not compile (a keyword given twice, a
filter or test the environment lacks): what the folding leaves out (``false and f(a=1,
a=1)``, ``1 if true else x|unknown``) is never compiled, in Jinja2 nor here. Any failure
here means "not constant" (Jinja2's ``Impossible``): the expression is then evaluated at
render time, as in Jinja2.

Inside ``{% autoescape %}`` it asks about every printed expression: there a constant prints as
Jinja2 computed it while compiling, which the render would not reproduce (``~`` escapes the
text next to Markup at render time only, and in a block whose flag is only known at render
time a constant is escaped as compiled while a value is escaped as the flag then says).
"""

from __future__ import annotations

import operator

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any, Callable, Dict

from ..syntax import nodes as n
from ..runtime.objects import MISSING

__all__ = ["slices_a_constant", "fold_printed", "has_safe_repr", "EscapingEnvironment",
           "FOLDED_KINDS"]

#: The expression kinds Jinja2's code generator tries to fold wherever they stand
#: (``optimizeconst``): folded when the value has a safe repr.
FOLDED_KINDS = frozenset({n.BinOp, n.Neg, n.Pos, n.Not, n.And, n.Or, n.Concat, n.Compare,
                          n.Getattr, n.Getitem, n.Filter, n.Test, n.CondExpr, n.Call})


#: The built-in filters Jinja2 hands its template context (``@pass_context``), which its
#: ``as_const`` refuses: a repeated keyword among their arguments is then compiled (and its
#: error raised), and ``random`` draws anew at every render.
_CONTEXT_FILTERS = frozenset({"map", "select", "reject", "selectattr", "rejectattr", "random"})


class _Impossible(Exception):
    """The expression is not a compile-time constant (Jinja2's ``nodes.Impossible``)."""


_BINOPS: "Dict[str, Callable[[Any, Any], Any]]" = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
    "//": operator.floordiv, "%": operator.mod, "**": operator.pow,
}
_COMPARE: "Dict[str, Callable[[Any, Any], Any]]" = {
    "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
    ">": operator.gt, ">=": operator.ge,
    "in": lambda a, b: a in b, "notin": lambda a, b: a not in b,
}


def slices_a_constant(node: n.Node) -> bool:
    """Whether ``node`` holds a subscript by a slice (the one place where Jinja2's
    compile-time value can differ from its run-time value)."""
    if isinstance(node, n.Getitem) and isinstance(node.arg, n.Slice):
        return True
    return any(slices_a_constant(child) for child in node.child_nodes())


def has_safe_repr(value: "Any") -> bool:
    """Jinja2's test for a folded value it may write into its code as a constant."""
    if value is None or value is NotImplemented or value is Ellipsis:
        return True
    if isinstance(value, (bool, int, float, complex, range, str)):
        return True
    if type(value) in (tuple, list, set, frozenset):
        return all(has_safe_repr(item) for item in value)
    if type(value) is dict:
        return all(has_safe_repr(key) and has_safe_repr(item) for key, item in value.items())
    return False


def fold_printed(node: n.Node, env: "Any", join: "Callable[[list], str]" = "".join,
                 text: "Callable[[Any], str]" = str, volatile: bool = False,
                 escaping: bool = False) -> "Any":
    """The value Jinja2 computes for the expression ``node`` while compiling, or MISSING
    when it is not a constant there (``join`` joins the pieces of ``~``, made by ``text``).
    ``escaping``: inside ``{% autoescape true %}`` (the filters that escape there, ``join``,
    ``replace``..., do). ``volatile``: in a block whose escaping is decided at render time
    (``{% autoescape flag %}``), where Jinja2 computes no filter or test while compiling."""
    if escaping:
        env = EscapingEnvironment(env)
    try:
        return _Folder(env, join, text, volatile).value(node)
    except _Impossible:
        return MISSING
    except RecursionError:
        return MISSING


class EscapingEnvironment:
    """``env`` as the filters given the environment see it inside ``{% autoescape true %}``
    while Jinja2 compiles (its eval context then): escaping. At render time they ask the
    render itself (filters._autoescape)."""

    __slots__ = ("_env",)
    autoescape = True

    def __init__(self, env: "Any") -> None:
        self._env = env

    def __getattr__(self, name: str) -> "Any":
        return getattr(self._env, name)


class _Folder:
    def __init__(self, env: "Any", join: "Callable[[list], str]",
                 text: "Callable[[Any], str]" = str, volatile: bool = False) -> None:
        self.env = env
        self.join = join
        self.text = text
        self.volatile = volatile

    def value(self, node: n.Node) -> "Any":
        method = getattr(self, "fold_" + type(node).__name__, None)
        if method is None:
            raise _Impossible
        try:
            return method(node)
        except _Impossible:
            raise
        except Exception as exc:  # anything failing: evaluated at render time instead
            raise _Impossible from exc

    def fold_Const(self, node: n.Node) -> "Any":
        return node.value

    def fold_TupleLit(self, node: n.Node) -> "Any":
        return tuple(self.value(item) for item in node.items)

    def fold_ListLit(self, node: n.Node) -> "Any":
        return [self.value(item) for item in node.items]

    def fold_DictLit(self, node: n.Node) -> "Any":
        from ..guard.collisions import check_table

        pairs = [(self.value(key), self.value(item)) for key, item in node.pairs]
        check_table([key for key, _ in pairs])  # refused: evaluated (and refused) at render
        return dict(pairs)

    def fold_BinOp(self, node: n.Node) -> "Any":
        from ..runtime.operators import apply

        return apply(node.op, self.value(node.left), self.value(node.right))

    def fold_Neg(self, node: n.Node) -> "Any":
        return -self.value(node.node)

    def fold_Pos(self, node: n.Node) -> "Any":
        return +self.value(node.node)

    def fold_Not(self, node: n.Node) -> "Any":
        return not self.value(node.node)

    def fold_And(self, node: n.Node) -> "Any":
        return self.value(node.left) and self.value(node.right)

    def fold_Or(self, node: n.Node) -> "Any":
        return self.value(node.left) or self.value(node.right)

    def fold_Concat(self, node: n.Node) -> "Any":
        return self.join([self.text(self.value(item)) for item in node.nodes])

    def fold_CondExpr(self, node: n.Node) -> "Any":
        if self.value(node.test):
            return self.value(node.expr1)
        if node.expr2 is None:
            raise _Impossible
        return self.value(node.expr2)

    def fold_Compare(self, node: n.Node) -> "Any":
        from ..guard.collisions import check_compared, check_membership

        left = self.value(node.expr)
        result = True
        for op, operand in node.ops:
            right = self.value(operand)
            # what the render would check first (the compiler's comparisons)
            if op == "in" or op == "notin":
                check_membership(left, right)
            else:
                check_compared(left, right)
            result = _COMPARE[op](left, right)
            if not result:
                return False
            left = right
        return result

    def fold_Slice(self, node: n.Node) -> "Any":
        return slice(*[self.value(part) if part is not None else None
                       for part in (node.start, node.stop, node.step)])

    def fold_Getitem(self, node: n.Node) -> "Any":
        return self.env.sandbox.getitem(self.value(node.node), self.value(node.arg))

    def fold_Getattr(self, node: n.Node) -> "Any":
        return self.env.sandbox.getattr(self.value(node.node), node.attr)

    def _call(self, node: n.Node, table: "Dict[str, Any]") -> "Any":
        from ..runtime.filters.common import FILTERS
        from ..runtime.objects import wants_environment

        function = table.get(node.name)
        if self.volatile or function is None or node.node is None or \
                node.dyn_args is not None or node.dyn_kwargs is not None:
            raise _Impossible
        if node.name in _CONTEXT_FILTERS and function is FILTERS.get(node.name):
            raise _Impossible  # Jinja2 gives these its context: never evaluated while compiling
        args = [self.value(node.node)] + [self.value(arg) for arg in node.args]
        kwargs = {name: self.value(arg) for name, arg in node.kwargs}
        if wants_environment(function):
            args.insert(0, self.env)
        return function(*args, **kwargs)

    def fold_Filter(self, node: n.Node) -> "Any":
        return self._call(node, self.env.filters)

    def fold_Test(self, node: n.Node) -> "Any":
        result = self._call(node, self.env.tests)
        return not result if node.negated else result
