"""AST node classes: the parser builds them, the compiler turns them into closures.

Names follow Jinja2's nodes where Jinja2 has one. Every node carries the 1-based ``lineno``
and ``column`` of the template text it came from; errors are located with them.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported at run time: it costs milliseconds
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any, Iterator, List, Tuple

from ..guard.limits import check_deadline


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
        return iter(self.child_nodes())

    def child_nodes(self) -> List["Node"]:
        """Every direct child node (inside lists and tuples too), in a new list."""
        children: List[Node] = []
        for name in self.fields:
            value = getattr(self, name)
            if isinstance(value, Node):
                children.append(value)
            elif isinstance(value, (list, tuple)):
                _collect_nodes(value, children)
        return children

    def find_all(self, node_type: type) -> Iterator["Node"]:
        """Yield every descendant of the given type, depth first, without recursion."""
        stack = self.child_nodes()
        stack.reverse()
        pop = stack.pop
        extend = stack.extend
        countdown = DEADLINE_EVERY
        while stack:
            node = pop()
            countdown -= 1
            if not countdown:  # a look at the parse deadline (Limits.max_seconds)
                countdown = DEADLINE_EVERY
                check_deadline_at(node)
            if isinstance(node, node_type):
                yield node
            children = node.child_nodes()
            if children:
                children.reverse()
                extend(children)

    def __repr__(self) -> str:
        args = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.fields)
        return f"{type(self).__name__}({args})"


DEADLINE_EVERY = 1024  # nodes walked between two looks at the parse deadline (a clock read)


def check_deadline_at(node: Node) -> None:
    """limits.check_deadline(), the error located at ``node``."""
    try:
        check_deadline()
    except Exception as exc:
        locate = getattr(exc, "_locate", None)
        if locate is not None:
            locate(node.lineno or None, node.column or None)
        raise


def _collect_nodes(items: Any, out: List[Node]) -> None:
    """Append the nodes in ``items`` (a list or tuple, nested ones too) to ``out``, in order."""
    for item in items:
        if isinstance(item, Node):
            out.append(item)
        elif isinstance(item, (list, tuple)):
            _collect_nodes(item, out)


def _make_init(fields: Tuple[str, ...], setters: List[Any]) -> Any:
    """``__init__`` for a node class: Node.__init__ unrolled for its number of fields.

    The parser makes one node per few tokens, so this is on the hot path of parsing large
    templates. The slot descriptors' setters stand in for ``setattr(self, name, value)``.
    """
    count = len(fields)
    if count == 0:
        def __init__(self: Any, *values: Any, lineno: int = 0, column: int = 0) -> None:
            if values:
                raise TypeError(f"{type(self).__name__} takes {count} fields")
            self.lineno = lineno
            self.column = column
    elif count == 1:
        set_a, = setters

        def __init__(self: Any, *values: Any, lineno: int = 0, column: int = 0) -> None:
            if len(values) != 1:
                raise TypeError(f"{type(self).__name__} takes {count} fields")
            set_a(self, values[0])
            self.lineno = lineno
            self.column = column
    elif count == 2:
        set_a, set_b = setters

        def __init__(self: Any, *values: Any, lineno: int = 0, column: int = 0) -> None:
            if len(values) != 2:
                raise TypeError(f"{type(self).__name__} takes {count} fields")
            a, b = values
            set_a(self, a)
            set_b(self, b)
            self.lineno = lineno
            self.column = column
    elif count == 3:
        set_a, set_b, set_c = setters

        def __init__(self: Any, *values: Any, lineno: int = 0, column: int = 0) -> None:
            if len(values) != 3:
                raise TypeError(f"{type(self).__name__} takes {count} fields")
            a, b, c = values
            set_a(self, a)
            set_b(self, b)
            set_c(self, c)
            self.lineno = lineno
            self.column = column
    else:
        pairs = tuple(setters)

        def __init__(self: Any, *values: Any, lineno: int = 0, column: int = 0) -> None:
            if len(values) != count:
                raise TypeError(f"{type(self).__name__} takes {count} fields")
            for setter, value in zip(pairs, values):
                setter(self, value)
            self.lineno = lineno
            self.column = column
    return __init__


def _make_children(fields: Tuple[str, ...], getters: List[Any]) -> Any:
    """``child_nodes`` for a node class, unrolled like its ``__init__``."""
    if not fields:
        def child_nodes(self: Any) -> List[Node]:
            return []
    elif len(fields) == 1:
        get_a, = getters

        def child_nodes(self: Any) -> List[Node]:
            value = get_a(self)
            if isinstance(value, Node):
                return [value]
            children: List[Node] = []
            if isinstance(value, (list, tuple)):
                _collect_nodes(value, children)
            return children
    else:
        def child_nodes(self: Any) -> List[Node]:
            children: List[Node] = []
            for getter in getters:
                value = getter(self)
                if isinstance(value, Node):
                    children.append(value)
                elif isinstance(value, (list, tuple)):
                    _collect_nodes(value, children)
            return children
    child_nodes.__doc__ = Node.child_nodes.__doc__
    return child_nodes


def _node(name: str, fields: str, doc: str) -> type:
    names = tuple(fields.split())
    cls = type(name, (Node,), {"fields": names, "__slots__": names, "__doc__": doc})
    descriptors = [cls.__dict__[field] for field in names]
    cls.__init__ = _make_init(names, [d.__set__ for d in descriptors])  # type: ignore
    cls.child_nodes = _make_children(  # type: ignore[method-assign]
        names, [d.__get__ for d in descriptors])
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
Scope = _node("Scope", "name scoped required body",
              "``{% block name [scoped] [required] %}``: rendered where it stands in its own "
              "scope, and callable as ``self.name()``.")
ExprStmt = _node("ExprStmt", "node",
                 "``{% do expr %}``: evaluate and discard (Jinja2's ``do`` extension).")
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
