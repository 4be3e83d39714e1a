"""Resource limits: what a hostile template may not make the renderer do.

A :class:`Limits` instance lives on the Environment; the render in progress publishes its
limits in a context variable so that filters and methods (plain functions) can check sizes
*before* building a huge string or list. Every violation raises :class:`LimitExceededError`
(a SecurityError), naming the limit and how to raise it.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass
from typing import Optional

from .exceptions import LimitExceededError


@dataclass
class Limits:
    """Hard limits applied to every render. Set ``Environment(limits=Limits(...))``.

    The defaults never fire on real chat templates with large conversations (20,000 messages,
    a 10 MB message) yet stop runaway templates in seconds.
    """

    #: Most items ``range()`` may produce (Jinja2's sandbox uses the same 100,000).
    max_range: int = 100_000
    #: Most characters the whole rendered output may have.
    max_output_size: int = 200_000_000
    #: Most characters of any single string a template builds (``*``, ``join``, ``replace``,
    #: padding methods, ``format`` widths, ``indent``, ``center``, ``tojson(indent=...)``).
    max_string_size: int = 50_000_000
    #: Most items of any single list/tuple a template builds with ``*`` or ``+``.
    max_collection_size: int = 10_000_000
    #: Most decimal digits of an integer result of ``**`` (or ``*``).
    max_int_digits: int = 4_300
    #: Deepest nesting of macro calls, ``caller()`` and recursive loops, and of data that
    #: ``tojson``/``pprint`` serialise.
    max_recursion: int = 100
    #: Deepest nesting of blocks and brackets in the template SOURCE.
    max_nesting: int = 128
    #: Most loop iterations plus calls in one render.
    max_steps: int = 20_000_000

    def exceeded(self, field: str, detail: str) -> LimitExceededError:
        """The error for a broken limit: says which limit and how to raise it."""
        return LimitExceededError(
            f"{detail} (limit Limits.{field}={getattr(self, field):,}; raise it with "
            f"Environment(limits=Limits({field}=...)) if this template is trusted)")


DEFAULT_LIMITS = Limits()
_current: contextvars.ContextVar[Optional[Limits]] = contextvars.ContextVar(
    "minijinja_py_limits", default=None)


def current_limits() -> Limits:
    """The limits of the render in progress (the defaults outside a render)."""
    return _current.get() or DEFAULT_LIMITS


def activate(limits: Limits) -> contextvars.Token:
    return _current.set(limits)


def deactivate(token: contextvars.Token) -> None:
    _current.reset(token)


def check_string_size(size: int) -> None:
    limits = current_limits()
    if size > limits.max_string_size:
        raise limits.exceeded("max_string_size", f"string of {size:,} characters refused")


def check_repeat_size(unit: int, count: int) -> None:
    """Refuse ``unit * count`` characters before building them."""
    if unit and count > 0:
        check_string_size(unit * count)


def check_collection_size(size: int) -> None:
    limits = current_limits()
    if size > limits.max_collection_size:
        raise limits.exceeded("max_collection_size", f"sequence of {size:,} items refused")
