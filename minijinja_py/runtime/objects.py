"""Runtime objects that templates see: undefined values, loop, namespace, cycler, joiner, macro.

None of these prints a Python repr with a memory address, and every attribute a template may
read is listed in the class's ``template_attributes`` (the sandbox reads nothing else).
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported at run time: it costs milliseconds
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any, Callable, Dict, Iterator, List, Optional

from types import MappingProxyType

from ..exceptions import SecurityError, TemplateRuntimeError, UndefinedError
from ..guard.limits import SET_LIKE


#: Values compared item by item, recursively (see limits.check_comparable).
_CONTAINERS = (list, tuple, dict)
#: Values whose printed form is short whatever they hold (nothing to size-check first).
_PRINTS_SMALL = frozenset({int, float, bool, type(None)})


def to_text(value: Any) -> str:
    """``str(value)`` for output and ``~``; anything that may hold data (containers and
    their subclasses, dict views, namespaces, cyclers) is size-checked first, since a list
    holding one long string many times prints far larger than it is in memory."""
    if type(value) not in _PRINTS_SMALL:
        (_SIZE_CHECK or _size_check())(value)
    return str(value)


#: filters.check_str_size, once imported (filters imports this module: not at its top; and
#: an import statement per value printed costs more than printing it)
_SIZE_CHECK: Optional[Callable[[Any], Any]] = None


def _size_check() -> Callable[[Any], Any]:
    global _SIZE_CHECK
    from .filters.common import check_str_size

    _SIZE_CHECK = check_str_size
    return check_str_size


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "missing"

    def __reduce__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


def object_type_repr(obj: Any) -> str:
    """``'dict object'``-style name used in Jinja2's undefined messages."""
    if obj is None:
        return "None"
    if obj is Ellipsis:
        return "Ellipsis"
    cls = type(obj)
    shown = getattr(cls, "template_type_name", None)  # engine objects: the type Jinja2 shows
    if shown is not None:
        return f"{shown} object"
    if cls.__module__ == "builtins":
        return f"{cls.__name__} object"
    return f"{cls.__module__}.{cls.__name__} object"


class Undefined:
    """Jinja2's default undefined: prints as ``''``, iterates as empty, fails when used.

    Any arithmetic, comparison, call, attribute or item access raises :class:`UndefinedError`
    (or the stored exception class, e.g. :class:`SecurityError` for unsafe attributes).
    """

    __slots__ = ("_undefined_hint", "_undefined_obj", "_undefined_name", "_undefined_exception")
    template_attributes: frozenset = frozenset()

    def __init__(self, hint: Optional[str] = None, obj: Any = MISSING, name: Any = None,
                 exc: type = UndefinedError) -> None:
        self._undefined_hint = hint
        self._undefined_obj = obj
        self._undefined_name = name
        self._undefined_exception = exc

    @property
    def _undefined_message(self) -> str:
        if self._undefined_hint:
            return self._undefined_hint
        if self._undefined_obj is MISSING:
            return f"{self._undefined_name!r} is undefined"
        if not isinstance(self._undefined_name, str):
            return (f"{object_type_repr(self._undefined_obj)} has no element "
                    f"{self._undefined_name!r}")
        return (f"{object_type_repr(self._undefined_obj)!r} has no attribute "
                f"{self._undefined_name!r}")

    def _fail_with_undefined_error(self, *args: Any, **kwargs: Any) -> Any:
        raise self._undefined_exception(self._undefined_message)

    def _template_getattr(self, name: str) -> Any:
        """Attribute access from a template (the sandbox calls this)."""
        return self._fail_with_undefined_error()

    _template_getitem = _template_getattr

    def __getattr__(self, name: str) -> Any:
        if name[:2] == "__":
            raise AttributeError(name)
        return self._fail_with_undefined_error()

    __add__ = __radd__ = __sub__ = __rsub__ = _fail_with_undefined_error
    __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _fail_with_undefined_error
    __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = _fail_with_undefined_error
    __pos__ = __neg__ = __call__ = __getitem__ = _fail_with_undefined_error
    __lt__ = __le__ = __gt__ = __ge__ = _fail_with_undefined_error
    __int__ = __float__ = __complex__ = __pow__ = __rpow__ = _fail_with_undefined_error
    # no __index__, as in Jinja2: `s[undefined]` is a TypeError inside, so an undefined

    def __eq__(self, other: Any) -> bool:
        return type(self) is type(other)

    def __ne__(self, other: Any) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return id(type(self))

    def __str__(self) -> str:
        return ""

    def __len__(self) -> int:
        return 0

    def __iter__(self) -> Iterator[Any]:
        return iter(())

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "Undefined"

    def __format__(self, spec: str) -> str:
        # Jinja2's undefined has object's __format__: printed plainly, refused with a spec
        if spec:
            raise TypeError(f"unsupported format string passed to {type(self).__name__}"
                            ".__format__")
        return str(self)


class ChainableUndefined(Undefined):
    """An undefined whose attributes and items are undefined too (``a.b.c`` prints ``''``)."""

    __slots__ = ()

    def _template_getattr(self, name: str) -> Any:
        return self

    _template_getitem = _template_getattr

    def __getattr__(self, name: str) -> Any:
        if name[:2] == "__":
            raise AttributeError(name)
        return self

    def __getitem__(self, key: Any) -> Any:  # type: ignore[override]
        return self

    def __html__(self) -> str:
        return str(self)


class StrictUndefined(Undefined):
    """An undefined that raises on every use, printing and truth tests included."""

    __slots__ = ()
    __iter__ = __str__ = __len__ = Undefined._fail_with_undefined_error  # type: ignore
    __eq__ = __ne__ = __bool__ = __hash__ = Undefined._fail_with_undefined_error  # type: ignore
    __contains__ = Undefined._fail_with_undefined_error
    # __format__ is Undefined's: a format spec is a TypeError (as for any object), and without
    # one it prints, which fails here


def type_name(obj: Any) -> str:
    """The type name messages show: the Python type Jinja2 would have there (a global
    function is a 'function', a lazy map() result a 'generator')."""
    return getattr(type(obj), "template_type_name", type(obj).__name__)


def unsafe_undefined(obj: Any, attribute: Any, undefined: type = Undefined) -> Undefined:
    """The undefined the sandbox returns for a forbidden attribute: using it raises."""
    return undefined(
        f"access to attribute {attribute!r} of {type_name(obj)!r} object is unsafe.",
        obj, attribute, SecurityError)


def is_undefined(value: Any) -> bool:
    return isinstance(value, Undefined)


class BoundMethod:
    """A method of a str/list/dict (or runtime object) as read by a template: ``x.items``."""

    __slots__ = ("function", "owner", "name")
    template_attributes: frozenset = frozenset()
    template_type_name = "builtin_function_or_method"

    def __init__(self, function: Callable[..., Any], owner: Any, name: str) -> None:
        self.function = function
        self.owner = owner
        self.name = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.function(self.owner, *args, **kwargs)

    def __repr__(self) -> str:
        return f"<built-in method {self.name} of {type(self.owner).__name__} object>"


class FormatMethod(BoundMethod):
    """``str.format``/``format_map`` read by a template (``'{}'.format``). Jinja2's sandbox
    hands out a function wrapping it (its safe formatter), so it prints and is named as that
    function: ``<function str.format>`` (without the address), ``<function Markup.format>``."""

    __slots__ = ()
    template_type_name = "function"

    def __repr__(self) -> str:
        from .markup import Markup

        owner = "Markup" if isinstance(self.owner, Markup) else "str"
        return f"<function {owner}.{self.name}>"


#: The str methods read as a FormatMethod.
FORMAT_METHODS = frozenset({"format", "format_map"})


class MutatorMethod(BoundMethod):
    """A list/dict mutator read by a template in a mutable environment (``items.append``):
    the tuples it stores are checked for nesting (see limits.check_tuple_depth)."""

    __slots__ = ()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from ..guard.limits import check_stored_tuples

        check_stored_tuples(args, kwargs)
        return self.function(self.owner, *args, **kwargs)


class Namespace:
    """``namespace(...)``: a mutable bag of attributes that survives loop scopes."""

    __slots__ = ("_attrs",)

    def __init__(self, /, *args: Any, **kwargs: Any) -> None:
        if args:  # `namespace(d)`: a dict built from the template's values
            from ..guard.collisions import checked_dict

            self._attrs: Dict[str, Any] = checked_dict(args, kwargs, "namespace()")
        else:
            self._attrs = dict(**kwargs)

    def _template_getattr(self, name: str) -> Any:
        return self._attrs.get(name, MISSING)

    def _template_getitem(self, name: Any) -> Any:
        return self._attrs.get(name, MISSING) if isinstance(name, str) else MISSING

    def _template_setattr(self, name: str, value: Any) -> None:
        self._attrs[name] = value

    def __repr__(self) -> str:
        return f"<Namespace {self._attrs!r}>"


class GuardedNamespace(Namespace):
    """transformers' ``namespace``: attribute names starting with ``_`` are refused.

    Its class is called ``TemplateNamespace``, as transformers' is: Python names it in messages
    ("Object of type TemplateNamespace is not JSON serializable")."""

    __slots__ = ()

    def __init__(self, /, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in self._attrs:
            self._refuse_private(name)

    @staticmethod
    def _refuse_private(name: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            # transformers' message
            raise SecurityError(f"namespace attribute names may not start with '_': {name!r}")

    def _template_setattr(self, name: str, value: Any) -> None:
        self._refuse_private(name)
        self._attrs[name] = value


GuardedNamespace.__name__ = GuardedNamespace.__qualname__ = "TemplateNamespace"
TemplateNamespace = GuardedNamespace  # (pickle finds a class by its name)

#: The engine's namespaces, exactly (``namespace()``, transformers' guarded one): their
#: attributes live in ``_attrs`` (the sandbox reads them, generated code stores into them).
NAMESPACE_TYPES = frozenset({Namespace, GuardedNamespace})


class TemplateDict:
    """transformers' ``dict`` global: builds a dict; its only attribute is ``fromkeys``."""

    __slots__ = ()
    template_attributes = frozenset({"fromkeys"})

    def __call__(self, *args: Any, **kwargs: Any) -> dict:
        from ..guard.collisions import checked_dict

        return checked_dict(args, kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict:
        from ..guard.collisions import checked_fromkeys

        return checked_fromkeys(args[0] if args else [], *args[1:], **kwargs)

    def __repr__(self) -> str:
        return "<TemplateDict>"


class Cycler:
    """``cycler(a, b, c)``: ``next()`` steps through the items, ``current`` is the present one."""

    __slots__ = ("items", "pos")
    template_attributes = frozenset({"items", "pos", "current", "next", "reset"})

    def __init__(self, *items: Any) -> None:
        if not items:
            raise TypeError("at least one item has to be provided")
        self.items = items
        self.pos = 0

    def reset(self) -> None:
        self.pos = 0

    @property
    def current(self) -> Any:
        return self.items[self.pos]

    def next(self) -> Any:
        value = self.current
        self.pos = (self.pos + 1) % len(self.items)
        return value

    __next__ = next

    def __repr__(self) -> str:
        return f"<Cycler {list(self.items)!r}>"


class Joiner:
    """``joiner(', ')``: returns ``''`` the first time it is called, the separator after."""

    __slots__ = ("sep", "used")
    template_attributes = frozenset({"sep"})

    def __init__(self, sep: str = ", ") -> None:
        self.sep = sep
        self.used = False

    def __call__(self) -> str:
        if not self.used:
            self.used = True
            return ""
        return self.sep

    def __repr__(self) -> str:
        return f"<Joiner {self.sep!r}>"


class LoopContext:
    """The ``loop`` variable of a for loop."""

    __slots__ = ("_items", "index0", "length", "depth0", "_recurse", "_last_changed", "_undefined")
    template_attributes = frozenset({
        "index", "index0", "revindex", "revindex0", "first", "last", "length", "depth", "depth0",
        "previtem", "nextitem", "cycle", "changed"})

    def __init__(self, items: List[Any], depth0: int, recurse: Optional[Callable[..., Any]],
                 undefined: type) -> None:
        self._items = items
        self.index0 = -1
        self.length = len(items)
        self.depth0 = depth0
        self._recurse = recurse
        self._last_changed: Any = MISSING
        self._undefined = undefined

    @property
    def index(self) -> int:
        return self.index0 + 1

    @property
    def revindex(self) -> int:
        return self.length - self.index0

    @property
    def revindex0(self) -> int:
        return self.length - self.index0 - 1

    @property
    def first(self) -> bool:
        return self.index0 == 0

    @property
    def last(self) -> bool:
        return self.index0 == self.length - 1

    @property
    def depth(self) -> int:
        return self.depth0 + 1

    @property
    def previtem(self) -> Any:
        if self.index0 <= 0:
            return self._undefined("there is no previous item")
        return self._items[self.index0 - 1]

    @property
    def nextitem(self) -> Any:
        if self.index0 + 1 >= self.length:
            return self._undefined("there is no next item")
        return self._items[self.index0 + 1]

    def cycle(self, *args: Any) -> Any:
        if not args:
            raise TypeError("no items for cycling given")
        return args[self.index0 % len(args)]

    def changed(self, *value: Any) -> bool:
        if any(isinstance(item, _CONTAINERS) for item in value):
            from ..guard.collisions import check_compared  # containers compared: bounded first

            check_compared(value, self._last_changed)
        if self._last_changed != value:
            self._last_changed = value
            return True
        return False

    def __call__(self, iterable: Any) -> str:
        if self._recurse is None:
            raise TypeError(
                "The loop must have the 'recursive' marker to be called recursively.")
        return self._recurse(iterable, self.depth0 + 1)

    def __repr__(self) -> str:
        return f"<LoopContext {self.index0 + 1}/{self.length}>"


#: A macro definition's facts, the same for every Macro it makes: a tuple in this order
#: (Jinja2's names for them; templates can read them).
MACRO_SIGNATURE_FIELDS = ("name", "arguments", "catch_kwargs", "catch_varargs", "caller")


class Macro:
    """A macro (or the ``caller`` of a call block) bound to the scope it was defined in.

    A template defines its macros again every render (Jinja2 does too): making one is two
    slots, its definition's shared signature and the call bound to its scope."""

    __slots__ = ("_signature", "_invoke")
    template_attributes = frozenset(MACRO_SIGNATURE_FIELDS)

    def __init__(self, signature: tuple, invoke: Callable[[tuple, dict], str]) -> None:
        self._signature = signature  # see MACRO_SIGNATURE_FIELDS
        self._invoke = invoke

    name = property(lambda self: self._signature[0])
    arguments = property(lambda self: self._signature[1])
    catch_kwargs = property(lambda self: self._signature[2])
    catch_varargs = property(lambda self: self._signature[3])
    caller = property(lambda self: self._signature[4])

    def __call__(self, *args: Any, **kwargs: Any) -> str:
        return self._invoke(args, kwargs)

    def __repr__(self) -> str:
        name = self._signature[0]
        return "<Macro anonymous>" if name is None else f"<Macro {name!r}>"


class LazySequence:
    """The lazy result of ``map``/``select``/``reject``/``selectattr``/``rejectattr``.

    Jinja2 returns a generator there: it can be iterated once, has no length and is not JSON.
    This keeps those semantics but prints without a memory address.
    """

    __slots__ = ("_iterator", "_label")
    template_attributes: frozenset = frozenset()
    template_type_name = "generator"

    def __init__(self, iterator: Iterator[Any], label: str) -> None:
        self._iterator = iterator
        self._label = label

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        return next(self._iterator)

    def shown_type(self) -> str:
        """The type Jinja2 shows for it: ``reverse``'s are Python's reverse iterators
        (``reversed``, ``list_reverseiterator``...), labelled with that type's name; the
        others are generators, labelled with the function that made them."""
        label = self._label
        if label == "reversed" or label.endswith("iterator"):
            return label
        return "generator"

    def __repr__(self) -> str:
        shown = self.shown_type()
        if shown == "generator":
            return f"<generator object {self._label}>"
        return f"<{shown} object>"


class TemplateReference:
    """``self`` in a template, as Jinja2 provides it: ``self.name()`` renders the block
    ``name`` again (a template without blocks has an inert one)."""

    __slots__ = ("_blocks", "_root")
    template_attributes: frozenset = frozenset()

    def __init__(self, blocks: Optional[Dict[str, Callable[[Any], str]]] = None,
                 root: Any = None) -> None:
        self._blocks = blocks or {}
        self._root = root

    def _template_getattr(self, name: str) -> Any:
        render = self._blocks.get(name)
        if render is None:
            return MISSING
        return BlockReference(name, render, self._root)

    def __repr__(self) -> str:
        return "<TemplateReference None>"


class BlockReference:
    """``self.name``: calling it renders the block ``name`` in the template's own scope."""

    __slots__ = ("name", "_render", "_root")
    template_attributes: frozenset = frozenset()

    def __init__(self, name: str, render: Callable[[Any], str], root: Any) -> None:
        self.name = name
        self._render = render
        self._root = root

    def __call__(self) -> str:
        return self._render(self._root)

    def __repr__(self) -> str:
        return f"<BlockReference {self.name!r}>"


class GlobalFunction:
    """A builtin global function (``range``, ``raise_exception``...): prints as
    ``<function name>`` instead of a repr with a memory address, exposes no attributes.

    ``pure``: calling it changes nothing a template can read (it makes a new value or
    raises). A generated loop calling only such functions reads each key of an item once
    per iteration (codegen.pure_callees); a function running code it was given (a
    callable clock) is not pure."""

    __slots__ = ("name", "function", "pure")
    template_attributes: frozenset = frozenset()
    template_type_name = "function"

    def __init__(self, name: str, function: Callable[..., Any], pure: bool = False) -> None:
        self.name = name
        self.function = function
        self.pure = pure

    def __call__(self, /, *args: Any, **kwargs: Any) -> Any:
        return self.function(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<function {self.name}>"


class HostMethod:
    """A method of a host object read by a template: callable, printed without an address."""

    __slots__ = ("method", "name", "owner_type")
    template_attributes: frozenset = frozenset()
    template_type_name = "builtin_function_or_method"

    def __init__(self, method: Callable[..., Any], name: str, owner_type: str) -> None:
        self.method = method
        self.name = name
        self.owner_type = owner_type

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        owner = getattr(self.method, "__self__", None)
        if isinstance(owner, _HASHING_OWNERS):  # `d.keys().isdisjoint(x)`: hashes x
            from ..guard.collisions import check_host_method

            args = check_host_method(owner, self.name, args)
        return self.method(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<built-in method {self.name} of {self.owner_type} object>"

    # The host's marks on the method (Django's convention, which Jinja2's sandbox honours:
    # ``delete.alters_data = True``), read through the wrapper so that Sandbox.call sees them
    # as it sees them on a function the host passes itself.
    @property
    def unsafe_callable(self) -> bool:
        return getattr(self.method, "unsafe_callable", False)

    @property
    def alters_data(self) -> bool:
        return getattr(self.method, "alters_data", False)


#: Host objects whose methods hash their arguments into tables (dict views, sets, a view's
#: ``mapping``): checked by collisions.check_host_method.
_HASHING_OWNERS = SET_LIKE + (MappingProxyType,)


class RuntimeMethod(HostMethod):
    """A method of one of the engine's own objects (``loop.cycle``, ``cycler.next``): callable,
    printed as Python prints a bound method, and no attribute leads on to the function."""

    __slots__ = ()
    template_type_name = "method"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.method(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<bound method {self.owner_type}.{self.name} of {self.method.__self__!r}>"


def raise_template_error(message: Any) -> None:
    """Implementation of transformers' ``raise_exception`` global.

    The template author's message is what users show to their clients, so ``str()`` of this
    error is exactly the message (the location is still on ``lineno``/``column``).
    """
    from ..exceptions import TemplateError

    err = TemplateError(str(message))
    err.show_location = False
    raise err


__all__ = [
    "MISSING", "Undefined", "ChainableUndefined", "StrictUndefined", "unsafe_undefined",
    "is_undefined", "BoundMethod", "FormatMethod", "Namespace", "Cycler", "Joiner",
    "LoopContext", "Macro",
    "LazySequence", "object_type_repr", "TemplateRuntimeError",
]


def pass_environment(function: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a filter/test/global so that it receives the Environment as its first argument."""
    function.jinja_pass_arg = "environment"  # type: ignore[attr-defined]
    return function


def wants_environment(function: Any) -> bool:
    return getattr(function, "jinja_pass_arg", None) == "environment"
