"""The fast paths closures share with generated code: one small class per kind.

The compiler (compiler.py) turns every node into a closure. Where a closure has a fast path
that generated code can write out inline (``message['role']`` read straight from a dict, a
string comparison, text printed), the compiler attaches to it (``compiler.attach``) one of
the classes below: what that fast path is made of (its operands, which are closures
themselves, its constants, and the closure's own slow path to fall back to). codegen.py
reads them back with :func:`spec_of` and writes each kind through its own emitter
(``codegen._EXPRESSIONS`` and ``codegen._STATEMENTS``, keyed by these classes). A closure
without a spec is simply called by generated code.

Only code generation imports this module. A cold start compiles its template but generates
no code, and defining these classes costs about 0.6 ms in a fresh process; so the compiler
writes ``kinds.Print(items, node)`` with ``kinds`` this module for static analysis (each
construction is type-checked against its class) and, at run time, a recorder of the kind and
its fields (``compiler._Described``), built into the instance by :func:`spec_of` when codegen
first reads it. Plain ``__slots__`` classes rather than dataclasses or named tuples: neither
``dataclasses`` nor ``typing`` is imported at run time (each costs milliseconds).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any, List, Optional, Tuple


class Spec:
    """A closure's fast path, as generated code reproduces it (a base class: see below)."""

    __slots__ = ()


def spec_of(closure: Any) -> Optional[Spec]:
    """The fast path attached to ``closure``, or None (it is then called as it is). The
    compiler describes it (compiler.attach, compiler._Described); it is built here, on the
    first read."""
    described = getattr(closure, "spec", None)
    return None if described is None else described.build()


# -- statements: closures ``f(scope, out) -> signal`` ---------------------------------------
class Body(Spec):
    """Statements run in order."""

    __slots__ = ("statements",)

    def __init__(self, statements: List[Any]) -> None:
        self.statements = statements


class Text(Spec):
    """Template text printed as it is."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


class Print(Spec):
    """``{{ ... }}`` with the text around it: ``items`` are (True, text) or
    (False, (expression closure, its node))."""

    __slots__ = ("items", "node")

    def __init__(self, items: List[Tuple[bool, Any]], node: Any) -> None:
        self.items = items
        self.node = node


class PrintParts(Spec):
    """An output compiled as its parts (Compiler.output_in_parts): statement closures."""

    __slots__ = ("parts", "node")

    def __init__(self, parts: List[Any], node: Any) -> None:
        self.parts = parts
        self.node = node


class SumPrint(Spec):
    """``{{ a + b + ... }}``: ``parts`` are (text, variable, key, operand, position);
    ``finish`` completes the sum from the first operand that is not a str, ``too_big``
    refuses one past the size limit."""

    __slots__ = ("parts", "finish", "too_big")

    def __init__(self, parts: List[Any], finish: Any, too_big: Any) -> None:
        self.parts = parts
        self.finish = finish
        self.too_big = too_big


class If(Spec):
    """``if``/``elif``/``else``: ``branches`` are (test, body, test node)."""

    __slots__ = ("branches", "else_", "node")

    def __init__(self, branches: List[Tuple[Any, Any, Any]], else_: Any, node: Any) -> None:
        self.branches = branches
        self.else_ = else_
        self.node = node


class Set(Spec):
    """``set name = value`` in the current scope."""

    __slots__ = ("name", "value", "node")

    def __init__(self, name: str, value: Any, node: Any) -> None:
        self.name = name
        self.value = value
        self.node = node


class SetNamespace(Spec):
    """``set ns.attr = value``: ``assign`` is the closure's own path, ``lookup`` finds
    the namespace by name."""

    __slots__ = ("name", "attr", "value", "assign", "lookup", "node")

    def __init__(self, name: str, attr: str, value: Any, assign: Any, lookup: Any,
                 node: Any) -> None:
        self.name = name
        self.attr = attr
        self.value = value
        self.assign = assign
        self.lookup = lookup
        self.node = node


class Define(Spec):
    """A macro definition: ``Macro(signature, partial(invoke, scope))`` bound to ``name``."""

    __slots__ = ("name", "signature", "invoke", "node")

    def __init__(self, name: str, signature: tuple, invoke: Any, node: Any) -> None:
        self.name = name
        self.signature = signature
        self.invoke = invoke
        self.node = node


class Break(Spec):
    """``break``."""

    __slots__ = ()


class Continue(Spec):
    """``continue``."""

    __slots__ = ()


# -- expressions: closures ``f(scope) -> value`` -------------------------------------------
class Const(Spec):
    """A constant."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


class Local(Spec):
    """A name bound in the current scope."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


class Name(Spec):
    """A name of an enclosing scope; ``beyond(scope)`` walks the scopes past the parent."""

    __slots__ = ("name", "beyond")

    def __init__(self, name: str, beyond: Any) -> None:
        self.name = name
        self.beyond = beyond


class Lookup(Spec):
    """``operand.key`` or ``operand['key']``: a dict's item, else ``slow(obj, scope)``;
    with ``reads_namespaces`` (``obj.key``, a key not private), one of the engine's
    namespaces holding the key answers as a dict does."""

    __slots__ = ("operand", "key", "slow", "reads_namespaces")

    def __init__(self, operand: Any, key: Any, slow: Any, reads_namespaces: bool) -> None:
        self.operand = operand
        self.key = key
        self.slow = slow
        self.reads_namespaces = reads_namespaces


class Index(Spec):
    """``operand[-1]``: a small int constant ``key``; ``charge`` charges a dict's lookup."""

    __slots__ = ("operand", "key", "slow", "charge")

    def __init__(self, operand: Any, key: int, slow: Any, charge: Any) -> None:
        self.operand = operand
        self.key = key
        self.slow = slow
        self.charge = charge


class DirectAttribute(Spec):
    """``loop.index0``: the sandbox's direct answer for ``direct_type``, else ``other``;
    ``loader`` is a closure with a :class:`Local` spec."""

    __slots__ = ("loader", "name", "direct_type", "other")

    def __init__(self, loader: Any, name: str, direct_type: type, other: Any) -> None:
        self.loader = loader
        self.name = name
        self.direct_type = direct_type
        self.other = other


class Subscript(Spec):
    """``operand[key]`` with a computed key; ``item_of(obj, key, scope)`` is the slow path."""

    __slots__ = ("operand", "key", "item_of")

    def __init__(self, operand: Any, key: Any, item_of: Any) -> None:
        self.operand = operand
        self.key = key
        self.item_of = item_of


class Arguments(Spec):
    """A call's arguments (not an expression: read by :class:`Call` and by the compiler);
    ``keywords`` are (name, closure)."""

    __slots__ = ("positional", "keywords")

    def __init__(self, positional: List[Any], keywords: List[Tuple[str, Any]]) -> None:
        self.positional = positional
        self.keywords = keywords


class Call(Spec):
    """``callee(...)`` through the sandbox's ``invoke``."""

    __slots__ = ("callee", "arguments", "invoke")

    def __init__(self, callee: Any, arguments: Arguments, invoke: Any) -> None:
        self.callee = callee
        self.arguments = arguments
        self.invoke = invoke


class DictGet(Spec):
    """``owner.get(key[, default])``: ``dict_get`` takes everything but an exact dict."""

    __slots__ = ("owner", "key", "default", "dict_get", "charge")

    def __init__(self, owner: Any, key: Any, default: Any, dict_get: Any,
                 charge: Any) -> None:
        self.owner = owner
        self.key = key
        self.default = default
        self.dict_get = dict_get
        self.charge = charge


class StrMethod(Spec):
    """An exact str's method ``name`` with str ``arguments`` (closures), charged the
    owner's size times ``weight``; ``on_other`` takes any other owner."""

    __slots__ = ("owner", "name", "arguments", "weight", "on_other", "charge")

    def __init__(self, owner: Any, name: str, arguments: Tuple[Any, ...], weight: Any,
                 on_other: Any, charge: Any) -> None:
        self.owner = owner
        self.name = name
        self.arguments = arguments
        self.weight = weight
        self.on_other = on_other
        self.charge = charge


class Filter(Spec):
    """``operand | filter``: ``apply(scope, value)``; ``inline`` a written-out form or None
    (("len",), ("same",) or ("str_method", the method's name, charge))."""

    __slots__ = ("operand", "apply", "inline")

    def __init__(self, operand: Any, apply: Any, inline: Optional[tuple]) -> None:
        self.operand = operand
        self.apply = apply
        self.inline = inline


class Test(Spec):
    """``operand is [not] test`` without arguments."""

    __slots__ = ("operand", "function", "negated")

    def __init__(self, operand: Any, function: Any, negated: bool) -> None:
        self.operand = operand
        self.function = function
        self.negated = negated


class Cond(Spec):
    """``chosen if test else other``."""

    __slots__ = ("test", "test_node", "chosen", "other")

    def __init__(self, test: Any, test_node: Any, chosen: Any, other: Any) -> None:
        self.test = test
        self.test_node = test_node
        self.chosen = chosen
        self.other = other


class _IntBinary(Spec):
    """Two operands combined by Python's ``op`` when both are ints (or, compared, numbers);
    ``apply(a, b, scope)`` is the closure's path for anything else."""

    __slots__ = ("left", "right", "op", "apply")

    def __init__(self, left: Any, right: Any, op: str, apply: Any) -> None:
        self.left = left
        self.right = right
        self.op = op
        self.apply = apply


class IntOp(_IntBinary):
    """``a - b``, ``a % b``...: arithmetic."""

    __slots__ = ()


class IntCompare(_IntBinary):
    """``a < b``, ``a == b``...: a comparison."""

    __slots__ = ()


class Add(Spec):
    """``a + b + ...``: ``operands`` are (constant or MISSING, closure)."""

    __slots__ = ("operands", "add_evaluated", "charge_built")

    def __init__(self, operands: List[Tuple[Any, Any]], add_evaluated: Any,
                 charge_built: Any) -> None:
        self.operands = operands
        self.add_evaluated = add_evaluated
        self.charge_built = charge_built


class Concat(Spec):
    """``a ~ b ~ ...``: each part's text by ``text_of``, the joined size charged."""

    __slots__ = ("parts", "text_of", "charge_joined", "charge")

    def __init__(self, parts: List[Any], text_of: Any, charge_joined: Any,
                 charge: Any) -> None:
        self.parts = parts
        self.text_of = text_of
        self.charge_joined = charge_joined
        self.charge = charge


class EqStr(Spec):
    """``operand == 'constant'`` (``!=`` when ``negate``)."""

    __slots__ = ("operand", "constant", "negate")

    def __init__(self, operand: Any, constant: str, negate: bool) -> None:
        self.operand = operand
        self.constant = constant
        self.negate = negate


class Contains(Spec):
    """``left in right`` (``not in`` when ``negate``): ``check`` is the closure's path;
    ``members`` the strs of a literal ``right``, scanning them charged by ``charge``."""

    __slots__ = ("left", "right", "negate", "check", "members", "charge")

    def __init__(self, left: Any, right: Any, negate: bool, check: Any, members: Any,
                 charge: Any) -> None:
        self.left = left
        self.right = right
        self.negate = negate
        self.check = check
        self.members = members
        self.charge = charge


class _Logical(Spec):
    """Two operands, the left one's truth tested at ``node``."""

    __slots__ = ("left", "right", "node")

    def __init__(self, left: Any, right: Any, node: Any) -> None:
        self.left = left
        self.right = right
        self.node = node


class And(_Logical):
    """``left and right``."""

    __slots__ = ()


class Or(_Logical):
    """``left or right``."""

    __slots__ = ()


class Not(Spec):
    """``not operand``."""

    __slots__ = ("operand",)

    def __init__(self, operand: Any) -> None:
        self.operand = operand


class Truth(Spec):
    """The truth of ``operand`` as a bool, errors located at ``node`` (an ``if``'s test)."""

    __slots__ = ("operand", "node")

    def __init__(self, operand: Any, node: Any) -> None:
        self.operand = operand
        self.node = node

