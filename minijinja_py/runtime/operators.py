"""Template operators under the render's limits.

``'a' * 10**10``, ``2 ** 99999999`` or ``'%999999999s' % x`` would exhaust memory or time
before Python notices anything, so each operator's result size is estimated from its
operands and refused *before* it is computed; integers are measured exactly afterwards (an
estimate alone would refuse results Python prints fine), and strings or lists it builds are
charged to the render's step budget (see guard/prices.py).
"""

from __future__ import annotations

import math
import operator

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any, Callable, Dict

from ..guard.prices import size_cost
from ..guard.limits import (SET_LIKE, charge, check_collection_size, check_string_size,
                            current_limits)

BINOPS: Dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
    "//": operator.floordiv, "%": operator.mod, "**": operator.pow,
}
_LOG10_2 = math.log10(2)
# Integers this many bits long or shorter cannot break any max_int_digits in practical use
# (about 300 digits): the exact check is skipped for them.
_SMALL_INT_BITS = 1000
_POWERS_OF_TEN: Dict[int, int] = {}


def apply(op: str, left: Any, right: Any) -> Any:
    """``left <op> right`` as a template computes it, within the limits."""
    if type(left) is int and type(right) is int:  # counters: only * and ** can explode
        if op == "*" or op == "**":
            _check_before(op, left, right)
        result = BINOPS[op](left, right)
        if type(result) is int and result.bit_length() > _SMALL_INT_BITS:
            check_int_digits(result)
        return result
    if op == "-" and (isinstance(left, SET_LIKE) or isinstance(right, SET_LIKE)):
        # `d.keys() - other`: a set of both sides' items (see collisions.py)
        from ..guard.collisions import checked_set_operands

        left, right = checked_set_operands([left, right], "a set difference")
    _check_before(op, left, right)
    result = BINOPS[op](left, right)
    kind = type(result)
    if isinstance(result, int):  # (a provenance render's numbers are int subclasses)
        if result.bit_length() > _SMALL_INT_BITS:
            check_int_digits(result)
    elif kind is str or kind is list or kind is tuple or isinstance(result, (str, tuple)):
        # (str subclasses too: Markup, and every str of a provenance render)
        charge(size_cost(result))
    return result


def check_int_digits(value: int) -> None:
    """Refuse an integer with more than ``Limits.max_int_digits`` decimal digits."""
    limits = current_limits()
    bound = _POWERS_OF_TEN.get(limits.max_int_digits)
    if bound is None:
        bound = _POWERS_OF_TEN[limits.max_int_digits] = 10 ** limits.max_int_digits
    if abs(value) >= bound:
        digits = int(abs(value).bit_length() * _LOG10_2) + 1
        raise limits.exceeded("max_int_digits", f"integer of about {digits:,} digits refused")


def _refuse_digits(digits: float) -> None:
    limits = current_limits()
    # The estimates below are within a digit of the truth: leave the borderline to the exact
    # check after computing, which is cheap for results of a few thousand digits.
    if digits > limits.max_int_digits + 2:
        raise limits.exceeded("max_int_digits", f"integer of about {int(digits):,} digits refused")


def _decimal_digits(value: int) -> float:
    return math.log10(abs(value)) if value else 0.0


_TEXT = (str, bytes, bytearray)


def _check_before(op: str, left: Any, right: Any) -> None:
    if op == "*":
        if isinstance(right, int) and isinstance(left, (str, list, tuple, bytes, bytearray)):
            left, right = right, left
        if isinstance(left, int) and not isinstance(left, bool) and left > 0:
            if isinstance(right, _TEXT):
                check_string_size(len(right) * left)
            elif isinstance(right, (list, tuple)):
                check_collection_size(len(right) * left)
            elif isinstance(right, int) and not isinstance(right, bool) and right:
                _refuse_digits(_decimal_digits(left) + _decimal_digits(right))
    elif op == "**":
        if isinstance(left, int) and isinstance(right, int) and right > 0 and abs(left) > 1:
            _refuse_digits(min(right, 10 ** 12) * _decimal_digits(left))
    elif op == "+":
        if isinstance(left, _TEXT) and isinstance(right, _TEXT):
            check_string_size(len(left) + len(right))
        elif isinstance(left, (list, tuple)) and isinstance(right, (list, tuple)):
            check_collection_size(len(left) + len(right))
    elif op == "%" and isinstance(left, _TEXT):
        from .filters.rare import check_printf_size

        if not isinstance(left, str):  # bytes formatting has the same fields and widths
            left = bytes(left).decode("latin-1")
        check_printf_size(left, right)
