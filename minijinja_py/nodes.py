"""AST node classes: the parser builds them, the compiler turns them into closures.

Names follow Jinja2's nodes where Jinja2 has one. Every node carries the 1-based ``lineno``
and ``column`` of the template text it came from; errors are located with them.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported at run time: it costs milliseconds
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any, Iterator, List, Tuple


class Node:
    """Base class; subclasses list their child fields in ``fields``."""

    fields: Tuple[str, ...] = ()
    __slots__ = ("lineno", "column")

    def __init__(self, *values: Any, lineno: int = 0, column: int = 0) -> None:
        if len(values) != len(self.fields):
            raise TypeError(f"{type(self).__name__} takes {len(self.fields)} fields")
        for name, value in zip(self.fields, values):
            setattr(self, name, value)
        self.lineno = lineno
        self.column = column

    def iter_child_nodes(self) -> Iterator["Node"]:
        """Yield every direct child node (inside lists and tuples too)."""
        for name in self.fields:
            yield from _nodes_in(getattr(self, name))

    def find_all(self, node_type: type) -> Iterator["Node"]:
        """Yield every descendant of the given type, depth first, without recursion."""
        stack: List[Node] = list(self.iter_child_nodes())[::-1]
        while stack:
            node = stack.pop()
            if isinstance(node, node_type):
                yield node
            stack.extend(list(node.iter_child_nodes())[::-1])

    def __repr__(self) -> str:
        args = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.fields)
        return f"{type(self).__name__}({args})"


def _nodes_in(value: Any) -> Iterator[Node]:
    if isinstance(value, Node):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _nodes_in(item)


def _node(name: str, fields: str, doc: str) -> type:
    cls = type(name, (Node,), {"fields": tuple(fields.split()), "__slots__": tuple(fields.split()),
                               "__doc__": doc})
    return cls


# ---- template structure --------------------------------------------------------------------
Template = _node("Template", "body", "The whole template: a list of statements.")
Output = _node("Output", "nodes", "Print the expressions and text in ``nodes``.")
TemplateData = _node("TemplateData", "data", "Literal template text.")
If = _node("If", "test body elif_ else_", "``if``; ``elif_`` is a list of If nodes.")
For = _node("For", "target iter body else_ test recursive",
            "``for target in iter [if test] [recursive]`` with optional ``else`` body.")
Assign = _node("Assign", "target node", "``{% set target = node %}``.")
AssignBlock = _node("AssignBlock", "target filter body",
                    "``{% set target | filter %}body{% endset %}``; filter may be None.")
Macro = _node("Macro", "name params body", "A macro definition; params are (name, default).")
CallBlock = _node("CallBlock", "call params body", "``{% call(params) call %}body{% endcall %}``.")
FilterBlock = _node("FilterBlock", "filter body", "``{% filter f %}body{% endfilter %}``.")
With = _node("With", "targets values body", "``{% with a = 1 %}body{% endwith %}``.")
Break = _node("Break", "", "``{% break %}``.")
Continue = _node("Continue", "", "``{% continue %}``.")
Generation = _node("Generation", "body", "``{% generation %}`` (transformers): records its span.")
AutoEscape = _node("AutoEscape", "enabled body",
                   "``{% autoescape expr %}``: output of expressions is HTML-escaped when true.")
Scope = _node("Scope", "body", "A body rendered in its own scope (``{% block %}``).")
NoLoader = _node("NoLoader", "kind",
                 "``include``/``import``/``extends``: there is no loader, so they fail at runtime.")

# ---- expressions --------------------------------------------------------------------------
Const = _node("Const", "value", "A literal constant.")
Name = _node("Name", "name", "A variable read.")
TupleLit = _node("TupleLit", "items", "``(a, b)``.")
ListLit = _node("ListLit", "items", "``[a, b]``.")
DictLit = _node("DictLit", "pairs", "``{k: v}``; pairs is a list of (key, value) nodes.")
Getattr = _node("Getattr", "node attr", "``node.attr``: attribute first, then item.")
Getitem = _node("Getitem", "node arg", "``node[arg]``: item first, then attribute.")
Slice = _node("Slice", "start stop step", "``a:b:c`` inside a subscript; parts may be None.")
Call = _node("Call", "node args kwargs dyn_args dyn_kwargs", "A call.")
Filter = _node("Filter", "node name args kwargs dyn_args dyn_kwargs",
               "``node|name(args)``; node is None inside filter blocks.")
Test = _node("Test", "node name args kwargs dyn_args dyn_kwargs negated", "``node is name``.")
CondExpr = _node("CondExpr", "test expr1 expr2", "``expr1 if test else expr2``.")
BinOp = _node("BinOp", "op left right", "Arithmetic: + - * / // % **.")
Concat = _node("Concat", "nodes", "``a ~ b ~ c``.")
Compare = _node("Compare", "expr ops", "Chained comparison; ops is a list of (op, node).")
And = _node("And", "left right", "``left and right``.")
Or = _node("Or", "left right", "``left or right``.")
Not = _node("Not", "node", "``not node``.")
Neg = _node("Neg", "node", "``-node``.")
Pos = _node("Pos", "node", "``+node``.")

# ---- assignment targets ------------------------------------------------------------------
NameTarget = _node("NameTarget", "name", "Assign to a name.")
NSRef = _node("NSRef", "name attr", "Assign to ``namespace.attr``.")
TupleTarget = _node("TupleTarget", "items", "Unpack into several targets.")
