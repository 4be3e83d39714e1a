"""Resource limits: what a hostile template may not make the renderer do.

A :class:`Limits` instance lives on the Environment; the render in progress publishes its
limits in a thread-local slot so that filters and methods (plain functions) can check sizes
*before* building a huge string or list. Every violation raises :class:`LimitExceededError`
(a SecurityError), naming the limit and how to raise it.
"""

from __future__ import annotations

import _thread
import sys
import time
TYPE_CHECKING = False  # typing is not imported at run time: it costs milliseconds
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any, Optional

from ..exceptions import DeadlineExceededError, LimitExceededError

_monotonic = time.monotonic


class Limits:
    """Hard limits applied to every render. Set ``Environment(limits=Limits(...))``.

    The defaults never fire on real chat templates with large conversations (20,000 messages,
    a 10 MB message) yet stop runaway templates in seconds. Fields (keyword arguments):

    - ``max_range`` (100,000): most items ``range()`` may produce (Jinja2's sandbox value).
    - ``max_output_size`` (200,000,000): most characters the rendered output may have.
    - ``max_string_size`` (50,000,000): most characters of any single string a template
      builds (``*``, ``join``, ``replace``, padding methods, ``format`` widths, ``indent``,
      ``center``, ``tojson(indent=...)``, printing a container).
    - ``max_collection_size`` (10,000,000): most items of a list/tuple built with ``*``/``+``.
    - ``max_int_digits`` (4,300): most decimal digits of an integer made by ``**`` or ``*``.
    - ``max_recursion`` (100): deepest nesting of macro calls, ``caller()`` and recursive
      loops, and of data that ``tojson``/``pprint``/printing serialise.
    - ``max_nesting`` (128): deepest nesting of blocks and brackets in the template SOURCE.
    - ``max_source_size`` (1,000,000): most characters of template source (real chat templates
      are under 100 KB; parsing megabytes of hostile source would take seconds).
    - ``max_steps`` (50,000,000): most work in one render, in steps of about a tenth of a
      microsecond: a loop iteration or macro call costs a step or so per template node it
      runs, and filters, methods and operators cost a step per 16 characters or 2 items they
      read or build (see guard/prices.py). This bounds time (about 5 CPU seconds on a 2-core Xeon)
      and the memory a render can allocate. A 20,000-message conversation takes a few million steps.
    - ``max_seconds`` (10.0): most wall-clock seconds one parse (``from_string``) or one
      render may take, whatever the step prices say (see deadline.py); ``None`` turns it off.
      The step budget is the deterministic limit and normally fires first; the deadline is
      the guarantee behind it.
    """

    FIELDS = ("max_range", "max_output_size", "max_string_size", "max_collection_size",
              "max_int_digits", "max_recursion", "max_nesting", "max_steps", "max_source_size",
              "max_seconds")
    __slots__ = FIELDS

    def __init__(self, *, max_range: int = 100_000, max_output_size: int = 200_000_000,
                 max_string_size: int = 50_000_000, max_collection_size: int = 10_000_000,
                 max_int_digits: int = 4_300, max_recursion: int = 100, max_nesting: int = 128,
                 max_steps: int = 50_000_000, max_source_size: int = 1_000_000,
                 max_seconds: Optional[float] = 10.0) -> None:
        self.max_range = max_range
        self.max_output_size = max_output_size
        self.max_string_size = max_string_size
        self.max_collection_size = max_collection_size
        self.max_int_digits = max_int_digits
        self.max_recursion = max_recursion
        self.max_nesting = max_nesting
        self.max_steps = max_steps
        self.max_source_size = max_source_size
        if max_seconds is not None and not max_seconds > 0:
            raise ValueError(f"Limits.max_seconds must be positive or None, not {max_seconds!r}")
        self.max_seconds = max_seconds

    def __repr__(self) -> str:
        values = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.FIELDS)
        return f"Limits({values})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Limits):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in self.FIELDS)

    __hash__ = None  # type: ignore[assignment]

    def exceeded(self, field: str, detail: str,
                 error_class: type = LimitExceededError) -> LimitExceededError:
        """The error for a broken limit: says which limit and how to raise it."""
        return error_class(
            f"{detail} (limit Limits.{field}={getattr(self, field):,}; raise it with "
            f"Environment(limits=Limits({field}=...)) if this template is trusted)")

    def timed_out(self, what: str) -> LimitExceededError:
        """The error for a parse or render that ran past ``max_seconds``."""
        return self.exceeded("max_seconds",
                             f"the {what} ran past its deadline of {self.max_seconds:g} s",
                             DeadlineExceededError)

    def deadline(self) -> Optional[float]:
        """The ``time.monotonic()`` by which work starting now must end, or None."""
        if self.max_seconds is None:
            return None
        return _monotonic() + self.max_seconds


DEFAULT_LIMITS = Limits()


class _InProgress(_thread._local):
    """Per thread, the render in progress (its RenderContext: ``limits`` and
    ``charge(steps)``), the limits of a parse, or None. Renders run to completion on the
    thread that started them (nothing in a render awaits or yields), so a thread-local slot
    holds what a context variable would; importing contextvars costs a cold start 0.3 ms."""

    work: Optional[Any] = None


_here = _InProgress()
#: The thread's render in progress (``in_progress.work``): :func:`activate` and
#: :func:`deactivate` are written out on this by Template._render, which every render runs.
in_progress = _here


def current_render() -> Optional[Any]:
    """The render in progress here (its RenderContext), the limits of a parse, or None."""
    return _here.work


def current_limits() -> Limits:
    """The limits of the render in progress (the defaults outside a render)."""
    render = _here.work
    return render.limits if render is not None else DEFAULT_LIMITS


def charge(steps: int) -> None:
    """Count ``steps`` of work against the render in progress (see guard/prices.py)."""
    if steps:
        render = _here.work
        if render is not None:
            render.charge(steps)


def check_deadline() -> None:
    """Raise :class:`DeadlineExceededError` if the parse or render in progress has run past
    ``Limits.max_seconds``. For long Python loops that charge no steps as they go (parsing,
    filters working item by item): call it every few hundred items, it reads the clock."""
    work = _here.work
    if work is not None:
        deadline = work.deadline
        if deadline is not None and _monotonic() > deadline:
            if hasattr(work, "expire"):
                work.expire()
            raise work.limits.timed_out(work.activity)


class _LimitsOnly:
    """Limits put in force without a render (a parse, or a helper called outside a render):
    sizes are checked, work is not counted, the deadline holds when one is given."""

    __slots__ = ("limits", "deadline", "activity")

    def __init__(self, limits: Limits, deadline: Optional[float] = None,
                 activity: str = "parse") -> None:
        self.limits = limits
        self.deadline = deadline
        self.activity = activity

    def charge(self, steps: int) -> None:
        pass


def activate_parse(limits: Limits, activity: str = "parse") -> Any:
    """Put ``limits`` in force for a parse and compile (or other work done before a render,
    named by ``activity``), with a deadline of ``max_seconds``. Returns the token to give
    :func:`deactivate` when it ends."""
    return activate(_LimitsOnly(limits, limits.deadline(), activity))


def activate(render: Any) -> Any:
    """Make ``render`` (a RenderContext, or bare Limits) the render in progress here.
    Returns the token to give :func:`deactivate` when it ends: what was in progress before
    (activations nest, as a render calls another)."""
    if isinstance(render, Limits):
        render = _LimitsOnly(render)
    here = _here
    token = here.work
    here.work = render
    return token


def deactivate(token: Any) -> None:
    """Put back what was in progress before the :func:`activate` that gave ``token``."""
    _here.work = token


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


def materialise(value: Any) -> list:
    """``list(value)`` for a loop, an unpacking or a ``*args`` spread, checked first.

    Iterating a 50 MB string makes 50 million one-character strings (gigabytes for CJK
    text) before any per-item check runs: a sized value is refused over
    ``max_collection_size`` and its items are paid for before the list is built. Lazy values
    (``map``, ``select``) charge for their items as they produce them.
    """
    try:
        size = len(value)
    except Exception:
        return list(value)
    check_collection_size(size)
    if isinstance(value, str):
        from .prices import characters_cost

        charge(characters_cost(value))
    else:
        charge(size >> 1)  # budget.ITEMS_SHIFT: the list's items, like any list a render builds
    return list(value)


#: Values whose comparisons and set operations look keys up in hash tables: sets and the
#: dict views that compare as sets.
SET_LIKE = (set, frozenset, type({}.keys()), type({}.items()))
#: Exact types the comparison walk passes over without a closer look (most items).
_SCALARS = frozenset({str, int, float, bool, type(None)})


def _walk_nested(value: Any, kinds: Any, what: str, depth_is_fatal: bool,
                 times: int = 1) -> None:
    """Refuse ``value`` when a C routine recursing through it could crash or run unbounded.

    Hashing a tuple and comparing lists, tuples and dicts recurse in C through the containers
    they hold (``kinds``), with no way to interrupt them. Hashing has no recursion check at all:
    a tuple chain nested hundreds of thousands deep crashes the process, so with
    ``depth_is_fatal`` nesting deeper than ``max_recursion`` is refused. Comparing stops at
    Python's recursion limit with a RecursionError (a clean error), but a container holding the
    same sub-container twice at every level (``[a, a]``, repeated; or a cycle through itself
    twice) takes exponential time before it gets there. So in both cases the items the routine
    would visit, counted along every path down to where it would stop, may be at most
    ``max_collection_size``. The walk goes level by level; each level holds the distinct
    containers at that distance with the number of paths reaching them, so shared parts are
    walked once per level; every container visited is charged as work.

    Comparing dicts (sets, dict views) looks their keys up in one another: what that may
    cost, however the keys collide (collisions.comparison_work), over every path and for
    ``times`` comparisons of ``value``, is refused or charged as one operation.
    """
    limits = current_limits()
    deepest = limits.max_recursion if depth_is_fatal else sys.getrecursionlimit()
    level = {id(value): (value, 1)}
    depth = 1
    visited = 0
    reached = len(value)  # items the C routine visits, over every path
    hashing = 0  # probes of the hash tables compared, over every path
    noticed = kinds if depth_is_fatal else kinds + SET_LIKE  # (one test for most items)
    if not depth_is_fatal:
        from .collisions import check_comparison, comparison_work
    try:
        while depth < deepest or depth_is_fatal:
            below: dict = {}
            for outer, paths in level.values():
                if not depth_is_fatal and isinstance(outer, dict):
                    hashing += paths * comparison_work(outer)
                for item in (outer.values() if isinstance(outer, dict) else outer):
                    if type(item) in _SCALARS or not isinstance(item, noticed):
                        continue
                    if isinstance(item, kinds):
                        key = id(item)
                        seen = below.get(key)
                        below[key] = (item, paths + (seen[1] if seen is not None else 0))
                    else:  # a set or dict view, compared by lookups
                        hashing += paths * comparison_work(item)
            visited += len(level)
            if not below:
                break
            depth += 1
            if depth > deepest:
                raise limits.exceeded("max_recursion",
                                      f"{what} nested more than {deepest:,} deep refused")
            reached += sum(len(item) * paths for item, paths in below.values())
            if reached > limits.max_collection_size:
                raise limits.exceeded(
                    "max_collection_size", f"{what} holding more than "
                    f"{limits.max_collection_size:,} items along its paths refused")
            level = below
    finally:
        charge(visited)
    if hashing:
        check_comparison(hashing * times)




def check_tuple_depth(value: tuple) -> None:
    """Before a template keeps a tuple: bound what hashing it would recurse through (tuples
    in tuples; a list or dict stops the recursion, they are not hashable). See _walk_nested."""
    _walk_nested(value, tuple, "a tuple of tuples", True)


def check_comparable(value: Any, times: int = 1) -> None:
    """Before ``==``, ``<`` or ``in`` compares containers (``times`` times): bound what the
    comparison would recurse through (lists, tuples and dicts in one another) and the hash
    lookups of the dicts inside. See _walk_nested."""
    _walk_nested(value, (list, tuple, dict), "a container to compare", False, times)


def check_stored_tuples(args: Any, kwargs: Any) -> None:
    """:func:`check_tuple_depth` for the tuples among a mutator's arguments."""
    for value in args:
        if isinstance(value, tuple):
            check_tuple_depth(value)
    for value in kwargs.values():
        if isinstance(value, tuple):
            check_tuple_depth(value)


#: Python's default recursion limit, which the default limits fit in (Template._render asks
#: ensure_recursion_headroom only when a render may need more, or the limit is lower)
PYTHON_RECURSION_LIMIT = 1000


def ensure_recursion_headroom(limits: Limits) -> None:
    """Let Python recurse as deep as raised limits need.

    The parser, compiler and evaluator recurse once per level of nesting or macro call; the
    defaults fit Python's default recursion limit of 1,000. A trusted template allowed to nest
    deeper must be stopped by its own limit, never by a RecursionError first, so the
    interpreter's limit is raised (never lowered) to match.
    """
    extra_recursion = limits.max_recursion - DEFAULT_LIMITS.max_recursion
    extra_nesting = limits.max_nesting - DEFAULT_LIMITS.max_nesting
    # (every render asks: the defaults, and anything below them, need 1,000 at most)
    needed = PYTHON_RECURSION_LIMIT if extra_recursion <= 0 and extra_nesting <= 0 else (
        PYTHON_RECURSION_LIMIT + 12 * max(0, extra_recursion) + 10 * max(0, extra_nesting))
    if needed > sys.getrecursionlimit():
        sys.setrecursionlimit(needed)
