"""Pausing Python's cyclic garbage collector while the engine makes objects that all stay alive.

Importing the engine, parsing a template and compiling it each make thousands of objects (tens
of thousands for a big template, a million for the largest) and none of them is garbage; the
collections they trigger on the way walk them, and everything else the process holds, again
and again. Its own module, free of imports of the package's, so that the pause can start
before anything of the engine is imported.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any

import _thread


#: Sources at least this long are parsed and compiled with the cyclic garbage collector
#: paused (see :class:`PausedGC`); real chat templates are shorter.
GC_PAUSE_SOURCE = 100_000


class PausedGC:
    """``with PausedGC(size):`` pauses Python's cyclic garbage collector when ``size`` (of a
    template source) is at least :data:`GC_PAUSE_SOURCE`, and restores it when the last
    pause in the process ends.

    Parsing and compiling a large source create a million objects that all stay alive (the
    AST, then the compiled closures), none of them in a reference cycle; while they pile up,
    the collector's full collections walk all of them again and again: a third of the time of
    a big parse, and most of the time of compiling it. Nothing is lost by pausing it: these
    objects are freed by reference counting, and cyclic garbage made by other threads
    meanwhile is collected after the pause, which the parse deadline (``Limits.max_seconds``)
    bounds. Pauses nest and overlap across threads: the collector is enabled again (if it was
    enabled when the first began) when the last one ends.

    The objects made meanwhile would then be walked by the next young collection, and by the
    middle generation's after it, before reaching the oldest: 0.6-1.2 ms of a fresh process's
    first render (up to a tenth of it), for objects that all stay alive. When at least
    :data:`PROMOTE_AFTER` were made, the last pause moves the young generations to the oldest
    at once instead (:func:`promote_young_objects`), as long as the process's pauses have
    promoted fewer than :data:`PROMOTE_BUDGET` objects: a cold start, not a process that
    compiles template after template (see there).
    """

    __slots__ = ("active",)
    _lock = _thread.allocate_lock()
    _count = 0
    _was_enabled = False
    _promoted = 0  # objects promoted by the process's pauses so far (see PROMOTE_BUDGET)

    def __init__(self, size: int) -> None:
        self.active = size >= GC_PAUSE_SOURCE

    def __enter__(self) -> "PausedGC":
        if self.active:
            import gc

            with PausedGC._lock:
                if PausedGC._count == 0:
                    PausedGC._was_enabled = gc.isenabled()
                    gc.disable()
                PausedGC._count += 1
        return self

    def __exit__(self, *exc_info: Any) -> None:
        if self.active:
            import gc

            with PausedGC._lock:
                PausedGC._count -= 1
                if PausedGC._count == 0 and PausedGC._was_enabled:
                    made = gc.get_count()[0]
                    if made >= PROMOTE_AFTER and PausedGC._promoted < PROMOTE_BUDGET \
                            and promote_young_objects(gc):
                        PausedGC._promoted += made
                    gc.enable()


#: Objects made during a pause (as the collector counts them) from which its end moves them
#: to the oldest generation unwalked (see :class:`PausedGC`): importing the engine makes about
#: 4,100, the first environment 700, compiling seed-kimi-k2 about 6,000 (cz-chatml 600,
#: seed-functionary-v3-llama3 12,800). A young collection of 700 took 0.2-0.3 ms of a fresh
#: process; promoting them takes none. A host that wants the collector's own schedule kept
#: sets it to ``sys.maxsize``.
PROMOTE_AFTER = 500

#: How many objects the process's pauses may promote in all (see :data:`PROMOTE_AFTER`):
#: enough for a cold start (importing the engine, the first environment and compiling
#: seed-functionary-v3-llama3 make about 17,600), then never again. A promotion moves the
#: host's own young objects too, and restarts the count that schedules the young collections
#: (``gc.freeze()`` does): a process compiling template after template (a server making an
#: environment per request) would otherwise run no collection at all, and the reference
#: cycles it drops would pile up in the oldest generation (measured: 458 MB after 3,000
#: requests dropping a cycle each, against 25 MB without promotion). Spent, the collector
#: keeps its own schedule.
PROMOTE_BUDGET = 50_000


def promote_young_objects(gc: Any) -> bool:
    """Move every object of the collector's young generations to its oldest, in constant
    time and without walking them (``gc.freeze()`` then ``gc.unfreeze()``); False, and
    nothing done, where objects are frozen already (unfreezing would release them too: the
    host's own ``gc.freeze()``, or Python 3.12's of some of its own objects as it starts) or
    the interpreter has no such functions.

    What moves is what a pause made plus whatever young objects the process had before it
    (at most a few collections' worth). It all stays alive or is collected by reference
    counting; a reference cycle among it that becomes garbage is collected by the next full
    collection instead of a young one. The count of allocations that schedules the young
    collections starts again from zero: :class:`PausedGC` promotes within
    :data:`PROMOTE_BUDGET` only."""
    freeze_count = getattr(gc, "get_freeze_count", None)
    if freeze_count is None or freeze_count() != 0:
        return False
    gc.freeze()
    gc.unfreeze()
    return True


def paused_gc() -> PausedGC:
    """A pause of the collector however small the work (see :class:`PausedGC`): for what a
    cold start does once, importing the engine and parsing and compiling a template. Its tens
    of thousands of new functions, classes, tuples and nodes all stay alive, and the
    collections they trigger on the way (each walking everything the process holds) took a
    tenth of a cold start's instructions."""
    return PausedGC(GC_PAUSE_SOURCE)
