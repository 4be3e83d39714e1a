"""Sandbox escapes: concrete attempts to reach the host Python from a template.

Each attempt asserts an EXACT outcome (the rendered string, or the exception class and a
message fragment), checked by hand against Jinja2 3.1.6's ImmutableSandboxedEnvironment; these
are security properties, so they are literal here rather than computed. Around them:

* no rendered output ever shows a memory address (``0x7f...``): printing the engine's runtime
  objects (loop, macro, namespace, cycler, joiner, bound methods, lazy sequences, globals) is
  address-free, so a template cannot learn the host's memory layout;
* the immutable sandbox (transformers') refuses every list/dict/set mutator when CALLED
  (SecurityError) and prints '' when one is only read; ``Environment(immutable=False)`` allows
  them, exactly as Jinja2's SandboxedEnvironment does;
* no escape attempt modifies the caller's data;
* where Jinja2 renders an escape attempt harmlessly, the output is Jinja2's (computed here).
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

import minijinja_py as mj

from security_support import jinja2_outcome, outcome

# every test runs as a plain render, a provenance render and the tokens path (conftest.py)
pytestmark = pytest.mark.usefixtures("render_mode")

ADDRESS = re.compile(r"0x[0-9a-fA-F]{4,}")


@pytest.fixture(autouse=True)
def _no_disk_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep the persistent parse cache out of these tests (and out of the user's home)."""
    monkeypatch.setenv("MINIJINJA_PY_CACHE", "0")


def data() -> dict:
    """Fresh caller data for every render (never shared between tests)."""
    return {
        "x": "abc",
        "messages": [{"role": "system", "content": "be nice"},
                     {"role": "user", "content": "hi", "tags": ["a", "b"]}],
        "numbers": [3, 1, 2],
        "mapping": {"k": "v", "_private": 1},
    }


def render(source: str, env: Any = None, **extra: Any) -> str:
    env = env if env is not None else mj.chat_environment()
    return env.from_string(source).render(**{**data(), **extra})


def check(source: str, expected: Any, env: Any = None, **extra: Any) -> None:
    """``expected`` is the exact output, or ``(exception class, message fragment)``."""
    if isinstance(expected, str):
        assert render(source, env, **extra) == expected
        return
    error, fragment = expected
    with pytest.raises(error) as info:
        render(source, env, **extra)
    assert fragment in str(info.value.message), info.value.message
    assert info.value.lineno is not None, "runtime errors carry a location"


SEC = mj.SecurityError
RT = mj.TemplateRuntimeError  # UndefinedError or SecurityError: the access cannot succeed

# (id, source, expected)
ESCAPES = [
    # -- dunder attributes of literals -------------------------------------------------------
    ("str-class", "{{ ''.__class__ }}", ""),
    ("str-subclasses", "{{ ''.__class__.__mro__[1].__subclasses__() }}",
     (SEC, "access to attribute '__class__' of 'str' object is unsafe.")),
    ("var-class-base", "{{ x.__class__.__base__ }}",
     (SEC, "access to attribute '__class__' of 'str' object is unsafe.")),
    ("var-class-name", "{{ x.__class__.__name__ }}",
     (SEC, "access to attribute '__class__' of 'str' object is unsafe.")),
    ("tuple-class", "{{ ().__class__ }}", ""),
    ("list-class", "{{ [].__class__ }}", ""),
    ("dict-class", "{{ {}.__class__ }}", ""),
    ("tuple-class-base", "{{ ().__class__.__base__ }}",
     (SEC, "access to attribute '__class__' of 'tuple' object is unsafe.")),
    ("list-class-base", "{{ [].__class__.__base__ }}",
     (SEC, "access to attribute '__class__' of 'list' object is unsafe.")),
    ("dict-class-base", "{{ {}.__class__.__base__ }}",
     (SEC, "access to attribute '__class__' of 'dict' object is unsafe.")),
    ("int-class", "{{ (1).__class__ }}|{{ (1.5).__class__ }}|{{ true.__class__ }}"
                  "|{{ none.__class__ }}", "|||"),
    ("set-class", "{% set c = ''.__class__ %}{{ c.__mro__ }}",
     (SEC, "access to attribute '__class__' of 'str' object is unsafe.")),
    ("dunder-len-call", "{{ x.__len__() }}",
     (SEC, "access to attribute '__len__' of 'str' object is unsafe.")),
    ("dunder-add", "{{ ''.__add__ }}", ""),
    ("dunder-item", "{{ x['__class__'] }}", ""),
    # -- globals: functions and classes --------------------------------------------------------
    ("range-globals", "{{ range.__globals__ }}", ""),
    ("range-globals-item", "{{ range.__globals__['os'] }}",
     (SEC, "access to attribute '__globals__' of 'function' object is unsafe.")),
    ("range-attr-filter", "{{ range|attr('__globals__') }}", ""),
    ("range-call", "{{ range.__call__ }}|{{ range.__self__ }}|{{ range.__module__ }}", "||"),
    ("cycler-init-globals", "{{ cycler.__init__.__globals__ }}",
     (SEC, "access to attribute '__init__'")),
    ("namespace-init", "{{ namespace.__init__ }}", ""),
    ("namespace-init-globals", "{{ namespace.__init__.__globals__ }}",
     (SEC, "access to attribute '__init__'")),
    ("joiner-call", "{{ joiner.__call__ }}", ""),
    ("joiner-call-globals", "{{ joiner.__call__.__globals__ }}",
     (SEC, "access to attribute '__call__'")),
    ("lipsum-globals", "{{ lipsum.__globals__ }}", ""),
    ("lipsum-globals-item", "{{ lipsum.__globals__['os'] }}",
     (SEC, "access to attribute '__globals__'")),
    ("raise-exception-globals", "{{ raise_exception.__globals__ }}", ""),
    ("raise-exception-globals-item", "{{ raise_exception.__globals__['os'] }}",
     (SEC, "access to attribute '__globals__'")),
    ("strftime-globals", "{{ strftime_now.__globals__ }}", ""),
    ("strftime-globals-item", "{{ strftime_now.__globals__['os'] }}",
     (SEC, "access to attribute '__globals__'")),
    ("strftime-closure", "{{ strftime_now.__closure__[0] }}",
     (SEC, "access to attribute '__closure__'")),
    ("dict-subclasses", "{{ dict.__subclasses__() }}",
     (SEC, "access to attribute '__subclasses__'")),
    ("dict-mro-call", "{{ dict.mro() }}", (RT, "'mro'")),
    ("dict-dunder-dict", "{{ dict.__dict__ }}|{{ dict.__init__ }}|{{ dict.__setitem__ }}", "||"),
    ("unknown-globals", "{{ environment }}|{{ context }}|{{ config }}|{{ request }}"
                        "|{{ __builtins__ }}|{{ os }}|{{ sys }}|{{ _ }}", "|||||||"),
    # -- runtime objects -----------------------------------------------------------------------
    ("loop-class", "{% for i in [1] %}{{ loop.__class__ }}{% endfor %}", ""),
    ("loop-class-init", "{% for i in [1] %}{{ loop.__class__.__init__ }}{% endfor %}", ""),
    ("loop-class-mro", "{% for i in [1] %}{{ loop.__class__.__mro__ }}{% endfor %}",
     (SEC, "'__class__'")),
    ("loop-items", "{% for i in [1] %}{{ loop._items }}{% endfor %}", ""),
    ("loop-items-index", "{% for i in [1] %}{{ loop._items[0] }}{% endfor %}",
     (RT, "'_items'")),
    ("loop-recurse", "{% for i in [1] %}{{ loop._recurse }}{{ loop._undefined }}{% endfor %}",
     ""),
    ("loop-method-func", "{% for i in [1] %}{{ loop.changed.__func__ }}"
                         "|{{ loop.cycle.__self__ }}{% endfor %}", "|"),
    ("loop-method-func-globals",
     "{% for i in [1] %}{{ loop.changed.__func__.__globals__ }}{% endfor %}",
     (SEC, "access to attribute '__func__' of 'method' object is unsafe.")),
    ("macro-code", "{% macro m() %}x{% endmacro %}{{ m.__code__ }}", ""),
    ("macro-invoke", "{% macro m() %}x{% endmacro %}{{ m._invoke }}", ""),
    ("macro-invoke-call", "{% macro m() %}x{% endmacro %}{{ m._invoke((), {}) }}",
     (SEC, "access to attribute '_invoke' of 'Macro' object is unsafe.")),
    ("macro-code-consts", "{% macro m() %}x{% endmacro %}{{ m.__code__.co_consts }}",
     (RT, "'__code__'")),
    ("caller-internals", "{% macro m() %}{{ caller._invoke }}|{{ caller.__code__ }}{% endmacro %}"
                         "{% call m() %}x{% endcall %}", "|"),
    ("cycler-self", "{{ cycler(1).next.__self__ }}|{{ joiner().__call__ }}", "|"),
    ("bound-method-internals", "{{ ''.strip.function }}|{{ ''.strip.owner }}"
                               "|{{ ''.strip.__self__ }}", "||"),
    ("bound-method-internals-deep", "{{ ''.strip.function.__globals__ }}", (RT, "function")),
    ("lazy-internals", "{{ ([1]|map('string'))._iterator }}"
                       "|{{ ([1]|map('string'))._label }}", "|"),
    ("lazy-gi-frame", "{{ ([1]|map('string')).gi_frame }}|{{ ([1]|map('string')).gi_code }}",
     "|"),
    ("lazy-gi-frame-globals", "{{ ([1]|map('string')).gi_frame.f_globals }}",
     (RT, "gi_frame")),
    # -- string formatting ---------------------------------------------------------------------
    ("format-mro", "{{ '{0.__class__.__mro__}'.format('') }}",
     (SEC, "access to attribute '__class__' of 'str' object is unsafe.")),
    ("format-class", "{{ '{0.__class__}'.format('') }}", ""),
    ("format-globals", "{{ '{0.__globals__[os]}'.format(range) }}",
     (SEC, "access to attribute '__globals__' of 'function' object is unsafe.")),
    ("format-self", "{{ '{0.__self__}'.format(''.strip) }}", ""),
    ("format-builtins-item", "{{ '{0[__builtins__]}'.format({}) }}", ""),
    ("format-map-class", "{{ '{x.__class__}'.format_map({'x': ''}) }}", ""),
    ("format-map-mro", "{{ '{x.__class__.__mro__}'.format_map({'x': ''}) }}",
     (SEC, "access to attribute '__class__' of 'str' object is unsafe.")),
    ("format-map-positional", "{{ '{0.__class__}'.format_map({'0': ''}) }}",
     (RT, "tuple index out of range")),
    ("printf-filter-class", "{{ '%s'|format(''.__class__) }}", ""),
    ("printf-filter-mro", "{{ '%s'|format(x.__class__.__mro__) }}",
     (SEC, "access to attribute '__class__' of 'str' object is unsafe.")),
    ("printf-filter-mapping", "{{ '%(a)s'|format(a=x.__class__.__base__) }}",
     (SEC, "access to attribute '__class__' of 'str' object is unsafe.")),
    ("printf-operator-class", "{{ '%s' % ''.__class__ }}", ""),
    ("printf-operator-mro", "{{ '%s' % x.__class__.__mro__ }}",
     (SEC, "access to attribute '__class__' of 'str' object is unsafe.")),
    # -- filters that take attribute names -----------------------------------------------------
    ("attr-filter", "{{ ''|attr('__class__') }}", ""),
    ("attr-filter-mro", "{{ (''|attr('__class__')).__mro__ }}",
     (SEC, "access to attribute '__class__' of 'str' object is unsafe.")),
    ("attr-filter-call", "{{ (x|attr('__len__'))() }}",
     (SEC, "access to attribute '__len__' of 'str' object is unsafe.")),
    ("attr-filter-method", "{{ ('abc'|attr('upper'))() }}", "ABC"),
    ("map-attribute", "{{ ['a']|map(attribute='__class__')|list }}", "[Undefined]"),
    ("map-attribute-deep", "{{ ['a']|map(attribute='__class__.__mro__')|list }}",
     (SEC, "access to attribute '__class__' of 'str' object is unsafe.")),
    ("map-attr-filter", "{{ ['a']|map('attr', '__class__')|list }}", "[Undefined]"),
    ("selectattr", "{{ ['a']|selectattr('__class__')|list }}", "[]"),
    ("rejectattr", "{{ ['a']|rejectattr('__class__')|list }}", "['a']"),
    ("sort-attribute", "{{ ['a', 'b']|sort(attribute='__class__') }}", "['a', 'b']"),
    ("groupby", "{{ ['a', 'b']|groupby('__class__') }}",
     (SEC, "access to attribute '__class__' of 'str' object is unsafe.")),
    ("sum-attribute", "{{ ['a']|sum(attribute='__class__.__mro__') }}",
     (SEC, "access to attribute '__class__' of 'str' object is unsafe.")),
    # -- tojson of runtime objects: a TypeError, never their internals -------------------------
    ("tojson-range", "{{ range(3)|tojson }}", (RT, "is not JSON serializable")),
    ("tojson-loop", "{% for i in [1] %}{{ loop|tojson }}{% endfor %}",
     (RT, "is not JSON serializable")),
    ("tojson-macro", "{% macro m() %}{% endmacro %}{{ m|tojson }}",
     (RT, "is not JSON serializable")),
    ("tojson-namespace", "{{ namespace(a=1)|tojson }}", (RT, "is not JSON serializable")),
    ("tojson-cycler", "{{ cycler(1)|tojson }}", (RT, "is not JSON serializable")),
    ("tojson-joiner", "{{ joiner()|tojson }}", (RT, "is not JSON serializable")),
    ("tojson-lazy", "{{ [1]|map('string')|tojson }}", (RT, "is not JSON serializable")),
    ("tojson-undefined", "{{ missing_name|tojson }}", (RT, "is not JSON serializable")),
    ("tojson-dict-global", "{{ dict|tojson }}", (RT, "is not JSON serializable")),
    ("tojson-global-function", "{{ [range, lipsum]|tojson }}", (RT, "is not JSON serializable")),
    ("tojson-bound-method", "{{ ''.strip|tojson }}", (RT, "is not JSON serializable")),
    ("tojson-in-dict", "{% for i in [1] %}{{ {'a': [loop]}|tojson }}{% endfor %}",
     (RT, "is not JSON serializable")),
    # -- syntax that does not exist -------------------------------------------------------------
    ("generator-expression", "{{ (x for x in messages) }}", (mj.TemplateSyntaxError, "")),
    ("list-comprehension", "{{ [x for x in messages] }}", (mj.TemplateSyntaxError, "")),
    ("lambda", "{{ (lambda: 1)() }}", (mj.TemplateSyntaxError, "")),
    ("walrus", "{{ (y := 1) }}", (mj.TemplateSyntaxError, "")),
    ("import", "{% import 'os' as os %}", (mj.TemplateError, "")),
    # -- bytes are not template values: str.encode is refused (a deviation from Jinja2) ----------
    ("encode-decode-call", "{{ ''.encode().decode() }}|{{ 'ab'.encode()|length }}",
     (SEC, "str.encode is not available")),
    ("encode-decode-self", "{{ 'a'.encode().decode.__self__ }}",
     (SEC, "str.encode is not available")),
    ("encode-codec", "{{ 'a'.encode('punycode') }}", (SEC, "str.encode is not available")),
    # -- namespaces and private names --------------------------------------------------------
    ("namespace-dunder-kwarg", "{{ namespace(__init__=1) }}", (SEC, "'__init__'")),
    ("namespace-private-set", "{% set ns = namespace() %}{% set ns._x = 1 %}{{ ns._x }}",
     (SEC, "'_x'")),
    ("namespace-private-dict", "{{ namespace({'_x': 1}) }}", (SEC, "'_x'")),
    ("dict-private-key-item", "{{ {'_a': 1}['_a'] }}", "1"),
    ("dict-private-key-attr", "{{ {'_a': 1}._a }}", "1"),
    ("data-private-key", "{{ mapping._private }}|{{ mapping['_private'] }}", "1|1"),
    # -- undefined objects -----------------------------------------------------------------------
    ("undefined-hint", "{{ missing_name._undefined_hint }}", (mj.UndefinedError, "")),
    ("undefined-call", "{{ missing_name() }}", (mj.UndefinedError, "'missing_name' is undefined")),
]


@pytest.mark.parametrize("source,expected", [e[1:] for e in ESCAPES], ids=[e[0] for e in ESCAPES])
def test_escape_attempt(source: str, expected: Any) -> None:
    check(source, expected)


@pytest.mark.parametrize("source", [e[1] for e in ESCAPES], ids=[e[0] for e in ESCAPES])
def test_escape_attempt_never_modifies_caller_data(source: str) -> None:
    given = data()
    before = copy.deepcopy(given)
    try:
        text = mj.chat_environment().from_string(source).render(**given)
    except mj.TemplateError as exc:
        assert not ADDRESS.search(str(exc.message)), exc.message
    else:
        assert not ADDRESS.search(text), text
    assert given == before


# -- where Jinja2 renders an escape attempt harmlessly, the output is Jinja2's ----------------
# (These do not involve `namespace`/`dict`, whose transformers versions differ from Jinja2's.)
SAME_AS_JINJA2 = [
    "{{ {'__class__': 1}.__class__ }}",
    "{{ {'__class__': 1}['__class__'] }}",
    "{{ {'mro': 2}.mro }}|{{ {'items': 1}['items'] }}",
    "{{ 'a'|attr('__class__')|attr('__mro__') }}",
    "{{ missing_name.__class__ }}",
    "{{ self._TemplateReference__context }}",
    "{{ self.__class__ }}",
    "{{ self }}",
    "{{ x|attr('__len__') }}",
    "{{ (1).real }}|{{ (1).denominator }}|{{ (1.5).imag }}",
    "{{ ['a', 'b']|sort(attribute='__class__')|first }}",
]


def _same_outcome(source: str, **extra: Any) -> None:
    reference = jinja2_outcome(source, {**data(), **extra})
    try:
        ours: tuple = ("ok", render(source, **extra))
    except mj.TemplateError as exc:
        ours = ("error", type(exc).__name__, exc.message)
    if reference[0] == "ok":
        assert ours == reference
    else:
        assert ours[0] == "error", f"Jinja2 raised {reference[1]}, we rendered {ours[1]!r}"


@pytest.mark.parametrize("source", SAME_AS_JINJA2)
def test_harmless_escape_attempts_render_like_jinja2(source: str) -> None:
    _same_outcome(source)


def test_host_generator_internals_are_refused() -> None:
    generator = (i for i in [1, 2])
    env = mj.chat_environment()
    assert env.from_string("{{ g.gi_frame }}|{{ g.gi_code }}").render(g=generator) == "|"
    with pytest.raises(mj.SecurityError) as info:
        env.from_string("{{ g.gi_frame.f_globals }}").render(g=generator)
    assert "'gi_frame'" in info.value.message


def test_host_function_internals_are_refused() -> None:
    def helper(a: int) -> int:
        return a + 1

    env = mj.chat_environment()
    assert env.from_string("{{ f(1) }}|{{ f.__globals__ }}|{{ f.__code__ }}").render(
        f=helper) == "2||"
    for source in ("{{ f.__globals__['os'] }}", "{{ f.__code__.co_code }}",
                   "{{ f.__closure__[0] }}", "{{ f.__builtins__ }}{{ f.__globals__.x }}"):
        with pytest.raises(mj.SecurityError):
            env.from_string(source).render(f=helper)


def test_host_object_private_attributes_are_refused() -> None:
    class Host:
        visible = 1

        def __init__(self) -> None:
            self._secret = "s3cret"

        def method(self) -> int:
            return 3

    env = mj.chat_environment()
    assert env.from_string("{{ h.visible }}|{{ h.method() }}|{{ h._secret }}|{{ h.__dict__ }}"
                           ).render(h=Host()) == "1|3||"
    with pytest.raises(mj.SecurityError):
        env.from_string("{{ h.__dict__['_secret'] }}").render(h=Host())
    with pytest.raises(mj.SecurityError):
        env.from_string("{{ h.method.__func__ }}{{ h.method.__func__.__globals__ }}").render(
            h=Host())


@pytest.mark.parametrize("source,named", [
    ("{% set ns = namespace(_x=1) %}{{ ns._x }}", True),
    ("{% set ns = namespace() %}{% set ns._y = 2 %}{{ ns._y }}", True),
    ("{% set ns = namespace(a=1) %}{{ ns._attrs }}{{ ns.__class__ }}", False),
])
def test_a_namespaces_private_names_are_never_read(source: str, named: bool) -> None:
    # the chat environment refuses to give a namespace a private name, as Jinja2 does...
    expected = ("error", "SecurityError") if named else ("ok", "")
    assert jinja2_outcome(source) == expected
    result = outcome(source)
    assert (result[0], getattr(result[1], "__name__", result[1])) == expected
    # ... an Environment lets it hold one, and a template never reads it back
    assert mj.Environment().from_string(source).render() == ""


# -- the `dict` global cannot reach dict's methods on the caller's data --------------------------
@pytest.mark.parametrize("source", [
    "{{ dict.update(messages[0], {'role': 'hacked'}) }}",
    "{{ dict.pop(messages[0], 'role') }}",
    "{{ dict.popitem(messages[0]) }}",
    "{{ dict.clear(messages[0]) }}",
    "{{ dict.setdefault(messages[0], 'z', 1) }}",
    "{{ dict.__setitem__(messages[0], 'role', 'x') }}",
    "{{ dict.__init__(messages[0], role='x') }}",
])
def test_dict_type_methods_cannot_mutate_caller_data(source: str) -> None:
    given = data()
    before = copy.deepcopy(given)
    with pytest.raises(mj.TemplateRuntimeError):
        mj.chat_environment().from_string(source).render(**given)
    assert given == before


def test_dict_global_still_builds_dicts() -> None:
    assert render("{{ dict(a=1) }}|{{ dict.fromkeys('ab') }}|{{ dict(mapping, k='w') }}"
                  "|{{ mapping.k }}") == ("{'a': 1}|{'a': None, 'b': None}"
                                          "|{'k': 'w', '_private': 1}|v")


# -- printing runtime objects never shows a memory address ---------------------------------------
PRINTED = [
    "{% for i in [1] %}{{ loop }}{% endfor %}",
    "{% for i in [1] %}{{ [loop] }}|{{ loop|string }}|{{ loop|pprint }}{% endfor %}",
    "{% for i in [1] %}{{ loop.cycle }}|{{ loop.changed }}{% endfor %}",
    "{% for i in [1] recursive %}{{ loop }}{% endfor %}",
    "{% macro m() %}{% endmacro %}{{ m }}|{{ [m] }}|{{ m|pprint }}",
    "{% macro m() %}{{ caller }}|{{ [caller] }}{% endmacro %}{% call m() %}x{% endcall %}",
    "{% set ns = namespace(a=1) %}{{ ns }}|{{ [ns] }}",
    "{% set c = cycler(1, 2) %}{{ c }}|{{ c.next }}|{{ c.reset }}|{{ [c] }}",
    "{% set j = joiner() %}{{ j }}|{{ [j] }}",
    "{{ ''.strip }}|{{ [''.strip] }}|{{ 'abc'|attr('upper') }}",
    "{{ [].copy }}|{{ {}.items }}|{{ (1).bit_length }}|{{ 1.5.is_integer }}|{{ ''.encode }}",
    "{{ 1.5.hex }}|{{ (1).to_bytes }}",
    "{{ [1]|map('string') }}|{{ [[1]|map('string')] }}",
    "{{ [1]|select }}|{{ [1]|reject }}|{{ [{'a': 1}]|selectattr('a') }}"
    "|{{ [{'a': 1}]|rejectattr('a') }}",
    "{{ [1, 2]|batch(1) }}|{{ [1, 2]|slice(1) }}|{{ [1]|unique }}|{{ [1]|reverse }}",
    "{{ {'a': 1}|items }}|{{ 'ab'|reverse }}",
    "{{ range(3) }}|{{ [range(3)] }}",
    "{{ missing_name }}|{{ [missing_name] }}|{{ missing_name|pprint }}",
    "{{ dict }}|{{ [dict] }}",
    "{{ range }}|{{ lipsum }}|{{ raise_exception }}|{{ strftime_now }}",
    "{{ cycler }}|{{ joiner }}|{{ namespace }}",
    "{{ [range, lipsum, raise_exception, strftime_now, cycler, joiner, namespace, dict] }}",
    "{{ '%s'|format(range) }}|{{ '%r'|format(lipsum) }}|{{ '{}'.format(raise_exception) }}"
    "|{{ '{!r}'.format(strftime_now) }}|{{ '%s' % cycler }}",
    "{{ range|pprint }}|{{ range|string }}|{{ lipsum|e }}",
    "{{ self }}",
    "{{ {'f': range, 'g': ''.strip}|pprint }}",
]


@pytest.mark.parametrize("source", PRINTED)
def test_printing_runtime_objects_shows_no_address(source: str) -> None:
    text = render(source)
    assert not ADDRESS.search(text), text


# -- mutators in the immutable and the mutable sandbox --------------------------------------------
MUTATOR_CALLS = [
    ("list", "[2, 1]", "append(3)"), ("list", "[2, 1]", "pop()"),
    ("list", "[2, 1]", "insert(0, 9)"), ("list", "[2, 1]", "extend([3])"),
    ("list", "[2, 1]", "remove(1)"), ("list", "[2, 1]", "sort()"),
    ("list", "[2, 1]", "reverse()"), ("list", "[2, 1]", "clear()"),
    ("dict", "{'a': 1}", "update({'b': 2})"), ("dict", "{'a': 1}", "pop('a')"),
    ("dict", "{'a': 1}", "popitem()"), ("dict", "{'a': 1}", "setdefault('b', 2)"),
    ("dict", "{'a': 1}", "clear()"),
    ("set", None, "add(3)"), ("set", None, "discard(1)"), ("set", None, "pop()"),
    ("set", None, "remove(1)"), ("set", None, "clear()"), ("set", None, "update([3])"),
]


def _mutator_case(literal: Any, call: str) -> tuple:
    """(source, data) calling the mutator on a template literal or on caller data (sets)."""
    if literal is None:
        return "{{ x.%s }}|{{ x|sort }}" % call, {"x": {1, 2}}
    return "{%% set x = %s %%}{{ x.%s }}|{{ x }}" % (literal, call), {}


@pytest.mark.parametrize("kind,literal,call", MUTATOR_CALLS,
                         ids=[f"{k}.{c}" for k, _, c in MUTATOR_CALLS])
def test_immutable_sandbox_refuses_mutator_calls(kind: str, literal: Any, call: str) -> None:
    name = call.split("(")[0]
    source, extra = _mutator_case(literal, call)
    given = copy.deepcopy(extra)
    with pytest.raises(mj.SecurityError) as info:
        mj.chat_environment().from_string(source).render(**given)
    assert info.value.message == (
        f"access to attribute '{name}' of '{kind}' object is unsafe.")
    assert given == extra


@pytest.mark.parametrize("kind,literal,call", MUTATOR_CALLS,
                         ids=[f"{k}.{c}" for k, _, c in MUTATOR_CALLS])
def test_immutable_sandbox_prints_mutators_as_empty(kind: str, literal: Any, call: str) -> None:
    name = call.split("(")[0]
    value = {"list": "[2, 1]", "dict": "{'a': 1}"}.get(kind)
    if value is None:
        source, extra = "{{ x.%s }}|{{ x|attr('%s') }}" % (name, name), {"x": {1, 2}}
    else:
        source, extra = ("{%% set x = %s %%}{{ x.%s }}|{{ x|attr('%s') }}"
                         % (value, name, name)), {}
    assert mj.chat_environment().from_string(source).render(**extra) == "|"


@pytest.mark.parametrize("kind,literal,call", MUTATOR_CALLS,
                         ids=[f"{k}.{c}" for k, _, c in MUTATOR_CALLS])
def test_mutable_environment_allows_mutators(kind: str, literal: Any, call: str) -> None:
    from jinja2.sandbox import SandboxedEnvironment

    source, extra = _mutator_case(literal, call)
    expected = SandboxedEnvironment().from_string(source).render(**copy.deepcopy(extra))
    got = mj.Environment(immutable=False).from_string(source).render(**copy.deepcopy(extra))
    assert got == expected


@pytest.mark.parametrize("source", [
    "{% set f = messages.append %}{{ f(1) }}",
    "{{ (messages|attr('append'))(1) }}",
    "{% set ns = namespace(l=messages) %}{{ ns.l.append(1) }}",
    "{{ messages[1].tags.append('c') }}",
    "{{ messages[0].update({'role': 'x'}) }}",
    "{{ mapping.setdefault('z', 1) }}",
    "{{ mapping.pop('k') }}",
    "{% for m in messages %}{{ m.clear() }}{% endfor %}",
    "{{ messages|map(attribute='clear')|map('string')|join }}{{ messages[0].clear() }}",
    "{{ '{0.append}'.format(messages) }}{{ messages.append(1) }}",
])
def test_immutable_sandbox_mutators_reached_indirectly(source: str) -> None:
    given = data()
    before = copy.deepcopy(given)
    with pytest.raises(mj.SecurityError):
        mj.chat_environment().from_string(source).render(**given)
    assert given == before


def test_filters_do_not_modify_caller_data() -> None:
    given = data()
    before = copy.deepcopy(given)
    source = ("{{ numbers|sort }}{{ numbers|reverse|list }}{{ numbers|sort(reverse=true) }}"
              "{{ messages|sort(attribute='role') }}{{ mapping|dictsort }}{{ numbers|unique|list }}"
              "{{ messages|groupby('role') }}{{ numbers|batch(2, 0)|list }}"
              "{{ numbers|slice(2, 0)|list }}{{ messages|map(attribute='role')|list }}"
              "{{ mapping|items|list }}"
              "{% set ns = namespace(m=mapping) %}{% set ns.m = 1 %}{{ mapping }}"
              "{% set copy = mapping.copy() %}{{ copy }}{{ dict(mapping, k=2) }}"
              "{% for m in messages %}{% set m = 1 %}{% endfor %}{{ messages|tojson }}")
    mj.chat_environment().from_string(source).render(**given)
    assert given == before


# -- callables the host marks as unsafe (alters_data / unsafe_callable) ---------------------------
# Jinja2's sandbox refuses to call anything whose ``alters_data`` or ``unsafe_callable`` attribute
# is true (Django's convention for methods such as ``delete``), however the template reached it:
# a function, a bound method, a host object's method read as an attribute, an item or through
# ``attr``, a class or static method, a callable object. The method wrapper of host methods
# once hid the marks, so ``{{ o.delete() }}`` ran the method.
MARKS = ("alters_data", "unsafe_callable")

# (id, source): each calls the callable named ``target`` of the data made by _marked_data
MARKED_CALLS = [
    ("function", "{{ function() }}"),
    ("bound-method", "{{ bound() }}"),
    ("host-method", "{{ o.target() }}"),
    ("host-method-item", "{{ o['target']() }}"),
    ("host-method-attr-filter", "{{ (o|attr('target'))() }}"),
    ("host-method-set", "{% set m = o.target %}{{ m() }}"),
    ("host-method-in-loop", "{% for m in [o.target] %}{{ m() }}{% endfor %}"),
    ("classmethod", "{{ o.by_class() }}"),
    ("staticmethod", "{{ o.by_static() }}"),
    ("callable-object", "{{ callable_object() }}"),
    ("dict-subclass-method", "{{ mapping.target() }}"),
    ("tuple-subclass-method", "{{ pair.target() }}"),
]


def _marked_data(mark: str, marked: bool) -> tuple:
    """(data, calls): host callables of every shape, each marked with ``mark`` when ``marked``;
    ``calls`` records each call that reached the host."""
    calls: list = []

    def flagged(function: Any) -> Any:
        if marked:
            setattr(function, mark, True)
        return function

    @flagged
    def function() -> str:
        calls.append("function")
        return "DONE"

    class Host:
        @flagged
        def target(self) -> str:
            calls.append("target")
            return "DONE"

        @classmethod
        @flagged
        def by_class(cls) -> str:
            calls.append("by_class")
            return "DONE"

        @staticmethod
        @flagged
        def by_static() -> str:
            calls.append("by_static")
            return "DONE"

    class CallableObject:
        def __call__(self) -> str:
            calls.append("callable_object")
            return "DONE"

    class Mapping(dict):
        target = Host.target

    class Pair(tuple):
        target = Host.target

    callable_object = CallableObject()
    if marked:
        setattr(callable_object, mark, True)
    return ({"function": function, "bound": Host().target, "o": Host(),
             "callable_object": callable_object, "mapping": Mapping(a=1),
             "pair": Pair((1, 2))}, calls)


@pytest.mark.parametrize("mark", MARKS)
@pytest.mark.parametrize("source", [c[1] for c in MARKED_CALLS], ids=[c[0] for c in MARKED_CALLS])
def test_marked_host_callables_are_refused_as_jinja2_refuses_them(mark: str, source: str) -> None:
    from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError

    reference, reference_calls = _marked_data(mark, marked=True)
    with pytest.raises(SecurityError, match="is not safely callable"):
        ImmutableSandboxedEnvironment().from_string(source).render(**reference)
    assert reference_calls == []
    given, calls = _marked_data(mark, marked=True)
    with pytest.raises(mj.SecurityError) as info:
        mj.chat_environment().from_string(source).render(**given)
    assert info.value.message.endswith(" is not safely callable"), info.value.message
    assert info.value.lineno == 1
    assert calls == [], "the host's marked callable ran"


@pytest.mark.parametrize("source", [c[1] for c in MARKED_CALLS], ids=[c[0] for c in MARKED_CALLS])
def test_unmarked_host_callables_are_called_as_jinja2_calls_them(source: str) -> None:
    """The same shapes unmarked: called, in both engines (each reaches the call the marks stop)."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    reference, reference_calls = _marked_data("alters_data", marked=False)
    expected = ImmutableSandboxedEnvironment().from_string(source).render(**reference)
    given, calls = _marked_data("alters_data", marked=False)
    assert mj.chat_environment().from_string(source).render(**given) == expected == "DONE"
    assert calls == reference_calls and len(calls) == 1


@pytest.mark.parametrize("mark", MARKS)
def test_marked_host_methods_print_without_being_called(mark: str) -> None:
    """Only calling is refused: a template may still print or pass a marked method, as in Jinja2."""
    given, calls = _marked_data(mark, marked=True)
    text = mj.chat_environment().from_string(
        "{{ o.target }}|{{ o.target is callable }}|{{ mapping.target is defined }}").render(**given)
    assert text == "<built-in method target of Host object>|True|True"
    assert calls == []


# -- host objects that lead to the interpreter: classes, code, frames, tracebacks, modules --------
def _interpreter_objects() -> dict:
    import sys

    class Host:
        module = sys  # an attribute holding a module

    def function() -> int:
        return 1

    try:
        raise ValueError("x")
    except ValueError as exc:
        traceback = exc.__traceback__
    return {"cls": Host, "code": function.__code__, "frame": sys._getframe(),
            "traceback": traceback, "o": Host()}


# (source, expected: output, or (error class, message)); all as in Jinja2's sandbox but for the
# module: Jinja2 hands a module out (`o.module.path` reads sys.path), this sandbox never does
INTERPRETER_OBJECTS = [
    ("{{ cls.mro }}", ""),
    ("{{ cls.mro() }}", (SEC, "access to attribute 'mro' of 'type' object is unsafe.")),
    ("{{ code.co_code }}|{{ code.co_name }}|{{ code.co_consts }}", "||"),
    ("{{ code.co_consts[0] }}", (SEC, "access to attribute 'co_consts' of 'code' object is unsafe.")),
    ("{{ frame.f_globals }}|{{ frame.f_lineno }}|{{ frame.f_back }}", "||"),
    ("{{ frame.f_globals['os'] }}", (SEC, "access to attribute 'f_globals' of 'frame' object is unsafe.")),
    ("{{ traceback.tb_frame }}|{{ traceback.tb_lineno }}", "|"),
    ("{{ traceback.tb_frame.f_globals }}",
     (SEC, "access to attribute 'tb_frame' of 'traceback' object is unsafe.")),
    ("{{ o.module }}", ""),
    ("{{ o.module.path }}", (SEC, "access to attribute 'module' of 'Host' object is unsafe.")),
    ("{{ missing_name.__class__.__mro__ }}",
     (SEC, "access to attribute '__class__' of 'Undefined' object is unsafe.")),
    ("{% for i in [1] %}{{ loop._length }}{% endfor %}", ""),
    ("{% for i in [1] %}{{ loop._length.x }}{% endfor %}",
     (SEC, "access to attribute '_length' of 'LoopContext' object is unsafe.")),
    ("{% set c = cycler('a') %}{{ c._items.x }}",
     (SEC, "access to attribute '_items' of 'Cycler' object is unsafe.")),
    ("{{ (258).to_bytes(2, 'big') }}",
     (SEC, "int.to_bytes is not available: bytes are not template values")),
]


@pytest.mark.parametrize("source,expected", INTERPRETER_OBJECTS)
def test_interpreter_objects_are_out_of_reach(source: str, expected: Any) -> None:
    if isinstance(expected, str):
        assert mj.chat_environment().from_string(source).render(**_interpreter_objects()) == \
            expected
        return
    error, message = expected
    with pytest.raises(error) as info:
        mj.chat_environment().from_string(source).render(**_interpreter_objects())
    assert info.value.message == message


# -- the host's subclasses of the plain types: Jinja2's rules for what they add -----------------------
def _host_subclasses() -> dict:
    import collections
    import sys

    class Totals(dict):
        _hidden = 5
        module = sys

        def total(self) -> int:
            return sum(self.values())

    return {"p": collections.namedtuple("Point", "x y")(1, 2), "d": Totals(a=1, b=2)}


@pytest.mark.parametrize("source,expected", [
    ("{{ p.x }}|{{ p.count(1) }}|{{ p._fields }}|{{ p._asdict }}", "1|1||"),
    ("{{ p._replace(x=5) }}", (SEC, "access to attribute '_replace' of 'Point' object is unsafe.")),
    ("{{ d.total() }}|{{ d._hidden }}|{{ d.a }}", "3||1"),
    ("{{ d._hidden.real }}", (SEC, "access to attribute '_hidden' of 'Totals' object is unsafe.")),
])
def test_host_subclasses_of_plain_types_follow_jinja2s_rules(source: str, expected: Any) -> None:
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    try:
        reference: Any = ImmutableSandboxedEnvironment().from_string(source).render(
            **_host_subclasses())
    except Exception as exc:  # noqa: BLE001 - compared below
        reference = (type(exc).__name__, str(exc))
    if isinstance(expected, str):
        assert reference == expected
        assert mj.chat_environment().from_string(source).render(**_host_subclasses()) == expected
        return
    assert reference == (expected[0].__name__, expected[1])
    with pytest.raises(expected[0]) as info:
        mj.chat_environment().from_string(source).render(**_host_subclasses())
    assert info.value.message == expected[1]


def test_what_host_subclasses_add_is_wrapped_as_any_host_objects() -> None:
    """A method a host's subclass adds prints without an address, as any host method; an
    attribute holding a module is out of reach (Jinja2 prints both as they are)."""
    assert mj.chat_environment().from_string("{{ d.total }}|{{ d.module }}").render(
        **_host_subclasses()) == "<built-in method total of Totals object>|"
