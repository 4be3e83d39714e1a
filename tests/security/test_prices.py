"""What each kind of work costs, checked through the smallest ``max_steps`` a render fits in.

The step budget (``Limits.max_steps``, budget.py) bounds time and memory only if its prices
hold: a call priced at 3 steps instead of 30, or non-ASCII characters priced as ASCII ones,
lets a template do ten times the work the budget says. A bound that a render merely stays
under proves nothing about the price; the smallest budget it fits in does. So each test here
finds that number by bisection (deterministic: the same render always takes the same steps)
and compares:

* the difference between two templates that differ by a known amount of one kind of work,
  with that amount times its documented price (:data:`DOCUMENTED`, copied from the limits
  table of docs/security.md and budget.py's docstrings, never read from budget.py itself);
* for the other kinds of work (filters, methods, serialising, the record of a provenance
  render), the whole price of one template per kind, as measured when the prices were last
  set (:data:`MEASURED`): a change to any of them, on purpose or not, shows up here.

Prices are the same in every render mode but for the record a provenance render pays for
(``budget.PROVENANCE_*``); the tests say which render they measure, so they run once (not
three times as the hostile suites' tests do).
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import pytest

import minijinja_py as mj

#: The prices docs/security.md (limits table: ``max_steps``) and budget.py document, in steps.
DOCUMENTED = {
    "loop iteration": 2,            # budget.LOOP_STEPS, besides the body's nodes
    "macro call": 30,               # budget.CALL_STEPS, besides the body's nodes
    "lookup through the sandbox": 30,  # budget.SLOW_LOOKUP_STEPS
    "characters per step": 16,      # budget.CHARS_PER_STEP
    "items per step": 2,            # budget.ITEMS_PER_STEP
    "new small object": 5,          # budget.FRESH_ITEM_STEPS: a non-ASCII character, a word
    "filtered item": 5,             # budget.FILTERED_ITEM_STEPS: an item a loop's `if` tests
    "map or select item": 30,       # budget.ITEM_STEPS
    "sort filter item": 10,         # budget.FILTER_ITEM_STEPS["sort"]
    "sort method weight": 8,        # budget.METHOD_WEIGHTS["sort"]: times the list's size
    "print node": 4,                # budget.NODE_STEPS[Output]
    "other node": 1,                # a name, an operator: every node not listed
    "str with origins": 28,         # budget.PROVENANCE_STR_STEPS
    "run of origins": 11,           # budget.PROVENANCE_RUN_STEPS
    "joined piece": 4,              # budget.PROVENANCE_PART_STEPS
    "free runs": 16,                # provenance._FREE_RUNS: runs (pieces) one str keeps free
}

_DATA = {
    "ascii": "a" * 320, "accented": "é" * 320, "ints": list(range(320)),
    "ten": list(range(10)), "numbers": set(range(320)), "mapping": {"x": 1},
    "words": ["ab"] * 40, "thirty": ["ab"] * 30, "nine": ["ab"] * 9, "eight": ["ab"] * 8,
    "seven": ["ab"] * 7,
}


def smallest_max_steps(source: str, provenance: bool = False,
                       env_options: Optional[Dict[str, Any]] = None, **data: Any) -> int:
    """The smallest ``max_steps`` the render of ``source`` fits in (plain, or a provenance
    render with its runs read). Any refusal but ``max_steps`` fails the test."""
    low, high = -1, 1 << 26
    while low + 1 < high:
        middle = (low + high) // 2
        limits = mj.Limits(max_steps=middle, max_seconds=None)
        env = (mj.chat_environment(limits=limits) if env_options is None
               else mj.Environment(limits=limits, **env_options))
        variables = {**_DATA, **data}
        try:
            template = env.from_string(source)
            if provenance:
                template.render_with_provenance(variables).runs
            else:
                template.render(variables)
        except mj.LimitExceededError as exc:
            assert "Limits.max_steps" in exc.message, exc.message
            low = middle
        else:
            high = middle
    return high


def price(more: str, less: str, provenance: bool = False, **options: Any) -> int:
    """The steps ``more`` takes beyond ``less``."""
    return (smallest_max_steps(more, provenance, **options)
            - smallest_max_steps(less, provenance, **options))


def loop(body: str, times: int = 10) -> str:
    return "{% for i in range(" + str(times) + ") %}" + body + "{% endfor %}"


P = DOCUMENTED


# -- the documented prices, each isolated by a difference --------------------------------------
def test_a_macro_call() -> None:
    calls = "{% macro m() %}{% endmacro %}"
    assert price(calls + "{{ m() }}" * 3, calls + "{{ m() }}" * 2) == P["macro call"]


def test_a_loop_iteration() -> None:
    # two more iterations, and the list of the loop's items two items longer
    assert price(loop("", 12), loop("", 10)) == (
        2 * P["loop iteration"] + 2 // P["items per step"])


def test_a_loop_body_costs_its_nodes_at_every_iteration() -> None:
    assert price(loop("{{ i }}"), loop("")) == 10 * (P["print node"] + P["other node"])


def test_a_lookup_through_the_sandbox() -> None:
    # a missing key of a plain dict is looked up again by the sandbox (attribute, then item)
    assert price(loop("{{ mapping.y }}"), loop("{{ mapping.x }}")) == (
        10 * P["lookup through the sandbox"])


@pytest.mark.parametrize("condition", [False, True])
def test_an_if_costs_its_costliest_branch_whichever_runs(condition: bool) -> None:
    costly = P["print node"] + 3 * P["other node"]  # {{ i }}{{ i }}{{ i }}: one print node
    empty = loop("{% if c %}{% endif %}")
    # (body, nodes its tests add to the empty if's: an elif's `not c` is two)
    for body, tests in (("{% if c %}{{ i }}{{ i }}{{ i }}{% endif %}", 0),
                        ("{% if c %}{% else %}{{ i }}{{ i }}{{ i }}{% endif %}", 0),
                        ("{% if c %}{% elif not c %}{{ i }}{{ i }}{{ i }}{% else %}{% endif %}",
                         2)):
        assert smallest_max_steps(loop(body), c=condition) - smallest_max_steps(
            empty, c=condition) == 10 * (costly + tests * P["other node"]), body


@pytest.mark.parametrize("condition", [False, True])
def test_a_conditional_expression_costs_its_costliest_side_whichever_runs(condition: bool
                                                                          ) -> None:
    # `i + i + i` is two operators and three names where the other side is one name
    extra = 10 * 4 * P["other node"]
    cheap = loop("{{ i if c else i }}")
    assert smallest_max_steps(loop("{{ i if c else i + i + i }}"), c=condition) - \
        smallest_max_steps(cheap, c=condition) == extra
    assert smallest_max_steps(loop("{{ i + i + i if c else i }}"), c=condition) - \
        smallest_max_steps(cheap, c=condition) == extra


def test_the_characters_a_loop_makes_ascii_and_not() -> None:
    empty = "{% for c in '' %}{% endfor %}"
    iterations = 320 * P["loop iteration"]
    # ASCII characters are shared objects: a step per two, as any list's items
    assert price("{% for c in ascii %}{% endfor %}", empty) == (
        iterations + 320 // P["items per step"])
    # any other character is a new object of its own
    assert price("{% for c in accented %}{% endfor %}", empty) == (
        iterations + 320 * P["new small object"])


def test_the_characters_list_makes_ascii_and_not() -> None:
    assert price("{{ accented|list|length }}", "{{ ascii|list|length }}") == (
        320 * P["new small object"] - 320 // P["items per step"])


def test_an_item_a_loop_filter_tests() -> None:
    # 310 more items tested (the test is a constant: free); none passes
    assert price("{% for i in ints if false %}{% endfor %}",
                 "{% for i in ten if false %}{% endfor %}") == (
        310 * P["filtered item"] + 310 // P["items per step"])


def test_an_item_select_produces() -> None:
    assert price("{% for x in ints|select %}{% endfor %}",
                 "{% for x in ten|select %}{% endfor %}") == (
        310 * (P["map or select item"] + P["loop iteration"]))


def test_an_item_the_sort_filter_sorts() -> None:
    # and the sorted list it builds
    assert price("{{ ints|sort|length }}", "{{ ten|sort|length }}") == (
        310 * P["sort filter item"] + 310 // P["items per step"])


def test_the_sort_method_weighs_its_list() -> None:
    mutable = {"immutable": False}
    assert price("{{ ints.sort() }}", "{{ ten.sort() }}", env_options=mutable) == (
        P["sort method weight"] * 310 // P["items per step"])


def test_a_filter_reads_and_builds_characters_at_16_a_step() -> None:
    # upper reads 320 characters and builds 320: the same price for Markup, a str subclass
    assert smallest_max_steps("{{ ascii|upper|length }}") == 2 * 320 // P["characters per step"]
    assert price("{{ (ascii|safe)|upper|length }}", "{{ (ascii|safe)|length }}") == (
        2 * 320 // P["characters per step"])
    assert smallest_max_steps("{{ (ascii|safe)|length }}") == 320 // P["characters per step"]


def test_captured_output_is_charged_as_a_string_the_render_built() -> None:
    # a set block's (or a macro's) output leaves the output count and is charged as the
    # characters of a string: 320 of them, beyond an empty one
    for capture in ("{% set b %}X{% endset %}",
                    "{% macro m() %}X{% endmacro %}{% set b = m() %}"):
        assert price(capture.replace("X", "{{ ascii }}"), capture.replace("X", "{{ s }}"),
                     s="") == 320 // P["characters per step"], capture


def test_a_nested_loop_costs_its_header_in_the_outer_body() -> None:
    inner = "{% for j in ten %}{% endfor %}"
    # each outer iteration: the inner loop's statement and its `ten` (2 nodes), its 10
    # iterations and its list of 10 items
    per_outer = (2 * P["other node"] + 10 * P["loop iteration"]
                 + 10 // P["items per step"])
    assert price(loop(inner), loop("")) == 10 * per_outer


# -- the record of a provenance render ------------------------------------------------------------
def test_a_provenance_render_pays_for_each_str_with_origins() -> None:
    # the output: one str with origins, which a plain render does not make
    assert smallest_max_steps("x", provenance=True) == P["str with origins"]
    assert smallest_max_steps("x") == 0
    # `ascii ~ i` makes two (the number's text, the concatenation) at every iteration
    assert price(loop("{% set x = ascii ~ i %}"), loop("{% set x = i %}"), provenance=True) - \
        price(loop("{% set x = ascii ~ i %}"), loop("{% set x = i %}")) == (
        10 * 2 * P["str with origins"])


def test_a_str_an_operator_builds_costs_its_characters_in_every_render() -> None:
    # 'x' * 3200 and ascii + ascii: the characters built, at 16 a step, in a plain render
    # and in a provenance render (whose str is a subclass of str, as Markup is), which pays
    # for its str with origins on top (Markup keeps none: (ascii|safe) reads 320 characters)
    chars = P["characters per step"]
    for source, built, records in (("{% set x = 'x' * 3200 %}", 3200, 1),
                                   ("{% set x = ascii + ascii %}", 640, 1),
                                   ("{% set x = (ascii|safe) * 10 %}", 320 + 3200, 0)):
        assert smallest_max_steps(source) == built // chars, source
        assert smallest_max_steps(source, provenance=True) - smallest_max_steps(source) == (
            records * P["str with origins"]), source


def test_a_provenance_render_pays_for_each_character_it_iterates() -> None:
    plain = smallest_max_steps("{% for c in ascii %}{% endfor %}")
    assert smallest_max_steps("{% for c in ascii %}{% endfor %}", provenance=True) - plain == (
        320 * P["str with origins"])
    # characters without a position of their own (an input repeated): one str with origins
    # per distinct character, shared as CPython shares one-character strs
    repeated = "{% for c in s * 3 %}{% endfor %}"
    assert smallest_max_steps(repeated, provenance=True, s="abc") - smallest_max_steps(
        repeated, provenance=True, s="aaa") == 2 * P["str with origins"]
    assert smallest_max_steps(repeated, s="abc") == smallest_max_steps(repeated, s="aaa")


def test_joined_pieces_past_the_free_ones() -> None:
    """The join filter records its pieces (each item and each separator): free up to 16,
    then every piece counts."""
    def extra(more: str, less: str) -> int:
        """What the provenance render of ``more`` pays beyond ``less`` on top of a plain
        render's difference: the record alone."""
        more, less = "{% set x = " + more + "|join %}", "{% set x = " + less + "|join %}"
        return price(more, less, provenance=True) - price(more, less)

    free = P["free runs"]
    assert extra("eight", "seven") == 0  # 16 pieces or fewer
    assert extra("nine", "eight") == (free + 2) * P["joined piece"]  # 18: all of them count
    assert extra("words", "thirty") == 2 * 10 * P["joined piece"]


#: Whole prices of one template per kind of work, plain and provenance, measured when the
#: prices were last set: (id, source, steps of a plain render, of a provenance render). (The
#: two repetitions by * pay their characters in a provenance render too since issue 43: 802
#: and 60 steps more there.)
MEASURED = [
    ("map-filter", "{% for x in ints|map('string') %}{% endfor %}", 13440, 22400),
    ("tojson", "{{ ints|tojson|length }}", 715, 799),
    ("escape-of-a-set", "{{ numbers|e|length }}", 1177, 1421),
    ("escape-of-a-list", "{{ ints|e|length }}", 1497, 19661),
    ("split-words", "{{ (ascii ~ ' ' ~ ascii ~ ' x').split()|length }}", 95, 263),
    ("reverse", "{{ ints|reverse|list|length }}", 480, 536),
    ("repeated-runs", "{% set x = (ascii ~ 'x') * 40 %}{{ x|length }}", 822, 1814),
    ("runs-built-in-a-loop", "{% set ns = namespace(s='') %}{% for i in range(40) %}"
     "{% set ns.s = ns.s ~ ascii[i] ~ 'x' %}{% endfor %}{{ ns.s }}", 2915, 6973),
    ("slice-of-many-runs", "{% set ns = namespace(s='') %}{% for i in range(40) %}"
     "{% set ns.s = ns.s ~ ascii[i] ~ 'x' %}{% endfor %}{{ ns.s[1:] }}", 2949, 8732),
    ("characters-without-a-position", "{% for c in (ascii ~ 'xy') * 3 %}{% endfor %}",
     2495, 29599),
    ("wordcount", "{{ ints|join(' ')|wordcount }}", 2066, 25214),
]


@pytest.mark.parametrize("source,plain,traced", [m[1:] for m in MEASURED],
                         ids=[m[0] for m in MEASURED])
def test_measured_prices(source: str, plain: Optional[int], traced: Optional[int]) -> None:
    assert (smallest_max_steps(source), smallest_max_steps(source, provenance=True)) == (
        plain, traced)


# -- hashing template values (collisions.py) -------------------------------------------------------
#: What collisions.py documents: eight probes a step; a steered key (an int, a float, a tuple
#: of numbers) costs its weight again for every steered key it may walk past; one operation
#: may cost at most a sixteenth of max_steps; a key that is not a str, a small int or a float
#: costs a step to classify; a tuple or range weighs one plus its items.
PROBES_PER_STEP = 8
SINGLE_CALL_SHARE = 16
P61 = 2 ** 61 - 1
_KEYS = {"colliding": [k * P61 for k in range(100)], "small_ints": list(range(100)),
         "floats": [float(k) for k in range(100)], "strs": [f"k{k}" for k in range(100)],
         "pairs": [(k, k) for k in range(100)], "ranges": [range(k, k + 3) for k in range(100)],
         "many_colliding": [k * P61 for k in range(2000)], "text": "a" * 80}


def hashing(more: str, less: str) -> int:
    return price(more, less, **_KEYS)


def probes(work: int) -> int:
    return work // PROBES_PER_STEP


@pytest.mark.parametrize("keys,weight,classified", [
    ("colliding", 1, 0), ("small_ints", 1, 0), ("floats", 1, 0), ("pairs", 3, 100),
    ("ranges", 4, 100)])
def test_a_table_of_steered_keys_costs_the_square_of_their_count(keys: str, weight: int,
                                                                 classified: int) -> None:
    """100 keys a template can aim, against 100 strs (which cost their count): each key
    weighs ``weight`` and may walk past the other 99, and itself."""
    expected = probes(100 * weight + 100 * weight * 100) + classified - probes(100)
    assert hashing("{{ dict.fromkeys(%s)|length }}" % keys,
                   "{{ dict.fromkeys(strs)|length }}") == expected
    if not classified:  # (unique's table: the same rule, while it is small enough to be plain)
        assert hashing("{{ %s|unique|list|length }}" % keys,
                       "{{ strs|unique|list|length }}") == expected


def test_a_table_built_from_pairs_costs_as_one_of_its_keys() -> None:
    # dict() of (key, value) pairs and dict.update() with them (mutable sandbox): the keys
    # hashed as dict.fromkeys hashes them
    pairs = {"steered": [(k, 0) for k in range(100)], "named": [(f"k{k}", 0) for k in range(100)]}
    expected = probes(100 + 100 * 100) - probes(100)
    assert price("{{ dict(steered)|length }}", "{{ dict(named)|length }}", **pairs) == expected
    update = "{% set d = {} %}{% set _ = d.update(KEYS) %}{{ d|length }}"
    assert price(update.replace("KEYS", "steered"), update.replace("KEYS", "named"),
                 env_options={"immutable": False}, **pairs) == expected


def test_a_set_method_looks_its_argument_up() -> None:
    # the caller's set of 100 steered keys (and '5'), left as it was: 5 is in it already,
    # 500 and '500' are not
    numbers = set(range(100)) | {"5"}
    mutable = {"immutable": False}
    for call, str_call in (("s.add(5)", "s.add('5')"), ("s.discard(500)", "s.discard('500')")):
        assert price("{% set _ = " + call + " %}", "{% set _ = " + str_call + " %}",
                     env_options=mutable, s=numbers) == probes(1 + 100), call


def test_a_constant_dict_literal_pays_for_its_keys_at_every_evaluation() -> None:
    """A literal of constant keys is built once while compiling and copied at every
    evaluation (hashing its keys again): steered keys pay as dict.fromkeys of them does,
    strs nothing."""
    def literal(key: str) -> str:
        return "{% set d = {" + ", ".join(key % k + ": 0" for k in range(100)) + "} %}"

    assert price(loop(literal("%d")), loop(literal("'k%d'"))) == 10 * probes(100 + 100 * 100)


def test_one_call_may_cost_a_sixteenth_of_the_budget() -> None:
    # 2,000 keys of one hash: about four million probes, in one call nothing interrupts
    work = probes(2000 + 2000 * 2000)
    assert smallest_max_steps("{{ dict.fromkeys(many_colliding)|length }}", **_KEYS) == (
        SINGLE_CALL_SHARE * work)


def test_a_lookup_walks_past_every_key_of_the_table() -> None:
    table = "{% set d = dict.fromkeys(small_ints) %}"
    assert hashing(table + "{{ 5 in d }}", table + "{{ '5' in d }}") == probes(1 + 100)
    assert hashing(table + "{{ d.get(5) }}", table + "{{ d.get('5') }}") == probes(1 + 100)


def test_a_lookup_through_the_sandbox_walks_the_table_too() -> None:
    # map(attribute=5) looks 5 up in each of ten tables, through the sandbox
    tables = "{% set big = dict.fromkeys(small_ints) %}{% set small = {5: 1} %}"
    assert hashing(tables + "{{ ([big] * 10)|map(attribute=5)|list|length }}",
                   tables + "{{ ([small] * 10)|map(attribute=5)|list|length }}") == (
        10 * probes(1 + 100))


def test_translate_looks_every_code_point_up() -> None:
    table = "{% set d = dict.fromkeys(small_ints, 'x') %}"
    # 80 code points, each may walk the table's 100 keys; the text read and built twice
    assert hashing(table + "{{ text.translate(d)|length }}",
                   table + "{{ ''.translate(d)|length }}") == (
        probes(80 * (1 + 100)) + 3 * 80 // P["characters per step"])


def test_comparing_tables_looks_each_side_up_in_the_other() -> None:
    def compared(keys: str, comparison: str) -> int:
        tables = "{% set d = dict.fromkeys(" + keys + ") %}{% set e = dict.fromkeys(" + \
            keys + ") %}"
        return hashing(tables + "{{ " + comparison + " }}", tables + "x")

    # dicts: each steered key of one may walk the other's 100 and its own side's 100
    assert compared("small_ints", "d == e") - compared("strs", "d == e") == (
        probes(100 * (200 + 100)))
    # dict views compared as sets: both sides looked up in the other
    assert compared("small_ints", "d.keys() == e.keys()") - compared(
        "strs", "d.keys() == e.keys()") == probes(2 * (100 + 100 * 200)) - probes(2 * 100)


def test_a_set_reached_along_two_paths_is_compared_twice() -> None:
    # [a, a] == [b, b], a = [d.keys()]: the view is compared once along each path to it
    def compared(keys: str) -> int:
        tables = ("{% set d = dict.fromkeys(" + keys + ") %}{% set e = dict.fromkeys(" + keys
                  + ") %}{% set a = [d.keys()] %}{% set b = [e.keys()] %}")
        return hashing(tables + "{{ [a, a] == [b, b] }}", tables + "x")

    assert compared("small_ints") - compared("strs") == probes(2 * 100 * (200 + 100))


def test_sorting_sets_compares_each_about_log2_of_the_count_times() -> None:
    """list.sort() (mutable sandbox) on two dict views: each compared with the other
    (bit_length(2) = 2 times), as sets, each side's keys looked up in the other's."""
    def sorted_views(keys: str) -> int:
        tables = ("{% set d = dict.fromkeys(" + keys + ") %}{% set e = dict.fromkeys(" + keys
                  + ") %}{% set l = [d.keys(), e.keys()] %}")
        return price(tables + "{{ l.sort() }}", tables + "x", env_options={"immutable": False},
                     **_KEYS)

    assert sorted_views("small_ints") - sorted_views("strs") == (
        probes(2 * 2 * 100 * (200 + 100)))


def test_a_table_compared_with_each_item_of_a_list() -> None:
    # list.count(d) compares d with each of the 100 items: 100 comparisons of a table of
    # 100 steered keys, in one call
    assert smallest_max_steps("{% set d = dict.fromkeys(small_ints) %}"
                              "{{ small_ints.count(d) }}", **_KEYS) == (
        SINGLE_CALL_SHARE * probes(100 * 100 * (200 + 100)))
