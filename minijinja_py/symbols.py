"""Frame symbol analysis: which names a scope must start as undefined, as Jinja2's do.

Jinja2 compiles each frame (the template, a loop body, a macro, ...) into Python locals. A
name that a frame stores (``set``, ``macro``) before it ever reads it, and that no enclosing
frame knows, starts that frame as *missing*: code in NESTED frames that reads it before the
store sees undefined, even when the render context has a value of that name::

    {% for m in messages %}[{{ x }}]{% endfor %}{% set x = 'late' %}   -> [] even with x='ctx'

A name stored in only some branches of an ``if`` is instead resolved from the context first.
minijinja_py resolves names through a chain of scopes at render time; to reproduce these
semantics it pre-populates each frame's scope with an undefined value for exactly those names.
This module computes them, walking a frame's statements in order the way Jinja2's
FrameSymbolVisitor does (nested frames are not entered: they are analysed on their own).
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported at run time: it costs milliseconds
if TYPE_CHECKING:  # pragma: no cover
    from typing import Dict, FrozenSet, Iterable, List, Set

from . import nodes as n

RESOLVE = "resolve"      # read from the enclosing scopes / context
UNDEFINED = "undefined"  # starts undefined in this frame
ALIAS = "alias"          # refers to an enclosing frame's variable


class FrameSymbols:
    """The names one frame refers to, and how each starts."""

    __slots__ = ("outer", "modes", "stores")

    def __init__(self, outer: FrozenSet[str]) -> None:
        self.outer = outer
        self.modes: Dict[str, str] = {}
        self.stores: Set[str] = set()

    def copy(self) -> "FrameSymbols":
        other = FrameSymbols(self.outer)
        other.modes = dict(self.modes)
        other.stores = set(self.stores)
        return other

    def load(self, name: str) -> None:
        if name not in self.modes:
            self.modes[name] = ALIAS if name in self.outer else RESOLVE

    def store(self, name: str) -> None:
        self.stores.add(name)
        if name not in self.modes:
            self.modes[name] = ALIAS if name in self.outer else UNDEFINED

    def branch_update(self, branches: List["FrameSymbols"]) -> None:
        counts: Dict[str, int] = {}
        for branch in branches:
            for name in branch.stores:
                if name not in self.stores:
                    counts[name] = counts.get(name, 0) + 1
        for branch in branches:
            for name, mode in branch.modes.items():
                self.modes.setdefault(name, mode)
            self.stores.update(branch.stores)
        for name, count in counts.items():
            if count != len(branches):
                self.modes[name] = ALIAS if name in self.outer else RESOLVE

    def starts_undefined(self) -> FrozenSet[str]:
        return frozenset(name for name, mode in self.modes.items() if mode == UNDEFINED)

    def refs(self) -> FrozenSet[str]:
        return frozenset(self.modes) | self.outer


def analyse_frame(body: Iterable[n.Node], outer: FrozenSet[str],
                  declared: Iterable[str] = ()) -> FrameSymbols:
    """Symbols of a frame whose statements are ``body``; ``declared`` are its parameters."""
    symbols = FrameSymbols(outer)
    for name in declared:
        symbols.modes[name] = RESOLVE
        symbols.stores.add(name)
    visitor = _Visitor(symbols)
    for node in body:
        visitor.visit(node)
    return visitor.symbols


class _Visitor:
    def __init__(self, symbols: FrameSymbols) -> None:
        self.symbols = symbols

    def visit(self, node: n.Node) -> None:
        handler = getattr(self, "visit_" + type(node).__name__, None)
        if handler is not None:
            handler(node)
        else:
            for child in node.iter_child_nodes():
                self.visit(child)

    def visit_Name(self, node: n.Node) -> None:
        self.symbols.load(node.name)

    def visit_NameTarget(self, node: n.Node) -> None:
        self.symbols.store(node.name)

    def visit_NSRef(self, node: n.Node) -> None:
        self.symbols.load(node.name)

    def visit_Assign(self, node: n.Node) -> None:
        self.visit(node.node)
        self.visit(node.target)

    def visit_AssignBlock(self, node: n.Node) -> None:
        self.visit(node.target)

    def visit_If(self, node: n.Node) -> None:
        self.visit(node.test)
        original = self.symbols

        def branch(statements: Iterable[n.Node]) -> FrameSymbols:
            self.symbols = original.copy()
            for statement in statements:
                self.visit(statement)
            result = self.symbols
            self.symbols = original
            return result

        body = branch(node.body)
        elifs = branch(node.elif_)
        else_ = branch(node.else_)
        original.branch_update([body, elifs, else_])

    def visit_For(self, node: n.Node) -> None:
        self.visit(node.iter)

    def visit_Macro(self, node: n.Node) -> None:
        self.symbols.store(node.name)

    def visit_CallBlock(self, node: n.Node) -> None:
        self.visit(node.call)

    def visit_FilterBlock(self, node: n.Node) -> None:
        if node.filter is not None:
            self.visit(node.filter)

    def visit_Filter(self, node: n.Node) -> None:
        for child in node.iter_child_nodes():
            self.visit(child)

    def visit_With(self, node: n.Node) -> None:
        for value in node.values:
            self.visit(value)

    def visit_Scope(self, node: n.Node) -> None:
        pass

    def visit_Generation(self, node: n.Node) -> None:
        pass

    def visit_AutoEscape(self, node: n.Node) -> None:
        self.visit(node.enabled)
        for statement in node.body:
            self.visit(statement)
