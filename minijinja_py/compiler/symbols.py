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
    from typing import Any, Container, Dict, FrozenSet, Iterable, List, Optional, Set

from ..syntax import nodes as n

DEADLINE_EVERY = 1024  # nodes visited between two looks at the parse deadline (a clock read)

RESOLVE = "resolve"      # read from the enclosing scopes / context
UNDEFINED = "undefined"  # starts undefined in this frame
ALIAS = "alias"          # refers to an enclosing frame's variable


class Refs:
    """The names a frame and its enclosing frames know: the frame's own, then ``outer``'s.

    Only membership is asked of it. A chain rather than one flat set, so that each of many
    sibling frames (the loops of a long template) does not copy every name of the template.
    """

    __slots__ = ("names", "outer")

    def __init__(self, names: FrozenSet[str], outer: "Container[str]") -> None:
        self.names = names
        self.outer = outer

    def __contains__(self, name: object) -> bool:
        refs: Any = self
        while type(refs) is Refs:
            if name in refs.names:
                return True
            refs = refs.outer
        return name in refs


class FrameSymbols:
    """The names one frame refers to, and how each starts.

    The symbols of a branch of an ``if`` are a copy of the frame's: :meth:`copy` makes an
    overlay that records only what the branch adds (``parent`` holds the rest), so that
    neither copying nor merging a branch costs more than what the branch itself names (a
    template of many ``if`` blocks would otherwise take quadratic time). That is exact because
    a branch never changes the mode of a name its parent has: :meth:`branch_update` only
    re-sets names stored in no enclosing copy, to the mode :meth:`_loaded` gives, which is
    what any mode recorded for such a name already is.
    """

    __slots__ = ("outer", "modes", "stores", "parent")

    def __init__(self, outer: "Container[str]", parent: Optional["FrameSymbols"] = None) -> None:
        self.outer = outer
        # shared empty ones until the first name is recorded (most branches record none)
        self.modes: Dict[str, str] = _NO_MODES
        self.stores: Set[str] = _NO_STORES  # type: ignore[assignment]
        self.parent = parent

    def copy(self) -> "FrameSymbols":
        return FrameSymbols(self.outer, self)

    def _mode(self, name: str) -> Optional[str]:
        symbols: Optional[FrameSymbols] = self
        while symbols is not None:
            mode = symbols.modes.get(name)
            if mode is not None:
                return mode
            symbols = symbols.parent
        return None

    def _stored(self, name: str) -> bool:
        symbols: Optional[FrameSymbols] = self
        while symbols is not None:
            if name in symbols.stores:
                return True
            symbols = symbols.parent
        return False

    def _loaded(self, name: str) -> str:
        return ALIAS if name in self.outer else RESOLVE

    def _set_mode(self, name: str, mode: str) -> None:
        if self.modes is _NO_MODES:
            self.modes = {}
        self.modes[name] = mode

    def _add_stores(self, names: Iterable[str]) -> None:
        if self.stores is _NO_STORES:
            self.stores = set()
        self.stores.update(names)

    def load(self, name: str) -> None:
        if self._mode(name) is None:
            self._set_mode(name, self._loaded(name))

    def store(self, name: str) -> None:
        self._add_stores((name,))
        if self._mode(name) is None:
            self._set_mode(name, ALIAS if name in self.outer else UNDEFINED)

    def branch_update(self, branches: List["FrameSymbols"]) -> None:
        """Merge the branches of an ``if`` (copies of this frame) back, as Jinja2 does."""
        counts: Dict[str, int] = {}
        for branch in branches:
            for name in branch.stores:  # a branch's own stores are the ones it added
                if not self._stored(name):
                    counts[name] = counts.get(name, 0) + 1
        for branch in branches:
            for name, mode in branch.modes.items():
                if self._mode(name) is None:
                    self._set_mode(name, mode)
            if branch.stores:
                self._add_stores(branch.stores)
        for name, count in counts.items():
            if count != len(branches):
                self._set_mode(name, self._loaded(name))

    def starts_undefined(self) -> FrozenSet[str]:
        return frozenset(name for name, mode in self._all_modes().items() if mode == UNDEFINED)

    def refs(self) -> "Container[str]":
        """What the frames nested in this one see as known names: this frame's and outer's."""
        names = frozenset(self._all_modes())
        outer = self.outer
        if not names or (isinstance(outer, (frozenset, set)) and names <= outer):
            return outer
        return Refs(names, outer)

    def _all_modes(self) -> Dict[str, str]:
        if self.parent is None:
            return self.modes
        modes = dict(self.parent._all_modes())
        modes.update(self.modes)
        return modes


def analyse_frame(body: Iterable[n.Node], outer: "Container[str]",
                  declared: Iterable[str] = (), first: Iterable[n.Node] = ()) -> FrameSymbols:
    """Symbols of a frame whose statements are ``body``; ``declared`` are its parameters,
    and ``first`` the expressions it evaluates before its statements (a macro's defaults, the
    flag of ``{% autoescape %}``).

    ``outer`` holds the names the enclosing frames know (their :meth:`FrameSymbols.refs`).
    """
    symbols = FrameSymbols(outer)
    for name in declared:
        symbols._set_mode(name, RESOLVE)
        symbols._add_stores((name,))
    visitor = _Visitor(symbols)
    for node in first:
        visitor.visit(node)
    for node in body:
        visitor.visit(node)
    return visitor.symbols


_check_deadline = n.check_deadline_at


class _Visitor:
    def __init__(self, symbols: FrameSymbols) -> None:
        self.symbols = symbols
        self.countdown = DEADLINE_EVERY  # nodes until the next look at the parse deadline

    def visit(self, node: n.Node) -> None:
        self.countdown -= 1
        if self.countdown <= 0:
            self.countdown = DEADLINE_EVERY
            _check_deadline(node)
        handler = _HANDLERS.get(type(node))  # visit_<node class name>
        if handler is not None:
            handler(self, node)
            return
        # any other node: its descendants in order, down to the nodes that have a handler
        # (a loop rather than recursion: long lists of literals are common)
        stack = node.child_nodes()
        stack.reverse()
        pop = stack.pop
        extend = stack.extend
        handlers = _HANDLERS
        const = n.Const
        data = n.TemplateData
        countdown = DEADLINE_EVERY
        while stack:
            node = pop()
            countdown -= 1
            if not countdown:
                countdown = DEADLINE_EVERY
                _check_deadline(node)
            cls = type(node)
            if cls is const:
                if not isinstance(node.value, _CONTAINERS):
                    continue  # a literal: nothing below (the commonest leaf, in long lists)
            elif cls is data and not isinstance(node.data, _CONTAINERS):
                continue
            handler = handlers.get(cls)
            if handler is not None:
                handler(self, node)
            else:
                children = node.child_nodes()
                if children:
                    children.reverse()
                    extend(children)

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
        branches = []
        for statements in (node.body, node.elif_, node.else_):
            if not statements:  # a copy that nothing is added to
                branches.append(_NO_BRANCH)
                continue
            self.symbols = original.copy()
            for statement in statements:
                self.visit(statement)
            branches.append(self.symbols)
            self.symbols = original
        original.branch_update(branches)

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
        for child in node.child_nodes():
            self.visit(child)

    def visit_With(self, node: n.Node) -> None:
        for value in node.values:
            self.visit(value)

    def visit_Scope(self, node: n.Node) -> None:
        pass

    def visit_Generation(self, node: n.Node) -> None:
        pass

    def visit_AutoEscape(self, node: n.Node) -> None:
        pass  # a frame of its own (Jinja2 puts the block in a Scope), its flag read in it


_CONTAINERS = (n.Node, list, tuple)
_NO_MODES: Dict[str, str] = {}  # never written to: see FrameSymbols.__init__
_NO_STORES: FrozenSet[str] = frozenset()
_HANDLERS = {getattr(n, name[len("visit_"):]): function
             for name, function in vars(_Visitor).items() if name.startswith("visit_")}
_NO_BRANCH = FrameSymbols(frozenset())  # stays empty: only read by branch_update
