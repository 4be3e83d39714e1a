"""Static analysis of a parsed template: what it reads and which features it uses.

Used by ``minijinja-py check``. It walks the AST (:mod:`minijinja_py.syntax.nodes`) once with a stack of
scopes, like Jinja2's ``meta.find_undeclared_variables``: a name read before any ``set``/``for``/
macro parameter binds it is a variable the caller provides (``messages``, ``tools``,
``add_generation_prompt``, ``bos_token``, ``enable_thinking``...). It also follows the message
list through aliases (``{% set loop_messages = messages[1:] %}``, ``{% for message in
loop_messages %}``, ``messages[0]``, ``messages|selectattr(...)``) to list the message keys the
template reads (``message.role``, ``message['content']``, ``'tool_calls' in message``,
``message.get('name')``, ``selectattr('role', ...)``).

The analysis is static and approximate: a key read through a computed name, or through a
namespace attribute holding a message, is not seen.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Set

from .syntax import nodes as n

__all__ = ["TemplateReport", "analyze_template", "KNOWN_GLOBALS"]

#: Globals of the chat environment (Jinja2's defaults plus transformers' additions).
KNOWN_GLOBALS = frozenset({"range", "dict", "lipsum", "cycler", "joiner", "namespace",
                           "raise_exception", "strftime_now"})

# Filters that keep a list of messages a list of messages.
_LIST_PRESERVING_FILTERS = frozenset({"selectattr", "rejectattr", "reverse", "list", "sort",
                                      "unique", "batch", "slice"})
# Filters that pick one message out of a list.
_ITEM_FILTERS = frozenset({"first", "last", "random", "min", "max"})
# Filters naming a key of the items: by their first positional argument, or by attribute=.
_POSITIONAL_ATTRIBUTE_FILTERS = frozenset({"selectattr", "rejectattr", "groupby"})
_ATTRIBUTE_FILTERS = _POSITIONAL_ATTRIBUTE_FILTERS | {"map", "sort", "sum", "unique", "min",
                                                      "max"}
# dict methods: ``message.get(...)`` reads a key, it does not read a key called "get".
_DICT_METHODS = frozenset({"get", "items", "keys", "values", "copy", "update", "pop",
                           "setdefault", "popitem", "clear"})


@dataclass
class TemplateReport:
    """What :func:`analyze_template` found; every list is sorted.

    ``variables``: names read from the caller's variables. ``globals``: builtin globals used.
    ``message_keys``: keys read from messages. ``statements``, ``filters``, ``tests``,
    ``methods`` (``.strip()``...), ``loop_attributes`` (``loop.index0``...): features used.
    """

    variables: List[str] = field(default_factory=list)
    globals: List[str] = field(default_factory=list)
    message_keys: List[str] = field(default_factory=list)
    statements: List[str] = field(default_factory=list)
    filters: List[str] = field(default_factory=list)
    tests: List[str] = field(default_factory=list)
    methods: List[str] = field(default_factory=list)
    loop_attributes: List[str] = field(default_factory=list)

    def as_dict(self) -> Dict[str, List[str]]:
        """The report as a JSON-ready dict."""
        return {
            "variables": self.variables, "globals": self.globals,
            "message_keys": self.message_keys, "statements": self.statements,
            "filters": self.filters, "tests": self.tests, "methods": self.methods,
            "loop_attributes": self.loop_attributes,
        }


def _is(node: Any, *kinds: str) -> bool:
    """``node`` is one of the node classes named ``kinds`` (the node classes are generated in
    :mod:`minijinja_py.syntax.nodes`, so names read better here than the classes themselves)."""
    return isinstance(node, n.Node) and type(node).__name__ in kinds


def _is_node(value: Any) -> bool:
    return isinstance(value, n.Node)


def _target_names(target: Any) -> List[str]:
    if _is(target, "NameTarget"):
        return [target.name]
    if _is(target, "TupleTarget"):
        names: List[str] = []
        for item in target.items:
            names.extend(_target_names(item))
        return names
    return []


def _const_str(node: Any) -> Optional[str]:
    if _is(node, "Const") and isinstance(node.value, str):
        return node.value
    return None


class _Walker:
    def __init__(self) -> None:
        self.scopes: List[Set[str]] = [set()]
        self.variables: Set[str] = set()
        self.globals: Set[str] = set()
        self.keys: Set[str] = set()
        self.statements: Set[str] = set()
        self.filters: Set[str] = set()
        self.tests: Set[str] = set()
        self.methods: Set[str] = set()
        self.loop_attributes: Set[str] = set()
        self.message_lists: Set[str] = {"messages"}
        self.message_vars: Set[str] = set()

    # -- scopes ------------------------------------------------------------------------------
    def bound(self, name: str) -> bool:
        return any(name in scope for scope in self.scopes)

    def read(self, name: str) -> None:
        if self.bound(name):
            return
        if name in KNOWN_GLOBALS:
            self.globals.add(name)
        else:
            self.variables.add(name)

    def bind(self, names: Iterable[str]) -> None:
        self.scopes[-1].update(names)

    def in_scope(self, names: Iterable[str], body: List[Any]) -> None:
        self.scopes.append(set(names))
        try:
            self.body(body)
        finally:
            self.scopes.pop()

    # -- messages ----------------------------------------------------------------------------
    def is_message_list(self, node: Any) -> bool:
        if _is(node, "Name"):
            return node.name in self.message_lists
        if _is(node, "Getitem") and _is(node.arg, "Slice"):
            return self.is_message_list(node.node)
        if _is(node, "Filter") and node.name in _LIST_PRESERVING_FILTERS \
                and node.node is not None:
            return self.is_message_list(node.node)
        if _is(node, "CondExpr"):
            return self.is_message_list(node.expr1) and (
                node.expr2 is None or self.is_message_list(node.expr2))
        return False

    def is_message(self, node: Any) -> bool:
        if _is(node, "Name"):
            return node.name in self.message_vars
        if _is(node, "Getitem") and not _is(node.arg, "Slice"):
            return self.is_message_list(node.node)
        if _is(node, "Filter") and node.name in _ITEM_FILTERS and node.node is not None:
            return self.is_message_list(node.node)
        return False

    def note_alias(self, name: str, value: Any) -> None:
        self.message_lists.discard(name)
        self.message_vars.discard(name)
        if self.is_message_list(value):
            self.message_lists.add(name)
        elif self.is_message(value):
            self.message_vars.add(name)

    # -- statements --------------------------------------------------------------------------
    def body(self, nodes: List[Any]) -> None:
        for node in nodes:
            self.stmt(node)

    def stmt(self, node: Any) -> None:
        handler = getattr(self, "stmt_" + type(node).__name__, None)
        if handler is not None:
            handler(node)
        else:
            self.expr(node)

    def stmt_Output(self, node: Any) -> None:
        for item in node.nodes:
            self.expr(item)

    def stmt_If(self, node: Any) -> None:
        self.statements.add("if")
        self.expr(node.test)
        self.body(node.body)
        for branch in node.elif_:
            self.statements.add("elif")
            self.expr(branch.test)
            self.body(branch.body)
        if node.else_:
            self.statements.add("else")
        self.body(node.else_)

    def stmt_For(self, node: Any) -> None:
        self.statements.add("for")
        self.expr(node.iter)
        names = _target_names(node.target)
        if _is(node.target, "TupleTarget"):
            self.statements.add("for with tuple unpacking")
        elif names:
            self.message_vars.discard(names[0])
            if self.is_message_list(node.iter):
                self.message_vars.add(names[0])
        if node.recursive:
            self.statements.add("recursive for")
        self.scopes.append(set(names) | {"loop"})
        try:
            if node.test is not None:
                self.statements.add("for ... if")
                self.expr(node.test)
            self.body(node.body)
        finally:
            self.scopes.pop()
        if node.else_:
            self.statements.add("for/else")
            self.body(node.else_)

    def stmt_Assign(self, node: Any) -> None:
        self.expr(node.node)
        if _is(node.target, "NSRef"):
            self.statements.add("namespace attribute set")
            self.read(node.target.name)
            return
        self.statements.add("set")
        names = _target_names(node.target)
        if _is(node.target, "NameTarget"):
            self.note_alias(node.target.name, node.node)
        self.bind(names)

    def stmt_AssignBlock(self, node: Any) -> None:
        self.statements.add("set block")
        self.body(node.body)
        self.expr(node.filter)
        if _is(node.target, "NSRef"):
            self.read(node.target.name)
        else:
            self.bind(_target_names(node.target))

    def stmt_Macro(self, node: Any) -> None:
        self.statements.add("macro")
        self.bind([node.name])
        for _, default in node.params:
            self.expr(default)
        params = [name for name, _ in node.params]
        self.in_scope(params + ["varargs", "kwargs", "caller"], node.body)

    def stmt_CallBlock(self, node: Any) -> None:
        self.statements.add("call block")
        self.expr(node.call)
        for _, default in node.params:
            self.expr(default)
        self.in_scope([name for name, _ in node.params] + ["varargs", "kwargs"], node.body)

    def stmt_FilterBlock(self, node: Any) -> None:
        self.statements.add("filter block")
        self.expr(node.filter)
        self.body(node.body)

    def stmt_With(self, node: Any) -> None:
        self.statements.add("with")
        for value in node.values:
            self.expr(value)
        names: List[str] = []
        for target in node.targets:
            names.extend(_target_names(target))
        self.in_scope(names, node.body)

    def stmt_Generation(self, node: Any) -> None:
        self.statements.add("generation")
        self.body(node.body)

    def stmt_Scope(self, node: Any) -> None:
        self.statements.add("block")
        self.in_scope([], node.body)

    def stmt_Break(self, node: Any) -> None:
        self.statements.add("break")

    def stmt_Continue(self, node: Any) -> None:
        self.statements.add("continue")

    def stmt_NoLoader(self, node: Any) -> None:
        self.statements.add(f"{node.kind} (fails: there is no loader)")

    # -- expressions -------------------------------------------------------------------------
    def expr(self, node: Any) -> None:
        if node is None:
            return
        if isinstance(node, (list, tuple)):
            for item in node:
                self.expr(item)
            return
        if not _is_node(node):
            return
        if _is(node, "Name"):
            self.read(node.name)
        elif _is(node, "Getattr"):
            if self.is_message(node.node):
                self.keys.add(node.attr)
            if _is(node.node, "Name") and node.node.name == "loop" and self.bound("loop"):
                self.loop_attributes.add("loop." + node.attr)
            self.expr(node.node)
        elif _is(node, "Getitem"):
            key = _const_str(node.arg)
            if key is not None and self.is_message(node.node):
                self.keys.add(key)
            self.expr(node.node)
            self.expr(node.arg)
        elif _is(node, "Call"):
            self.call(node)
        elif _is(node, "Filter"):
            self.filter(node)
        elif _is(node, "Test"):
            self.tests.add(node.name)
            self.expr(node.node)
            self.call_args(node)
        elif _is(node, "Compare"):
            key = _const_str(node.expr)
            for op, right, *_ in node.ops:
                if key is not None and op in ("in", "notin") and self.is_message(right):
                    self.keys.add(key)
                self.expr(right)
            self.expr(node.expr)
        else:
            for child in node.iter_child_nodes():
                self.expr(child)

    def call_args(self, node: Any) -> None:
        self.expr(node.args)
        for _, value in node.kwargs:
            self.expr(value)
        self.expr(node.dyn_args)
        self.expr(node.dyn_kwargs)

    def call(self, node: Any) -> None:
        callee = node.node
        if _is(callee, "Getattr"):
            if _is(callee.node, "Name") and callee.node.name == "loop" \
                    and self.bound("loop"):
                self.loop_attributes.add(f"loop.{callee.attr}()")
            else:
                self.methods.add(callee.attr)
            if self.is_message(callee.node):
                if callee.attr == "get" and node.args and _const_str(node.args[0]) is not None:
                    self.keys.add(node.args[0].value)
                elif callee.attr not in _DICT_METHODS:
                    self.keys.add(callee.attr)
            self.expr(callee.node)
        else:
            self.expr(callee)
        self.call_args(node)

    def filter(self, node: Any) -> None:
        self.filters.add(node.name)
        # tests named by select/reject(test) and selectattr/rejectattr(attribute, test)
        position = {"select": 0, "reject": 0, "selectattr": 1, "rejectattr": 1}.get(node.name)
        if position is not None and len(node.args) > position:
            test_name = _const_str(node.args[position])
            if test_name is not None:
                self.tests.add(test_name)
        if node.name in _ATTRIBUTE_FILTERS and node.node is not None \
                and self.is_message_list(node.node):
            attribute = None
            if node.name in _POSITIONAL_ATTRIBUTE_FILTERS and node.args:
                attribute = _const_str(node.args[0])
            for name, value in node.kwargs:
                if name == "attribute" and _const_str(value) is not None:
                    attribute = value.value
            if attribute is not None:
                self.keys.add(attribute.split(".")[0])  # "a.b" reads key a, then b inside
        self.expr(node.node)
        self.call_args(node)


def analyze_template(ast: Any) -> TemplateReport:
    """Walk a parsed template (``Template.ast``) and report what it reads and uses."""
    walker = _Walker()
    walker.body(ast.body)
    return TemplateReport(
        variables=sorted(walker.variables),
        globals=sorted(walker.globals),
        message_keys=sorted(walker.keys),
        statements=sorted(walker.statements),
        filters=sorted(walker.filters),
        tests=sorted(walker.tests),
        methods=sorted(walker.methods),
        loop_attributes=sorted(walker.loop_attributes),
    )
