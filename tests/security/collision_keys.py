"""Keys whose hashes collide or aim at a dict's slots, for test_hash_collisions.py.

A plain module (no test imports): a child interpreter of run_isolated loads it by its path
(``runpy.run_path``) to make hostile data there, where JSON cannot carry it (tuples).
"""

from __future__ import annotations

from typing import List, Tuple

#: An int's hash is its value modulo this prime: ``k * P`` all hash to 0.
P = 2 ** 61 - 1

# CPython's tuple hash (xxHash's mixing step, 64-bit builds).
_MASK = (1 << 64) - 1
_PRIME_1 = 11400714785074694791
_PRIME_2 = 14029467366897019727
_PRIME_5 = 2870177450012600261


def _rotate_left(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (64 - bits))) & _MASK


def _after_first_item(first: int) -> int:
    """The tuple hash's accumulator after its first item (an int below P: its own hash)."""
    return _rotate_left((_PRIME_5 + first * _PRIME_2) & _MASK, 31) * _PRIME_1 & _MASK


def colliding_pairs(count: int, target: int = 12345) -> List[Tuple[int, int]]:
    """``count`` pairs of ints below 2**61 (their own hashes) whose tuple hash is ``target``:
    the last mixing step is solved for the second item of each pair."""
    before_length = (target - (2 ^ (_PRIME_5 ^ 3527539))) & _MASK
    before_rotation = before_length * pow(_PRIME_1, -1, 1 << 64) & _MASK
    mixed = _rotate_left(before_rotation, 33)  # (a right rotation by 31)
    inverse_2 = pow(_PRIME_2, -1, 1 << 64)
    pairs = []
    first = 0
    while len(pairs) < count:
        second = (mixed - _after_first_item(first)) * inverse_2 & _MASK
        if second < P - 1:
            pairs.append((first, second))
        first += 1
    return pairs


def probe_path_flood(code: int, count: int, log_size: int) -> List[int]:
    """Small ints filling the probe sequence of the absent key ``code`` in a table of
    ``2 ** log_size`` slots: each sits in its own slot (cheap to insert), and looking up
    ``code`` walks past all of them."""
    mask = (1 << log_size) - 1
    slot = code & mask
    perturb = code
    keys = [code + (1 << log_size)]  # takes the first slot, without being `code`
    while len(keys) < count:
        perturb >>= 5
        slot = (slot * 5 + perturb + 1) & mask
        if slot == code:
            break
        keys.append(slot)
    return keys


def aimed_ints(log_size: int, run: int, extra: int) -> List[int]:
    """Distinct small ints (distinct hashes) that make a dict of ``2 ** log_size`` slots walk
    quadratically: ``run`` ints along the cycle every probe sequence ends in (``i -> 5i + 1``),
    then ``extra`` ints whose probe sequences meet that run near its start."""
    mask = (1 << log_size) - 1
    cycle: List[int] = []
    slot = 0
    for _ in range(run):
        cycle.append(slot)
        slot = (slot * 5 + 1) & mask
    position = {slot: index for index, slot in enumerate(cycle)}
    taken = set(cycle)
    picked: List[int] = []
    candidate = 1 << log_size
    while len(picked) < extra and candidate < 1 << (log_size + 6):
        slot = candidate & mask
        perturb = candidate
        while perturb and slot in taken:
            perturb >>= 5
            slot = (slot * 5 + perturb + 1) & mask
        if not perturb and position.get(slot, run) < run // 4:
            picked.append(candidate)
        candidate += 1
    return cycle + picked
