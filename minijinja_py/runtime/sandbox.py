"""The sandbox: the ONLY place where a template reads attributes or items, or calls anything.

Data model (an allowlist): templates see str, int, float, bool, None, list, tuple, dict (and
subclasses such as Markup), the engine's own runtime objects (each lists the attributes it
exposes in ``template_attributes``) and callables the host registered. Methods of the plain
types come from :data:`methods.METHODS`. Any other host object (only reachable when the
caller passes one in) gets Jinja2's sandbox rules: no ``_`` names, no function, frame, code or
generator internals, no mutation in the immutable sandbox.

Lookup order is Jinja2's: ``x.name`` tries the attribute (the method, on plain types) first,
then the item; ``x[key]`` tries the item first, then the attribute.
"""

from __future__ import annotations

import types
TYPE_CHECKING = False  # typing is not imported at run time: it costs milliseconds
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any

from ..guard.collisions import HASHED, check_lookup
from ..exceptions import SecurityError
from .methods import METHODS, MUTATORS, method_table, plain_value
from .objects import (FORMAT_METHODS, MISSING, BlockReference, BoundMethod, Cycler, FormatMethod,
                      GlobalFunction, HostMethod, Joiner, MutatorMethod, RuntimeMethod,
                      LazySequence, LoopContext, Macro, NAMESPACE_TYPES, Namespace, TemplateDict,
                      TemplateReference, Undefined, unsafe_undefined)

_RUNTIME_TYPES = (LoopContext, Cycler, Joiner, Macro, BoundMethod, LazySequence, TemplateDict,
                  BlockReference,
                  GlobalFunction, HostMethod, TemplateReference)
_METHOD_TYPES = (types.BuiltinMethodType, types.MethodType, types.MethodWrapperType)
_UNSAFE_TYPES = (types.CodeType, types.TracebackType, types.FrameType)
_UNSAFE_GENERATOR_ATTRIBUTES = frozenset({"gi_frame", "gi_code", "gi_yieldfrom", "cr_frame",
                                          "cr_code", "cr_await", "ag_code", "ag_frame",
                                          "ag_await"})
_MUTABLE_BASES = tuple(MUTATORS)
_DICT_METHODS = frozenset(METHODS[dict])


def dict_item_only(key: str) -> bool:
    """Whether a plain dict answers ``key`` (by attribute or item) with its item or an
    undefined value, never an attribute: not one of its methods' names, not private. Code
    reading such keys itself (compiler.py, codegen.py) asks this as it is compiled; the
    lookups below test the same inline."""
    return key not in _DICT_METHODS and key[:1] != "_"
_NUMBER_ATTRIBUTES = frozenset({"real", "imag", "numerator", "denominator"})
#: Plain types whose subclasses (made by the host: namedtuples, dict subclasses) show their
#: own attributes too; the plain types themselves have none besides their methods.
_HOST_SUBCLASS_BASES = frozenset({tuple, list, dict})


#: Attributes that :meth:`Sandbox.getattr` answers, for an object of exactly this type, with
#: the attribute itself: data of the engine's own objects, never a method or anything that
#: reaches further. The compiler reads these directly after a ``type(obj) is ...`` check:
#: the decision stays the sandbox's (tests/test_codegen_expressions.py holds the two equal).
DIRECT_ATTRIBUTES = {
    LoopContext: frozenset({"index", "index0", "revindex", "revindex0", "first", "last",
                            "length", "depth", "depth0", "previtem", "nextitem"}),
}


def is_safe_attribute(obj: Any, attribute: str, value: Any) -> bool:
    """Jinja2's rule for host objects: no private names and no interpreter internals."""
    if attribute.startswith("_"):
        return False
    if isinstance(obj, type) and attribute == "mro":
        return False
    if isinstance(obj, _UNSAFE_TYPES):
        return False
    if isinstance(obj, (types.GeneratorType, types.CoroutineType, types.AsyncGeneratorType)):
        return attribute not in _UNSAFE_GENERATOR_ATTRIBUTES
    if isinstance(value, (types.ModuleType,)) or isinstance(obj, types.ModuleType):
        return False
    return True


class Sandbox:
    """Attribute/item access and calls for one Environment's settings."""

    __slots__ = ("immutable", "undefined")

    def __init__(self, immutable: bool, undefined: type) -> None:
        self.immutable = immutable
        self.undefined = undefined

    # -- attributes ----------------------------------------------------------------------
    def getattr(self, obj: Any, name: str) -> Any:
        """``obj.name`` as a template sees it."""
        if type(obj) is dict and name not in _DICT_METHODS and name[:1] != "_":
            # `message.tool_calls` on a message without them (the compiler reads present
            # keys itself): a plain dict has no other attributes, so the item or undefined
            value = obj.get(name, MISSING)
            return value if value is not MISSING else self.undefined(obj=obj, name=name)
        if type(obj) in NAMESPACE_TYPES and name[:1] != "_":  # `ns.x`, read in loops: fast
            value = obj._template_getattr(name)
            if value is not MISSING:
                return value
        value = self.attribute(obj, name)
        if value is not MISSING:
            return value
        if type(obj) is not str:  # (a str has no item by name: no TypeError to catch)
            value = self._item(obj, name)
            if value is not MISSING:
                return value
        return self.undefined(obj=obj, name=name)

    def getitem(self, obj: Any, key: Any) -> Any:
        """``obj[key]`` as a template sees it."""
        if type(obj) is dict and type(key) is str and key not in _DICT_METHODS and \
                key[:1] != "_":
            # `message['tool_calls']` missing: no attribute to fall back on (as getattr)
            value = obj.get(key, MISSING)
            return value if value is not MISSING else self.undefined(obj=obj, name=key)
        if type(obj) is str and type(key) is str:
            # `line['type']` of a str: never an item (that is an int or a slice), so the
            # attribute or undefined, without the TypeError of trying
            value = self.attribute(obj, key)
            return value if value is not MISSING else self.undefined(obj=obj, name=key)
        value = self._item(obj, key)
        if value is not MISSING:
            return value
        if isinstance(key, str):
            value = self.attribute(obj, key)
            if value is not MISSING:
                return value
        return self.undefined(obj=obj, name=key)

    def attribute(self, obj: Any, name: str) -> Any:
        """Attribute-only lookup (the ``attr`` filter): the attribute, an unsafe undefined,
        or MISSING when there is none. Never falls back to items."""
        exposed = getattr(type(obj), "template_attributes", None)
        if exposed is not None and name in exposed and isinstance(obj, tuple):
            return getattr(obj, name)  # e.g. groupby's (grouper, list) pairs
        table, base = method_table(obj)
        if table is not None:
            function = table.get(name)
            if function is not None:
                if base in MUTATORS and name in MUTATORS[base]:
                    if self.immutable:
                        return unsafe_undefined(obj, name, self.undefined)
                    return MutatorMethod(function, obj, name)
                if name in FORMAT_METHODS and isinstance(obj, str):
                    return FormatMethod(function, obj, name)
                return BoundMethod(function, obj, name)
            if name in _NUMBER_ATTRIBUTES and base in (int, float):
                return getattr(obj, name)
            if name[:1] == "_" and hasattr(plain_value(obj), name):
                return unsafe_undefined(obj, name, self.undefined)
            if base in _HOST_SUBCLASS_BASES and type(obj) is not base:
                # a host's subclass (a namedtuple's fields, a dict subclass's attributes):
                # Jinja2's sandbox rules for host objects, as for any object the caller passes
                return self._host_attribute(obj, name)
            return MISSING
        if isinstance(obj, Undefined):
            if name[:2] == "__":
                # Jinja2: attributes every object has (`__class__`) are unsafe; other dunder
                # names are missing, so `undefined.__x` fails as an item lookup does.
                return (unsafe_undefined(obj, name, self.undefined) if hasattr(obj, name)
                        else MISSING)
            return obj._template_getattr(name)
        if isinstance(obj, (Namespace, *_RUNTIME_TYPES)):
            # The engine's own objects: private names are refused outright, whether or not
            # they exist, so their internals can never be probed.
            if name[:1] == "_":
                return unsafe_undefined(obj, name, self.undefined)
            if isinstance(obj, (Namespace, TemplateReference)):
                return obj._template_getattr(name)
            if name in type(obj).template_attributes:
                value = getattr(obj, name)
                if isinstance(value, _METHOD_TYPES):
                    # `loop.cycle`, `cycler.next`: callable, but no way on to the function
                    return RuntimeMethod(value, name, type(obj).__name__)
                return value
            return MISSING
        if obj is None or isinstance(obj, (bool, int, float, complex)):
            if name in _NUMBER_ATTRIBUTES and obj is not None:
                return getattr(obj, name)
            if name[:1] == "_" and hasattr(obj, name):
                return unsafe_undefined(obj, name, self.undefined)
            return MISSING
        return self._host_attribute(obj, name)

    def _host_attribute(self, obj: Any, name: str) -> Any:
        try:
            value = getattr(obj, name)
        except AttributeError:
            return MISSING
        if not is_safe_attribute(obj, name, value):
            return unsafe_undefined(obj, name, self.undefined)
        if (self.immutable and isinstance(obj, _MUTABLE_BASES)
                and any(isinstance(obj, base) and name in names
                        for base, names in MUTATORS.items())):
            return unsafe_undefined(obj, name, self.undefined)
        if isinstance(value, _METHOD_TYPES):
            return HostMethod(value, name, type(obj).__name__)
        return value

    def _item(self, obj: Any, key: Any) -> Any:
        if isinstance(obj, Undefined):
            return obj._template_getitem(key)
        if isinstance(obj, Namespace):
            return obj._template_getitem(key)
        if type(key) is not str and isinstance(obj, HASHED):
            check_lookup(key, obj)  # a key a template may aim (collisions.py)
        if isinstance(obj, (dict, list, tuple, str)):
            try:
                return obj[key]
            except (TypeError, LookupError):
                return MISSING
        if isinstance(obj, _RUNTIME_TYPES) or obj is None or isinstance(obj, (int, float)):
            return MISSING
        try:
            return obj[key]
        except (TypeError, LookupError, AttributeError):
            return MISSING

    # -- calls ---------------------------------------------------------------------------
    def call(self, function: Any, args: Any, kwargs: Any) -> Any:
        """Call ``function`` for a template; refuses what Jinja2's sandbox refuses."""
        if type(function) is Macro:  # the engine's own (slots: no flag can be set on it)
            return function._invoke(args, kwargs)
        if getattr(function, "unsafe_callable", False) or getattr(function, "alters_data", False):
            raise SecurityError(f"{function!r} is not safely callable")
        return function(*args, **kwargs)


_DEFAULT = Sandbox(True, Undefined)


def current_sandbox() -> Sandbox:
    """The sandbox of the render in progress (its RenderContext's, found where the limits
    find it: the render in progress on this thread), an immutable default outside a render."""
    from ..guard.limits import current_render

    sandbox = getattr(current_render(), "sandbox", None)
    return sandbox if sandbox is not None else _DEFAULT


__all__ = ["Sandbox", "current_sandbox", "is_safe_attribute", "METHODS",
           "DIRECT_ATTRIBUTES", "dict_item_only"]
