"""The builtin tests (``{% if value is name(args) %}``), matching Jinja2 3.1.6.

Every test is a function ``is_<name>(value, *args)`` returning a bool, which takes Jinja2's
name for it (``test_<name>``: Python names the function when a call is wrong, "test_odd()
takes 1 positional argument but 2 were given"); the comparison tests (``eq``, ``lt``...) are
Python's ``operator`` functions and return what the operator returns, and ``callable`` is
Python's, as in Jinja2. ``filter`` and ``test`` are marked with
:func:`~minijinja_py.runtime.objects.pass_environment` and receive the Environment first. The public
table, with Jinja2's aliases (``==``, ``equalto``, ``lessthan``...), is :data:`TESTS`.
"""

from __future__ import annotations

import operator
from collections import abc
TYPE_CHECKING = False  # typing is not imported at run time: it costs milliseconds
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any, Callable, Dict

from ..guard.prices import size_cost
from ..guard.collisions import check_membership
from ..guard.limits import charge
from .objects import ChainableUndefined, Undefined, pass_environment


def _remainder(value: Any, num: Any) -> Any:
    """``value % num`` as the template's ``%`` computes it: on a string that is printf
    formatting (``"%2000000000d" is odd``), so its size is checked first (runtime/operators.py)."""
    if type(value) is int and type(num) is int:
        return value % num
    from .operators import apply

    return apply("%", value, num)


def is_odd(value: Any) -> bool:
    """The value is an odd number."""
    return _remainder(value, 2) == 1


def is_even(value: Any) -> bool:
    """The value is an even number."""
    return _remainder(value, 2) == 0


def is_divisibleby(value: Any, num: Any) -> bool:
    """The value divides evenly by ``num``."""
    return _remainder(value, num) == 0


def is_defined(value: Any) -> bool:
    """The value is not undefined."""
    return not isinstance(value, Undefined)


def is_undefined(value: Any) -> bool:
    """The value is undefined."""
    return isinstance(value, Undefined)


@pass_environment
def is_filter(env: Any, value: Any) -> bool:
    """A filter of this name exists in the environment."""
    return value in env.filters


@pass_environment
def is_test(env: Any, value: Any) -> bool:
    """A test of this name exists in the environment."""
    return value in env.tests


def is_none(value: Any) -> bool:
    """The value is ``none``."""
    return value is None


def is_boolean(value: Any) -> bool:
    """The value is ``true`` or ``false``."""
    return value is True or value is False


def is_false(value: Any) -> bool:
    """The value is exactly ``false``."""
    return value is False


def is_true(value: Any) -> bool:
    """The value is exactly ``true``."""
    return value is True


def is_integer(value: Any) -> bool:
    """The value is an integer (booleans excluded)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_float(value: Any) -> bool:
    """The value is a floating point number."""
    return isinstance(value, float)


def _text(value: Any) -> str:
    """``str(value)``, its size checked before it is built and its scan charged."""
    if type(value) is not str:
        from .filters.common import check_str_size

        check_str_size(value)
        value = str(value)
    charge(size_cost(value))
    return value


def is_lower(value: Any) -> bool:
    """The value's string has cased characters and all of them are lowercase."""
    return _text(value).islower()


def is_upper(value: Any) -> bool:
    """The value's string has cased characters and all of them are uppercase."""
    return _text(value).isupper()


def is_string(value: Any) -> bool:
    """The value is a string (Markup included)."""
    return isinstance(value, str)


def is_mapping(value: Any) -> bool:
    """The value is a mapping (a dict)."""
    return isinstance(value, abc.Mapping)


#: Answered without the ``numbers`` module (importing it costs half a millisecond of a
#: cold start): these always are numbers.Number, those never are.
_NUMBER_TYPES = (int, float, complex)
_NEVER_NUMBERS = frozenset({str, dict, list, tuple, type(None), Undefined})


def is_number(value: Any) -> bool:
    """The value is a number (int, float, bool, complex, Decimal...)."""
    if isinstance(value, _NUMBER_TYPES):
        return True
    if type(value) in _NEVER_NUMBERS:
        return False
    from numbers import Number

    return isinstance(value, Number)


def is_sequence(value: Any) -> bool:
    """The value has a length and supports indexing (strings, lists, tuples, dicts...)."""
    try:
        len(value)
        value.__getitem__  # noqa: B018 - only checks that the method exists
    except Exception:
        return False
    return True


def is_sameas(value: Any, other: Any) -> bool:
    """The value is the very same object as ``other``."""
    return value is other


def is_iterable(value: Any) -> bool:
    """The value can be iterated over."""
    try:
        iter(value)
    except TypeError:
        return False
    return True


def is_escaped(value: Any) -> bool:
    """The value is marked safe (has ``__html__``, like Markup).

    The runtime's plain and strict undefined define ``__html__`` but Jinja2's do not, so they
    are not "escaped" here; ChainableUndefined is, as in Jinja2.
    """
    if isinstance(value, Undefined) and not isinstance(value, ChainableUndefined):
        return False
    return hasattr(value, "__html__")


def is_in(value: Any, seq: Any) -> bool:
    """The value is contained in ``seq`` (a scan of it, charged by its size)."""
    charge(size_cost(seq))
    check_membership(value, seq)
    return value in seq


def is_callable(value: Any) -> bool:
    """The value can be called (functions, macros, methods...)."""
    return callable(value)


# The comparison tests are the operator functions themselves, so that a missing argument reads
# "eq expected 2 arguments, got 1" exactly like Jinja2.
is_eq = operator.eq
is_ne = operator.ne
is_gt = operator.gt
is_ge = operator.ge
is_lt = operator.lt
is_le = operator.le


#: Tests that only look at a value's type or identity: they never raise and cost nothing, so
#: generated code calls them directly (codegen.py).
TYPE_TESTS = frozenset({is_defined, is_undefined, is_none, is_boolean, is_false, is_true,
                        is_integer, is_float, is_string, is_number})

TESTS: Dict[str, Callable[..., Any]] = {
    "odd": is_odd,
    "even": is_even,
    "divisibleby": is_divisibleby,
    "defined": is_defined,
    "undefined": is_undefined,
    "filter": is_filter,
    "test": is_test,
    "none": is_none,
    "boolean": is_boolean,
    "false": is_false,
    "true": is_true,
    "integer": is_integer,
    "float": is_float,
    "lower": is_lower,
    "upper": is_upper,
    "string": is_string,
    "mapping": is_mapping,
    "number": is_number,
    "sequence": is_sequence,
    "iterable": is_iterable,
    "callable": callable,  # Python's: a wrong call reads as in Jinja2 (is_callable does the same)
    "sameas": is_sameas,
    "escaped": is_escaped,
    "in": is_in,
    "==": is_eq,
    "eq": is_eq,
    "equalto": is_eq,
    "!=": is_ne,
    "ne": is_ne,
    ">": is_gt,
    "gt": is_gt,
    "greaterthan": is_gt,
    ">=": is_ge,
    "ge": is_ge,
    "<": is_lt,
    "lt": is_lt,
    "lessthan": is_lt,
    "<=": is_le,
    "le": is_le,
}

# Jinja2's names (see the module docstring). Each is also a module attribute, so that pickle,
# which finds a function by its name, still finds them.
for _function in TESTS.values():
    if getattr(_function, "__module__", None) == __name__ and _function.__name__[:3] == "is_":
        _function.__name__ = _function.__qualname__ = "test_" + _function.__name__[3:]
        globals()[_function.__name__] = _function
del _function

__all__ = ["TESTS"]
