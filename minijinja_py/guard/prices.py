"""What a render's work costs, in the steps counted against ``Limits.max_steps``.

Counting loop iterations alone does not bound time: one iteration may print a value, call a
macro, scan a 10-million-item list or upper-case a 10 MB string. So every piece of work is
priced in steps of roughly the same cost (about a tenth of a microsecond here):

* an iteration of a loop costs two steps plus its body's static cost (compiler/cost.py);
* a macro call costs :data:`CALL_STEPS` plus its body's static cost;
* a filter, method, ``in`` test or operator whose work grows with its data costs one step per
  :data:`CHARS_PER_STEP` characters or :data:`ITEMS_PER_STEP` items it reads or builds. That
  also bounds memory: everything a render allocates was paid for, so a template cannot keep
  building large values until the process runs out of memory.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any, Callable, Optional

#: Steps for one iteration of a loop, besides its body; for each item a loop's `if` filter
#: tests, besides the test (it runs in a scope of its own).
LOOP_STEPS = 2
FILTERED_ITEM_STEPS = 5
#: Steps for the call of a macro (binding arguments, a new scope, the output buffer).
CALL_STEPS = 30
#: Steps for work the evaluator finds out about only at run time: an attribute or item
#: lookup on something other than a plain dict (a string, a namespace, an undefined value)
#: and an assignment to a namespace attribute go through the sandbox (a microsecond or more).
#: The attributes sandbox.DIRECT_ATTRIBUTES lists (``loop.index0``...) are read directly, like
#: a dict hit, and cost nothing beyond their node's static price.
SLOW_LOOKUP_STEPS = 30
#: Bit shifts: a step per 16 characters and per 2 items (about 16 bytes of memory either way).
CHARS_SHIFT = 4
ITEMS_SHIFT = 1
CHARS_PER_STEP = 1 << CHARS_SHIFT
ITEMS_PER_STEP = 1 << ITEMS_SHIFT

#: How many times its input's size (see size_cost) a filter costs: work done at C speed on
#: characters or items. Filters that only look at an end or the length of their input are
#: free; ``tojson``, ``pprint`` and ``string`` charge what they serialise themselves (nested data
#: counts). Unlisted filters cost 1; their result, when it is a new string or list, is charged
#: once more (it was built).
FILTER_WEIGHTS = {
    "length": 0, "count": 0, "first": 0, "last": 0, "default": 0, "d": 0, "attr": 0,
    "random": 0, "abs": 0, "safe": 0, "int": 0, "float": 0, "round": 0, "items": 0,
    "tojson": 0, "pprint": 0,  # (urlize, striptags, title, wordwrap: per unit, inside them)
    # charged per item as they run (ITEM_STEPS): their input may be lazy, of unknown size
    "map": 0, "select": 0, "reject": 0, "selectattr": 0, "rejectattr": 0,
}
#: Steps per item (per character of a string) for filters running Python code on every item:
#: sorting with a key, grouping, serialising, comparing.
FILTER_ITEM_STEPS = {
    "sort": 10, "dictsort": 10, "groupby": 10, "unique": 3, "min": 2, "max": 2, "sum": 2,
    "batch": 2, "slice": 2, "xmlattr": 10, "join": 1, "list": 1,
    "reverse": 1, "string": 0,
}
#: Steps per item that ``map``/``select``/``reject``/``selectattr``/``rejectattr`` process (an
#: attribute lookup or a filter/test call on each: up to four microseconds).
ITEM_STEPS = 30
#: The same for methods called on str, list and dict values (unlisted: 1).
METHOD_WEIGHTS = {
    "get": 0, "keys": 0, "values": 0, "items": 0, "startswith": 0, "endswith": 0,
    "bit_length": 0, "conjugate": 0, "is_integer": 0, "pop": 0, "append": 0, "sort": 8,
}


#: The views of a dict (``d.items()``...): they read and print the dict's items.
DICT_VIEWS = (type({}.keys()), type({}.values()), type({}.items()))
_SIZED_CONTAINERS = (list, tuple, dict, set, frozenset) + DICT_VIEWS


def size_cost(value: Any) -> int:
    """Steps for reading or building ``value`` once (0 for scalars and small values)."""
    kind = type(value)
    if kind is str:
        return len(value) >> CHARS_SHIFT
    if kind is list or kind is tuple or kind is dict:
        return len(value) >> ITEMS_SHIFT
    if kind is int or kind is float or kind is bool or value is None:
        return 0
    # subclasses (Markup, namedtuples) and the other sized values a template can reach
    if isinstance(value, str):
        return len(value) >> CHARS_SHIFT
    if isinstance(value, range):
        return 0
    if isinstance(value, _SIZED_CONTAINERS):
        return len(value) >> ITEMS_SHIFT
    return 0


#: Steps per item of a list whose items the call made afresh, one object each: ``split``'s
#: words, a non-ASCII string's characters. Each holds a pointer and an object of 50 bytes or
#: more, about 80 bytes: five steps of 16 bytes, so that what one render can allocate stays
#: near a gigabyte (50 million steps) even when it is made of many small strings.
FRESH_ITEM_STEPS = 5
#: Provenance renders (provenance.py) keep, for every string, a record of where its
#: characters came from: a str with origins carries a dict of its own and a record of one
#: or more runs, stretches of characters with one source (about 450 bytes for a str of one
#: run: :data:`PROVENANCE_STR_STEPS`), and each run past the first few about 175 bytes
#: (:data:`PROVENANCE_RUN_STEPS`). Every such str made during a render is paid for when it is
#: made (by an operation, a loop over a string's characters, a split), so that the memory a
#: provenance render can hold stays within the same budget as a plain render's.
PROVENANCE_STR_STEPS = 28
PROVENANCE_RUN_STEPS = 11
#: A str joined from pieces records the pieces until its runs are needed: 64 bytes a piece.
PROVENANCE_PART_STEPS = 4
#: Methods whose list result is made of new strings (charged FRESH_ITEM_STEPS per item).
FRESH_ITEM_METHODS = frozenset({"split", "rsplit", "splitlines"})


def characters_cost(text: str) -> int:
    """Steps for making a list of the characters of ``text`` (iterating or ``|list``): ASCII
    characters are shared objects in CPython (a pointer each), others are new objects."""
    return len(text) >> ITEMS_SHIFT if text.isascii() else len(text) * FRESH_ITEM_STEPS


def item_count(value: Any) -> int:
    """Items (characters of a string) a filter iterating over ``value`` visits."""
    kind = type(value)
    if kind is str or kind is list or kind is tuple or kind is dict:
        return len(value)
    return 0


def filter_input_cost(name: str) -> Optional[Callable[[Any], int]]:
    """The function pricing what the filter ``name`` does with its input, None when free."""
    if name == "list":  # a string's characters may each be a new object
        return lambda value: (characters_cost(value) if isinstance(value, str)
                              else item_count(value))
    per_item = FILTER_ITEM_STEPS.get(name)
    if per_item is not None:
        if not per_item:
            return None
        return lambda value: item_count(value) * per_item
    weight = FILTER_WEIGHTS.get(name, 1)
    if not weight:
        return None
    if weight == 1:
        return size_cost
    return lambda value: size_cost(value) * weight
