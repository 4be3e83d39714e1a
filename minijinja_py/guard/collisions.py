"""Hash tables filled with template values: bounded however their keys collide.

A dict or a set finds a key by probing slots picked by the key's hash; a key whose slot is
taken moves on along a probe sequence, comparing itself with each key of the same hash it
meets. One C call (a dict display, ``dict.fromkeys``, a set operation, comparing two dicts,
``str.translate``) hashes all its keys with no step check in between, and the deadline
(deadline.py) only fires at the next check. A template steers the probing with two kinds
of keys:

* keys of EQUAL hashes, each compared with all the others: an int hashes to its value modulo
  ``P = 2**61 - 1``, so ``range(0, P * 100000, P)`` is 100,000 ints of hash 0 and
  ``dict.fromkeys`` of them ran 92 s; a tuple mixes its items' hashes with an invertible
  step, so tuples of small ints can be solved to share a hash.
* keys that pick their SLOT: an int below P is its own hash, and once a key's hash has been
  shifted out of its probe sequence every key walks the same cycle of slots (``i -> 5i + 1``
  modulo the table's size); ints placed along that cycle make a run that each later key
  landing in it walks to its end. 61,000 ints below 2**22 took 3.5 s to build into a dict, a
  hundred times a plain dict's time, and the cost grows with the square of the count.

Not aimed: a str (its hash is keyed by a secret of the process, unless PYTHONHASHSEED fixes
it) and a tuple holding one (the secret is mixed into the tuple's hash); the engine's objects
and Undefined (identity, or one value); None and the bools (a few values). A float hashes as
the rational it is: it picks its slot as an int does, but at most 34 floats share a hash.

THE RULE, decided here for every operation that hashes template values (building or growing
a dict or a set, looking keys up, comparing dicts, sets and dict views): before it runs, it
is charged its worst case in probes. Each key costs its *weight* (hashing it and comparing
it with a key of the same hash: more for long ints and tuples); each *steered* key (an int,
a float, a tuple of numbers, a tuple holding a colliding item: see _classify) costs its
weight again for every key it could be made to walk past (every steered key of the table;
every key of a table not counted key by key, for a single lookup). An operation whose worst
case is more than a sixteenth of ``Limits.max_steps`` is refused with a LimitExceededError:
one call that size cannot be interrupted, and takes up to a fifth of a second or so. Below
that the worst case is charged to the step budget, eight probes a step, so that loops of such
operations run out of steps. Tables of strs, the tables real templates fill, cost their
keys' count.

Tables only the engine reads (``unique``'s) store ``(SALT, key)`` when their keys could do
harm: a secret mixed into every hash, so that no key can pick its slot, and only keys that can
share a hash with another value (long ints, tuples of numbers) are counted there.
"""

from __future__ import annotations

import os
from itertools import chain
from types import MappingProxyType

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any, Dict, Iterable, List, Tuple

from .limits import (SET_LIKE, charge, check_collection_size, check_comparable, check_deadline,
                     current_limits)

#: Probes of a hash table per step: a probe (a slot read; with an equal hash a key
#: comparison of weight 1) costs 5-15 ns here, a step about 100 ns.
PROBES_SHIFT = 3
#: One operation may cost at most ``max_steps >> SINGLE_CALL_SHIFT`` steps (3,125,000 at the
#: defaults: 0.1-0.25 s measured for the worst keys), and always this many (a small budget
#: then fails on the charge).
SINGLE_CALL_SHIFT = 4
SINGLE_CALL_FLOOR = 1 << 16
#: Ints this long or longer share their hash with smaller ones (2**61 - 1 is the modulus).
COLLIDING_BITS = 61
#: Weight of an int: one probe, plus one per this many bits compared (two 4,300-digit ints of
#: the same hash take 300 ns to compare, the time of 22 probes; their weight is 56).
INT_BITS_SHIFT = 8
#: Weight of a str compared with one of the same hash: one per this many characters.
STR_CHARS_SHIFT = 8

#: Mixed into the hash of every key of an engine-only table: a secret of this process.
SALT = os.urandom(16).hex()
#: Whether str hashes are secret: PYTHONHASHSEED unset or "random" (a fixed seed makes every
#: hash computable, so strings can be aimed at slots like ints).
STR_HASH_SECRET = os.environ.get("PYTHONHASHSEED", "random") == "random"

# What a key's hash lets a template do (flags of _classify):
_PUBLIC = 1       # its hash is a function of its value anyone can compute
_STEERED = 2      # a template can aim it at a slot (public), or make it collide
_COLLIDING = 4    # it can share its hash with a different value a template also holds
_INVERTIBLE = 8   # a value of any given hash can be found (ints, floats)

_NUMBER = _PUBLIC | _STEERED | _INVERTIBLE
_STR_FLAGS = 0 if STR_HASH_SECRET else _PUBLIC | _STEERED
#: Exact types of keys no template aims (checked at C speed over a whole table first).
_UNAIMED_TYPES = frozenset({bool, type(None)} | ({str} if STR_HASH_SECRET else set()))
#: Values compared item by item, recursively (limits.check_comparable).
_NESTING = (list, tuple, dict)
#: Containers that look an item up by its hash (``in``, ``[]``).
HASHED = (dict, MappingProxyType) + SET_LIKE
_ITEMS_VIEW = type({}.items())
#: Values whose comparison visits their items: containers, sets and dict views.
_COMPARED_BY_PARTS = _NESTING + SET_LIKE


def _classify(key: Any, memo: Dict[int, Tuple[int, int]]) -> Tuple[int, int]:
    """(flags, weight) of one key; ``memo`` holds the tuples already classified (by id).

    Ints and floats are steered (their hashes are public); ints of 61 bits or more collide
    (``n`` and ``n + P`` share a hash). A str is neither while its hash is secret. A range
    hashes as the tuple of its length, start and step. Anything else (None, bools, the
    engine's objects, Undefined) hashes to one of a few values or by identity: not steered.
    """
    kind = type(key)
    if kind is str:
        return _STR_FLAGS, 1 + (len(key) >> STR_CHARS_SHIFT)
    if kind is int or (isinstance(key, int) and kind is not bool):
        bits = key.bit_length()
        flags = _NUMBER | _COLLIDING if bits >= COLLIDING_BITS else _NUMBER
        return flags, 1 + (bits >> INT_BITS_SHIFT)
    if kind is bool or key is None:
        return _PUBLIC, 1
    if isinstance(key, float):
        return _NUMBER, 1
    if isinstance(key, tuple):
        known = memo.get(id(key))
        if known is None:
            known = memo[id(key)] = _classify_tuple(key, memo)
        return known
    if isinstance(key, str):  # Markup, provenance's PStr: a str's hash
        return _STR_FLAGS, 1 + (len(key) >> STR_CHARS_SHIFT)
    if kind is range:  # hashed as the tuple (length, start, step): solvable, as ints are
        return _classify_tuple((key.start, key.stop, key.step), memo)
    return 0, 1


def _classify_tuple(items: tuple, memo: Dict[int, Tuple[int, int]]) -> Tuple[int, int]:
    """A tuple's hash is public when its items' are; a value of any hash can then be found
    by solving the step that mixes in one invertible item. It collides when an item does,
    or when two of its items can be traded against each other (a public, invertible tuple
    of two items or more)."""
    all_flags = _PUBLIC
    any_flags = 0
    weight = 1
    for item in items:
        flags, item_weight = _classify(item, memo)
        weight += item_weight
        all_flags &= flags
        any_flags |= flags
    flags = all_flags
    if flags & _PUBLIC and any_flags & _INVERTIBLE:
        flags |= _INVERTIBLE
        if len(items) > 1:
            flags |= _COLLIDING
    if any_flags & _COLLIDING:
        flags |= _COLLIDING
    if flags & (_PUBLIC | _COLLIDING):
        flags |= _STEERED
    return flags, weight


def census(keys: Iterable[Any], salted: bool = False, held: int = 0) -> Tuple[int, int, int]:
    """``(weight of all the keys, how many are steered, their weight)`` for ``keys`` (a sized
    collection) hashed into one table; in an engine-only (salted) table only colliding keys
    are steered. Keys of the few types no template aims are counted at C speed; any other
    key costs a step to classify. The count stops early once ``steered weight * (held +
    steered)`` is past what one call may cost: the caller's work (which includes that
    product) is then refused."""
    try:
        kinds = set(map(type, keys))
    except TypeError:  # not iterable: the operation itself raises
        return 0, 0, 0
    quick = _quick_census(keys, kinds, salted)
    if quick is not None:
        return quick
    counted = _COLLIDING if salted else _STEERED
    ceiling = _ceiling() << PROBES_SHIFT
    memo: Dict[int, Tuple[int, int]] = {}
    weight = steered = steered_weight = classified = 0
    try:
        for key in keys:
            if type(key) is int:  # the commonest steered key, classified inline
                bits = key.bit_length()
                key_weight = 1 + (bits >> INT_BITS_SHIFT)
                flags = _NUMBER | _COLLIDING if bits >= COLLIDING_BITS else _NUMBER
            else:
                flags, key_weight = _classify(key, memo)
            weight += key_weight
            if flags & counted:
                steered += 1
                steered_weight += key_weight
            classified += 1
            if not classified & _CENSUS_CHUNK_MASK:
                charge(_CENSUS_CHUNK_MASK + 1)
                check_deadline()
                if steered_weight * (held + steered) > ceiling:
                    break
    except RecursionError:
        limits = current_limits()
        raise limits.exceeded("max_recursion", "a key nested too deeply to hash") from None
    charge(classified & _CENSUS_CHUNK_MASK)
    return weight, steered, steered_weight


#: The census of keys it cannot count at C speed charges a step a key, every this many + 1
#: keys (and reads the clock for the deadline).
_CENSUS_CHUNK_MASK = 4095
#: Ints within these bounds weigh 1 (fewer bits than 1 << INT_BITS_SHIFT); within the
#: second, they share their hash with no other value.
_LIGHT_INT = 1 << (1 << INT_BITS_SHIFT)
_LONE_INT = 1 << (COLLIDING_BITS - 1)


def _unaimed(kind: type) -> bool:
    """Keys of this type are never aimed (Markup and provenance's PStr hash as a str)."""
    return kind in _UNAIMED_TYPES or (STR_HASH_SECRET and issubclass(kind, str))


def _quick_census(keys: Any, kinds: Any, salted: bool) -> Any:
    """census() at C speed for the tables real templates fill: keys of unaimed types (strs),
    small ints, floats, tuples of strs. None for anything else (counted key by key)."""
    count = len(keys)
    if all(map(_unaimed, kinds)):
        return count, 0, 0
    if kinds <= _INT_TYPES:  # (a bool counts as an int here)
        lowest, highest = min(keys), max(keys)
        if -_LIGHT_INT < lowest and highest < _LIGHT_INT:
            if not salted:
                return count, count, count
            if -_LONE_INT < lowest and highest < _LONE_INT:
                return count, 0, 0
        return None
    if kinds == _FLOAT_TYPE:  # none collides (at most 34 share a hash value)
        return (count, 0, 0) if salted else (count, count, count)
    if kinds == _TUPLE_TYPE:  # `('user', 'tool')` pairs: a secret in every hash
        items = set(map(type, chain.from_iterable(keys)))
        if items and all(STR_HASH_SECRET and issubclass(kind, str) for kind in items):
            return count + sum(map(len, keys)), 0, 0
    return None


_INT_TYPES = frozenset({int, bool})
_FLOAT_TYPE = {float}
_TUPLE_TYPE = {tuple}


def _ceiling() -> int:
    """The most steps one call hashing template values may cost."""
    limits = current_limits()
    return max(limits.max_steps >> SINGLE_CALL_SHIFT, SINGLE_CALL_FLOOR)


#: How a refusal names the keys it counted.
_CHOSEN = "integers, floats or tuples of numbers among them (a template can choose their hashes)"


def _settle(work: int, description: str) -> None:
    """Refuse ``work`` probes in one operation beyond its share of the budget (the call
    cannot be interrupted), else charge them."""
    steps = work >> PROBES_SHIFT
    if not steps:
        return
    ceiling = _ceiling()
    if steps > ceiling:
        raise current_limits().exceeded(
            "max_steps", f"{description} could take more than {ceiling:,} steps in one call "
            "that nothing interrupts (a sixteenth of the budget)")
    charge(steps)


def check_table(keys: Iterable[Any], held: int = 0, what: str = "a dict",
                salted: bool = False) -> None:
    """Before ``keys`` (a sized iterable, read twice) are hashed into one table that already
    holds ``held`` keys (any of which may be steered). In a ``salted`` table (keys stored as
    ``(SALT, key)``, see salted_key) only colliding keys are steered, and each comparison
    compares the salt too."""
    weight, steered, steered_weight = census(keys, salted, held)
    if salted:
        steered_weight += steered
    work = weight + steered_weight * (held + steered) if steered else weight
    _settle(work, f"{what} of {len(keys):,} keys, {_CHOSEN},")  # type: ignore[arg-type]


#: Probes of an engine-only table below which its keys are kept as they are: salting each
#: key costs more than the worst such a small table can be made to take.
UNSALTED_PROBES = 1 << 16


def check_engine_table(keys: List[Any], what: str) -> bool:
    """Before a table only the engine reads (``unique``'s) is filled with ``keys``: True when
    they must be stored salted (salted_key), which no key can aim at a slot; plain keys when
    the worst they can do is small (strs, a few hundred ints). Charged either way."""
    weight, steered, steered_weight = census(keys)
    probes = steered_weight * steered
    if probes <= UNSALTED_PROBES:
        _settle(weight + probes, f"{what} of {len(keys):,} keys, {_CHOSEN},")
        return False
    check_table(keys, 0, what, salted=True)
    return True


def salted_key(key: Any) -> tuple:
    """How an engine-only table stores ``key``: equal keys give equal tuples (the salt is one
    object), and a hash no template can aim at a slot."""
    return (SALT, key)


def lookup_steps(key: Any, table: Any) -> int:
    """Steps for looking ``key`` up in (or adding it to) ``table`` once: its walk past every
    key of the table when a template can aim it, else its hashing (nothing for a str)."""
    kind = type(key)
    if kind is str and STR_HASH_SECRET:
        return 0
    if kind is int:  # (inline: `d[0]`, `i in seen`)
        flags, weight = _STEERED, 1 + (key.bit_length() >> INT_BITS_SHIFT)
    else:
        flags, weight = _classify(key, {})
    if flags & _STEERED:
        try:
            return (weight * (1 + len(table))) >> PROBES_SHIFT
        except TypeError:  # unsized: the operation itself decides
            return weight >> PROBES_SHIFT
    return weight >> PROBES_SHIFT


def check_lookup(key: Any, table: Any) -> None:
    """Charge looking ``key`` up in ``table`` (a dict, set or dict view) before it is done."""
    steps = lookup_steps(key, table)
    if steps:
        charge(steps)


def check_membership(needle: Any, haystack: Any) -> None:
    """Before ``needle in haystack``: a lookup in a dict, set or dict view is charged (see
    lookup_steps); a container looked for in a sequence (a dict's values) is compared with
    every item (limits.check_comparable)."""
    if isinstance(haystack, HASHED):
        check_lookup(needle, haystack)
    elif isinstance(needle, _COMPARED_BY_PARTS) and not isinstance(haystack, str):
        try:
            times = max(len(haystack), 1)
        except TypeError:  # lazy: its items are charged as they are made
            times = 1
        if isinstance(needle, _NESTING):
            check_comparable(needle, times)
        else:  # a set or dict view: compared by looking its items up
            check_comparison(comparison_work(needle) * times)


def check_lookups(count: int, table: Any, what: str) -> None:
    """Before one call looks ``count`` keys a template may aim (ints: ``str.translate``'s
    code points) up in ``table``: each may walk past every key of the table."""
    _settle(count * (1 + len(table)),
            f"{what} looking up {count:,} code points (integers: a template can choose their "
            f"hashes) in a dict of {len(table):,} keys")


def check_compared(left: Any, right: Any) -> None:
    """Before ``left == right`` (``<``...): containers of containers bounded (one bounded side
    bounds the comparison: it walks both in step; ``x == x`` is Python's identity shortcut),
    and the lookups of two sets or dict views in each other charged."""
    if isinstance(left, _NESTING) and isinstance(right, _NESTING) and left is not right:
        check_comparable(left)
    elif isinstance(left, SET_LIKE) and isinstance(right, SET_LIKE) and left is not right:
        # each side's items looked up in the other (sets of different sizes: subset tests)
        work = 0
        for side, other in ((left, right), (right, left)):
            weight, steered, steered_weight = census(side, False, len(other))
            work += weight + steered_weight * (len(other) + steered)
        _settle(work, f"comparing sets of {len(left) + len(right):,} items, {_CHOSEN},")
        if isinstance(left, _ITEMS_VIEW):  # the values of equal keys are compared too
            check_comparable(list(left))


def comparison_work(table: Any) -> int:
    """Probes comparing the dict (set, dict view) ``table`` with another of its size may take:
    each side's keys looked up in the other. Keys no template aims find their place at
    random; a steered key of either side can walk every steered key of the other, comparing
    itself with each at the cost of the lighter of the two."""
    partner = 2 * len(table)  # (the other side has as many keys: dicts of equal size)
    weight, steered, steered_weight = census(table, False, partner)
    return steered_weight * (partner + steered)


def check_comparison(work: int) -> None:
    """Refuse or charge the ``work`` of comparing containers holding dicts or sets (the sum
    of their comparison_work over every path, see limits.check_comparable)."""
    _settle(work, "comparing dicts or sets with "
                  f"{_CHOSEN.replace('among them', 'among their keys')}")


def _materialised(value: Any) -> Any:
    """``value`` as a sized collection that can be read twice (a lazy one as a list)."""
    if isinstance(value, (list, tuple, dict, str) + SET_LIKE):
        return value
    try:
        return list(value)
    except TypeError:  # not iterable: the operation itself raises
        return value


def checked_set_operands(operands: Any, what: str = "a set operation") -> List[Any]:
    """Before a set operation hashes the items of all its ``operands`` (counted as one
    table: the result or the set they are looked up in): the operands to pass on, lazy ones
    read into lists."""
    operands = [_materialised(operand) for operand in operands]
    keys: List[Any] = []
    for operand in operands:
        try:
            keys.extend(operand)
        except TypeError:  # not iterable: the operation itself raises
            pass
    check_table(keys, 0, what)
    return operands


def _pair_keys(pairs: List[Any]) -> List[Any]:
    """The keys of ``dict(pairs)``: each pair's first item (pairs Python refuses are left to
    it). Lazy pairs were read into lists by dict_source."""
    keys = []
    for pair in pairs:
        if isinstance(pair, (list, tuple, str)) and len(pair) == 2:
            keys.append(pair[0])
    return keys


def dict_source(source: Any, held: int = 0, what: str = "a dict") -> Any:
    """Before ``dict(source)`` or ``d.update(source)`` (``d`` holding ``held`` keys): the
    source checked, and returned as it must be passed on (lazy pairs read into lists, so
    that their keys are the ones counted)."""
    if isinstance(source, dict) or isinstance(source, MappingProxyType):
        check_table(source, held, what)
        return source
    if hasattr(source, "keys"):  # any other mapping: Python reads its keys()
        check_table(_materialised(source.keys()), held, what)
        return source
    try:
        pairs = list(source)
    except TypeError:  # not iterable: dict() raises its own error
        return source
    for position, pair in enumerate(pairs):
        if not isinstance(pair, (list, tuple, str)):
            try:
                pairs[position] = list(pair)
            except TypeError:  # not a sequence: dict() refuses it with its own message
                break
    check_table(_pair_keys(pairs), held, what)
    return pairs


def checked_dict(args: Any, kwargs: Any, what: str = "dict()") -> Any:
    """``dict(*args, **kwargs)`` for a template: the source checked first (keyword names are
    strs)."""
    if args:
        args = (dict_source(args[0], 0, what),) + tuple(args[1:])
    return dict(*args, **kwargs)


def checked_fromkeys(keys: Any, *rest: Any, **kwargs: Any) -> dict:
    """``dict.fromkeys(keys, ...)`` for a template, its keys checked first."""
    keys = list(keys)
    check_collection_size(len(keys))
    check_table(keys, 0, "dict.fromkeys()")
    return dict.fromkeys(keys, *rest, **kwargs)


def literal_steps(value: Any) -> int:
    """Steps for rebuilding the dicts inside a constant literal (each evaluation copies it,
    hashing their keys again); 0 for most literals."""
    total = 0
    pending = [value]
    while pending:
        item = pending.pop()
        if type(item) is dict:
            weight, steered, steered_weight = census(item)
            total += weight + steered_weight * steered if steered else 0
            pending.extend(item.values())
        elif type(item) is list or type(item) is tuple:
            pending.extend(item)
    return total >> PROBES_SHIFT


def literal_allowed(keys: List[Any]) -> bool:
    """Whether a dict literal of constant ``keys`` may be built while compiling: not when its
    hashing would be refused (it is then built, and refused, at render time)."""
    weight, steered, steered_weight = census(keys)
    return not steered or (weight + steered_weight * steered) >> PROBES_SHIFT <= _ceiling()


def check_mapping_method(owner: Any, name: str, args: Any) -> Any:
    """Before a dict's (mapping proxy's) method ``name`` runs with ``args``: lookups and
    inserts charged, copies and updates checked. Returns the arguments to pass on."""
    if name in ("get", "pop", "setdefault", "__contains__", "__getitem__"):
        if args:
            check_lookup(args[0], owner)
    elif name == "copy":
        check_table(owner, 0, "a dict's copy")
    elif name == "update" and args:
        args = (dict_source(args[0], len(owner), "dict.update()"),) + tuple(args[1:])
    return args


def check_set_method(owner: Any, name: str, args: Any) -> Any:
    """Before a set's (dict view's) method ``name`` runs with ``args``. Returns the
    arguments to pass on (lazy ones read into lists)."""
    if name in ("add", "remove", "discard"):
        if args:
            check_lookup(args[0], owner)
        return args
    if name in ("pop", "clear"):
        return args
    return tuple(checked_set_operands((owner,) + tuple(args), f"set.{name}()")[1:])


def check_host_method(owner: Any, name: str, args: Any) -> Any:
    """A method of a set, dict view or mapping proxy reached as a host object's
    (``d.keys().isdisjoint(x)``, ``d.keys().mapping.get(k)``): the same checks."""
    if isinstance(owner, SET_LIKE):
        return check_set_method(owner, name, args)
    if isinstance(owner, MappingProxyType):
        return check_mapping_method(owner, name, args)
    return args


__all__ = ["census", "check_table", "check_engine_table", "salted_key", "lookup_steps",
           "check_lookup", "check_lookups", "check_membership", "check_compared",
           "comparison_work", "check_comparison", "checked_set_operands", "dict_source",
           "checked_dict", "checked_fromkeys", "literal_steps", "literal_allowed",
           "check_mapping_method", "check_set_method", "check_host_method", "SET_LIKE",
           "HASHED", "SALT", "STR_HASH_SECRET"]
