"""The builtin tests compared with Jinja2 3.1.6's own, input by input.

Each case calls our ``TESTS[name]`` directly (the ``filter``/``test`` tests with a small
stand-in Environment) and ``jinja2.tests.TESTS[name]`` (with a real
ImmutableSandboxedEnvironment) on the same input, and compares the result (type and value) or
the exception (class name and message). Jinja2 is imported here only for the expected values.
"""

from __future__ import annotations

import decimal
import fractions
from typing import Any, Dict, List, Tuple

import jinja2
import jinja2.tests as jinja_tests
import markupsafe
import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import _PassArg

from minijinja_py.exceptions import TemplateRuntimeError
from minijinja_py.runtime.filters.common import FILTERS
from minijinja_py.runtime.markup import Markup
from minijinja_py.runtime.objects import (MISSING, BoundMethod, ChainableUndefined, Cycler,
                                          Joiner, LazySequence, Macro, Namespace, StrictUndefined,
                                          Undefined, wants_environment)
from minijinja_py.runtime.sandbox import Sandbox
from minijinja_py.runtime.tests import TESTS


class StandInEnv:
    """What tests need from an Environment (the real one is written elsewhere)."""

    def __init__(self, undefined: type = Undefined) -> None:
        self.undefined = undefined
        self.sandbox = Sandbox(True, undefined)
        self.filters = dict(FILTERS)
        self.tests = dict(TESTS)

    def _call(self, table: Dict[str, Any], kind: str, name: Any, value: Any, args: Any,
              kwargs: Any) -> Any:
        function = table.get(name)
        if function is None:
            raise TemplateRuntimeError(f"No {kind} named {name!r}.")
        if wants_environment(function):
            return function(self, value, *(args or ()), **(kwargs or {}))
        return function(value, *(args or ()), **(kwargs or {}))

    def call_filter(self, name: Any, value: Any, args: Any = (), kwargs: Any = None) -> Any:
        return self._call(self.filters, "filter", name, value, args, kwargs)

    def call_test(self, name: Any, value: Any, args: Any = (), kwargs: Any = None) -> Any:
        return self._call(self.tests, "test", name, value, args, kwargs)

    def test_caller(self, name: Any, args: Any = (), kwargs: Any = None) -> Any:
        return lambda value: self.call_test(name, value, args, kwargs)


ENV = StandInEnv()
JENV = ImmutableSandboxedEnvironment()


class Gen:
    """A one-shot generator input: a LazySequence for us, a generator for Jinja2."""

    def __init__(self, items: List[Any]) -> None:
        self.items = items


class Method:
    """A bound str method as a template reads it: BoundMethod for us, builtin for Jinja2."""

    def __init__(self, owner: str, name: str) -> None:
        self.owner = owner
        self.name = name


def to_ours(value: Any) -> Any:
    if isinstance(value, Gen):
        return LazySequence(iter(value.items), "sync_do_map")
    if isinstance(value, Method):
        return ENV.sandbox.getattr(value.owner, value.name)
    if isinstance(value, list):
        return [to_ours(v) for v in value]
    if type(value) is tuple:
        return tuple(to_ours(v) for v in value)
    if isinstance(value, dict):
        return {to_ours(k): to_ours(v) for k, v in value.items()}
    return value


def to_jinja(value: Any) -> Any:
    if isinstance(value, Gen):
        return (v for v in value.items)
    if isinstance(value, Method):
        return JENV.getattr(value.owner, value.name)
    if isinstance(value, Undefined):
        cls = {ChainableUndefined: jinja2.ChainableUndefined,
               StrictUndefined: jinja2.StrictUndefined}.get(type(value), jinja2.Undefined)
        obj = value._undefined_obj
        return cls(hint=value._undefined_hint,
                   obj=jinja2.utils.missing if obj is MISSING else obj,
                   name=value._undefined_name)
    if isinstance(value, Markup):
        return markupsafe.Markup(str(value))
    if isinstance(value, Namespace):
        return jinja2.utils.Namespace(**value._attrs)
    if isinstance(value, Cycler):
        return jinja2.utils.Cycler(*value.items)
    if isinstance(value, Joiner):
        return jinja2.utils.Joiner(value.sep)
    if isinstance(value, Macro):
        return JENV.from_string("{% macro m(a) %}{% endmacro %}").module.m
    if isinstance(value, list):
        return [to_jinja(v) for v in value]
    if type(value) is tuple:
        return tuple(to_jinja(v) for v in value)
    if isinstance(value, dict):
        return {to_jinja(k): to_jinja(v) for k, v in value.items()}
    return value


def outcome(function: Any) -> Tuple[Any, ...]:
    try:
        result = function()
    except Exception as exc:
        return ("error", type(exc).__name__, str(exc))
    if isinstance(result, (Markup, markupsafe.Markup)):
        return ("ok", "Markup", str(result))
    if isinstance(result, (Undefined, jinja2.Undefined)):
        return ("ok", "Undefined", type(result).__name__)
    return ("ok", type(result).__name__, result)


def run_ours(name: str, value: Any, args: Tuple[Any, ...]) -> Any:
    function = TESTS[name]
    value, args = to_ours(value), tuple(to_ours(a) for a in args)
    if wants_environment(function):
        return function(ENV, value, *args)
    return function(value, *args)


def run_jinja(name: str, value: Any, args: Tuple[Any, ...]) -> Any:
    function = jinja_tests.TESTS[name]
    value, args = to_jinja(value), tuple(to_jinja(a) for a in args)
    if _PassArg.from_obj(function) is _PassArg.environment:
        return function(JENV, value, *args)
    return function(value, *args)


U = Undefined(name="x")
CU = ChainableUndefined(name="x")
SU = StrictUndefined(name="x")
MACRO = Macro(("m", ("a",), False, False, False), lambda args, kwargs: "")

VALUES: List[Any] = [
    0, 1, 2, -3, 7, 2.0, 2.5, -0.5, True, False, None, "", "abc", "ABC", "aBc", "123", "ß",
    "ǅ", "A1", "a b", Markup("x"), Markup("<B>"), [], [1, 2], (), (1,), {}, {"a": 1},
    range(3), U, CU, SU, Namespace(a=1), Gen([1]), len, MACRO, Method("abc", "upper"),
    decimal.Decimal("1.5"), complex(1, 2), fractions.Fraction(1, 3), float("nan"),
    float("inf"), 10 ** 30, set(), frozenset({1}), b"x", Cycler(1, 2), Joiner(),
]

ONE_ARGUMENT = ["boolean", "callable", "defined", "escaped", "even", "false", "float", "integer",
                "iterable", "lower", "mapping", "none", "number", "odd", "sequence", "string",
                "true", "undefined", "upper"]

COMPARISONS = ["eq", "equalto", "==", "ne", "!=", "gt", ">", "greaterthan", "ge", ">=", "lt",
               "<", "lessthan", "le", "<="]
PAIR_VALUES: List[Any] = [1, 2, 2.0, True, None, "a", "b", Markup("a"), [1], (1,), {"a": 1},
                          U, CU, SU, decimal.Decimal(2)]

CASES: List[Tuple[str, Any, Tuple[Any, ...]]] = []
CASES += [(name, value, ()) for name in ONE_ARGUMENT for value in VALUES]
CASES += [(name, a, (b,)) for name in COMPARISONS for a in PAIR_VALUES for b in PAIR_VALUES]
CASES += [("divisibleby", value, (num,))
          for value in (0, 6, 7, 7.5, -9, True, "6", U, None, 10 ** 30)
          for num in (2, 3, 0, 2.5, -3, U, "x")]
CASES += [("in", value, (container,))
          for value in (1, "a", "ab", None, U, [1], Markup("a"))
          for container in ([1, 2], "abc", {"a": 1}, (None,), 5, U, CU, [[1]], range(3), "",
                            Markup("<a>"), Gen([1, "a"]))]
CASES += [(name, value, ()) for name in ("filter", "test")
          for value in ("upper", "nosuch", "odd", "map", "==", U, [], 5, None, "", Markup("e"),
                        "random", "sameas")]
# missing or extra arguments (Python names the function in the message: only the class counts)
ARITY_CASES = [("odd", 1, (2,)), ("divisibleby", 4, ()), ("eq", 1, ()), ("in", 1, ()),
               ("sameas", 1, ()), ("defined", 1, (2,)), ("none", None, (1,))]
CASES += ARITY_CASES

# Python error messages name the value's type; the runtime's own classes have other names
# than Jinja2's generator/function/builtin method, which is a runtime matter.
RUNTIME_TYPE_NAMES = ("'LazySequence'", "'Macro'", "'BoundMethod'")


def _case_id(case: Tuple[str, Any, Tuple[Any, ...]], counts: Dict[str, int]) -> str:
    counts[case[0]] = counts.get(case[0], 0) + 1
    return f"{case[0]}-{counts[case[0]]}"


_COUNTS: Dict[str, int] = {}


@pytest.mark.parametrize("name,value,args", CASES, ids=[_case_id(c, _COUNTS) for c in CASES])
def test_test_matches_jinja2(name: str, value: Any, args: Tuple[Any, ...]) -> None:
    ours = outcome(lambda: run_ours(name, value, args))
    theirs = outcome(lambda: run_jinja(name, value, args))
    if ours[0] == theirs[0] == "ok" and ours[1] == theirs[1] == "float":
        assert repr(ours[2]) == repr(theirs[2])
    elif ours[0] == theirs[0] == "error" and (
            any(case[1] is value and case[2] is args for case in ARITY_CASES)
            or any(type_name in ours[2] for type_name in RUNTIME_TYPE_NAMES)):
        assert ours[1] == theirs[1]
    else:
        assert ours == theirs


def test_every_jinja2_test_is_present() -> None:
    assert set(TESTS) == set(jinja_tests.TESTS)


@pytest.mark.parametrize("value", [None, True, False, 1, "a", (), U])
def test_sameas_identity(value: Any) -> None:
    # identity only makes sense on the very same objects, so no conversion here
    items: List[Any] = [1]
    assert TESTS["sameas"](items, items) is True
    assert TESTS["sameas"](items, [1]) is False
    assert TESTS["sameas"](value, value) is True
    assert TESTS["sameas"](value, object()) is False


def test_callable_covers_runtime_objects() -> None:
    assert TESTS["callable"](MACRO)
    assert TESTS["callable"](ENV.sandbox.getattr("abc", "upper"))
    assert TESTS["callable"](ENV.sandbox.getattr({}, "items"))
    assert TESTS["callable"](Joiner())
    assert not TESTS["callable"](Namespace())
    assert not TESTS["callable"]("upper")


def test_filter_and_test_see_the_environment_tables() -> None:
    env = StandInEnv()
    env.filters["custom"] = lambda value: value
    env.tests["custom_test"] = lambda value: True
    assert TESTS["filter"](env, "custom") is True
    assert TESTS["test"](env, "custom_test") is True
    assert TESTS["filter"](ENV, "custom") is False
    assert TESTS["test"](ENV, "custom_test") is False


def test_select_with_tests_by_name() -> None:
    assert list(FILTERS["select"](ENV, [1, 2, 3, 4], "even")) == [2, 4]
    assert list(FILTERS["reject"](ENV, [1, None, "a"], "none")) == [1, "a"]
    assert list(FILTERS["select"](ENV, ["upper", "zz"], "filter")) == ["upper"]
    assert list(FILTERS["select"](ENV, [1, 5, 9], ">", 4)) == [5, 9]
    assert isinstance(BoundMethod(str.upper, "a", "upper"), BoundMethod)
