"""Expressions and loops that codegen.py writes out inline behave exactly like the closures.

Covered here: ``loop.*`` attributes read directly (sandbox.DIRECT_ATTRIBUTES), comparisons
and ``-``/``%``/``//`` of numbers computed inline, ``+`` chains of strings as expressions,
filters, ``set`` statements, and loops whose bodies assign (generated as a whole, charging
each iteration as it starts). For each template: the output (or the error's class, message
and line) equals Jinja2's, the closures' and the generated code's; and the step budget is
the same on both paths: the smallest ``max_steps`` a render fits in is the same number.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Tuple

import pytest

import minijinja_py as mj
from minijinja_py.compiler import closures as compiler

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "conformance"))
import reference_jinja2  # noqa: E402  # the Jinja2 reference (a test dependency)

MESSAGES = [{"role": "system", "content": "  Be brief.  "}, {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello", "n": 3},
            {"role": "user", "content": None, "n": None}, {"role": "tool", "content": 7}]
DATA: Dict[str, Any] = {"messages": MESSAGES, "bos_token": "<s>", "offset": 1, "zero": 0,
                        "big": 2 ** 1100, "items": [3, 1.5, True, None, "x", [1], -4]}

CASES = [
    # loop attributes, read directly; a `loop` that is not a LoopContext takes the sandbox path
    "{% for m in messages %}{{ loop.index0 }}{{ loop.index }}{{ loop.first }}{{ loop.last }}"
    "{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.length }}{{ loop.depth }}{{ loop.depth0 }}|"
    "{% endfor %}",
    "{% macro m(loop) %}{{ loop.index0 }}{{ loop.length }}{% endmacro %}"
    "{% for x in messages %}{{ m({'index0': x.role}) }}{{ m(x) }}{% endfor %}",
    "{% for x in messages %}{% for y in [1, 2] %}{{ loop.index0 }}{{ loop.depth }}{% endfor %}"
    "{% endfor %}",
    "{% for m in messages %}{{ loop.previtem.role }}|{{ loop.nextitem.role }}|"
    "{{ loop.nextitem is defined }}{% if loop.nextitem and loop.nextitem.role == 'user' %}u"
    "{% endif %}{% endfor %}",
    "{% for m in messages %}{{ loop.previtem.role.x }}{% endfor %}",
    # comparisons: numbers inline, everything else through the closure (pricing, errors)
    "{% for m in messages %}{% if (m.role == 'user') != (loop.index0 % 2 == offset) %}x"
    "{% endif %}{{ loop.index0 < 2 }}{{ loop.index0 >= offset }}{{ m.n == none }}"
    "{{ m.n != 3 }}{% endfor %}",
    "{% for i in items %}{{ i == 1.5 }}{{ i != true }}{{ i == none }}{% endfor %}",
    # a comparison as an `if`'s condition: numbers give their bool, the closure's result is
    # tested (a str compared, an undefined operand, a list, a zero)
    "{% for m in messages %}{% if (m.role == 'user') != (loop.index0 % 2 == 0) %}a{% endif %}"
    "{% if m.content != 'Hi' %}b{% endif %}{% if m.n == 3 %}c{% endif %}"
    "{% if loop.index0 != zero %}d{% endif %}{% if [m.n] == [3] %}e{% endif %}{% endfor %}",
    "{% for i in items %}{% if i != none %}{{ i }}{% endif %}{% if i >= 1 %}+{% endif %}"
    "{% endfor %}",  # "x" >= 1: Jinja2's TypeError, located
    "{% for m in messages %}{% if m.missing == zero %}u{% endif %}{% endfor %}",
    "{% for i in items %}{% if i is number %}{{ i < 2 }}{{ i <= 1.5 }}{{ i > -4 }}"
    "{% endif %}{% endfor %}",
    "{% for i in items %}{{ i < 2 }}{% endfor %}",  # None < 2: Jinja2's TypeError
    "{% for m in messages %}{{ m.role < 'u' }}{{ m.content > m.role }}{% endfor %}",
    # arithmetic: ints inline; floats, big ints, strings, zero divisors through the closure
    "{% for m in messages %}{{ loop.index0 - 1 }}{{ loop.index0 % 3 }}{{ loop.index0 // 2 }}"
    "{{ loop.length - loop.index }}{{ loop.index0 % 2.5 }}{% endfor %}",
    "{% for m in messages %}{{ (big - loop.index0) % 1000 }}{{ big // (big - 1) }}"
    "{% endfor %}",
    "{% for m in messages %}{{ 10 // (loop.index0 - 2) }}{% endfor %}",
    # namespace attributes set: the engine's namespaces directly, anything else refused or
    # checked by the general path (tuples nest: their depth is bounded)
    "{% set ns = namespace(last='', count=0, t=none) %}{% for m in messages %}"
    "{% set ns.last = m.role %}{% set ns.count = ns.count + 1 %}{% set ns.t = (m.role, 1) %}"
    "{% endfor %}{{ ns.last }}{{ ns.count }}{{ ns.t }}",
    "{% set ns = namespace(x=1) %}{% for m in messages %}{% set ns._x = 1 %}{% endfor %}",
    "{% set ns = 5 %}{% for m in messages %}{% set ns.x = 1 %}{% endfor %}",
    "{% for m in messages %}{% set nope.x = 1 %}{% endfor %}",
    "{% set ns = namespace(v=0) %}{% macro f() %}{% set ns.v = ns.v + 1 %}{% endmacro %}"
    "{% for m in messages %}{{ f() }}{% endfor %}{{ ns.v }}",
    # inline if-expressions: the test as an `if` tests it, one side evaluated
    "{% for m in messages %}{{ m.n if m.n is defined else 'none' }}|{{ (m.role if loop.first) }}|"
    "{{ m.x if m.x else (m.content | trim if m.content is string else m.content) }}|"
    "{{ ('a' if m.n) ~ 'b' }}{% endfor %}",
    "{% for m in messages %}{{ (m.role if m.n == 3).upper() }}{% endfor %}",
    # `~` with constant parts: their lengths known, the rest made text in turn
    "{% for m in messages %}{{ '<|' ~ m.role ~ '|>' ~ loop.index ~ '' ~ m.content ~ 'x' * 20 }}"
    "{% set t = 'a' ~ m.n %}{{ t }}{% endfor %}",
    # constant int keys: lists holding the index and dicts holding the key read directly
    "{% for m in messages %}{{ messages[-1].role }}{{ messages[0].role }}{{ items[6] }}"
    "{{ items[-7] }}{{ m.role[0] }}{{ m.role[-1] }}{{ {1: 'one'}[1] }}{{ [m][0].role }}"
    "{% endfor %}",
    "{% for m in messages %}{{ items[7] }}{{ items[-8] }}{{ messages[9] is defined }}"
    "{{ m[0] }}{{ {2: 'x'}[1] }}{% endfor %}",
    "{% for m in messages %}{{ m.n[0] }}{% endfor %}",
    # a small int constant on the right: the type check of the left operand only
    "{% for m in messages %}{{ loop.index0 % -2 }}{{ big % 7 }}{{ big // 3 % 10 }}"
    "{{ (big - 1) % 1000 }}{{ m.n % 2 }}{{ (loop.index0 - 1) // 2 }}{% endfor %}",
    "{% for m in messages %}{{ items[loop.index0] % 2 }}{% endfor %}",
    "{% for m in messages %}{{ 10 % (loop.index0 - 2) }}{% endfor %}",
    "{% for m in messages %}{{ '%s-%s' % (m.role, loop.index) }}{% endfor %}",
    "{% for m in messages %}{{ m.role - 1 }}{% endfor %}",
    # `+` chains as expressions: strings inline, anything else from that operand on
    "{% for m in messages %}{% set c = '<|' + m.role + '|>\n' + m.content | trim + '<e>' %}"
    "{% if loop.first %}{% set c = bos_token + c %}{% endif %}{{ c }}{% endfor %}",
    "{% for m in messages %}{% set c = m.role + (m.n if m.n is number else '') %}{{ c }}"
    "{% endfor %}",
    "{% for m in messages %}{% set c = loop.index + 1 + m.role|length %}{{ c }}{% endfor %}",
    "{% for m in messages %}{% set c = [m.role] + [loop.index] + [] %}{{ c }}{% endfor %}",
    "{% for m in messages %}{{ (m.role + m.role * 40) | length }}{% endfor %}",
    "{% for m in messages %}{% set s = 'a' + m.role + 'b' + m.role + 'c' + m.role + 'd'"
    " + m.role + 'e' + m.role + 'f' + m.role + 'g' + m.role + 'h' + m.role + 'i' + m.role"
    " + 'j' + m.role + 'k' + m.role + 'l' + m.role + 'm' + m.role %}{{ s }}{% endfor %}",
    "{% for m in messages %}{% set i = loop.index0 + offset %}{% set j = m.role + m.role %}"
    "{% set k = m.n + 1 if m.n is number else m.content + m.role %}{{ i }}{{ j }}{{ k }}"
    "{% endfor %}",
    "{% for m in messages %}{{ big + loop.index0 > big }}{{ [m.role] + [1] }}{% endfor %}",
    # `~` joins: strings inline, other values printed, limits charged before joining
    "{% for m in messages %}{% set t = m.role ~ ':' ~ m.n ~ m.missing ~ loop.index ~ [1] %}"
    "{{ t }}{% endfor %}",
    "{% for m in messages %}{{ ('x' * 100) ~ m.role ~ ('y' * 100) }}{% endfor %}",
    # tests without arguments: type tests inline, the others through the closure
    "{% for m in messages %}{{ m.n is defined }}{{ m.n is not none }}{{ m.content is string }}"
    "{{ m.n is number }}{{ m.n is integer }}{{ m.zz is undefined }}{{ m.n is not boolean }}"
    "{{ m.content is lower }}{{ m.n is odd }}{% endfor %}",
    # printed sums next to text
    "{% for m in messages %}[{{ '<' + m.role + '>' + m.content | string + '.' }}]{% endfor %}",
    "{% for m in messages %}[{{ '<' + m.role + '>' + m.content + '.' }}]{% endfor %}",
    # keys read more than once per iteration: read once as it starts (stable items), with
    # the sandbox path for items that are not dicts or lack the key
    "{% for m in messages %}{% if m.role == 'user' or m.role == 'tool' %}"
    "{{ m.role + ':' + m.content|string }}{% elif m.n %}{{ m.n }}{{ m.n + 1 }}{% endif %}"
    "{{ m.missing }}{{ m.missing is defined }}{{ m['role'] }}{% endfor %}",
    "{% for i in items %}{{ i.role }}{{ i.role }}{{ i[0] }}{{ i[0] }}{% endfor %}",
    # filters without arguments applied inline to an exact str (or container, for length)
    "{% for m in messages %}[{{ m.content|trim }}|{{ m.content|upper }}|{{ m.role|lower }}|"
    "{{ m.content|capitalize }}|{{ m.content|length }}|{{ m.role|count }}|{{ m.content|string }}"
    "|{{ m|length }}|{{ m.missing|string }}|{{ (m.content|string)|safe|trim }}]{% endfor %}",
    "{% for i in items %}{{ i|string|length }}{{ i|string|upper }}{% endfor %}"
    "{{ items|length }}{{ (items|first)|length }}",
    "{% for i in items %}{{ i|length }}{% endfor %}",  # an int has no length: Jinja2's error
    "{% for i in items %}{{ i|trim }}{% endfor %}",
    "{% for m in messages %}{{ ('  ' ~ m.role * 30 ~ '  ')|trim|upper|length }}"
    "{{ (m.role * 30)|trim|lower|length }}{% endfor %}",
    # negative numbers are constants (as Jinja2 folds them), keys too
    "{% for m in messages %}{{ messages[-1].role }}{{ items[-2] }}{{ items[-9] }}{{ -1 }}"
    "{{ -1.5 }}{{ -(2) }}{{ - 1 ** 2 }}{{ -true }}{{ loop.index0 - -1 }}{% endfor %}",
    # bodies that assign: generated whole, iteration variables cleared each time
    "{% for m in messages %}{% if loop.index0 == 1 %}{% set seen = m.role %}{% endif %}"
    "{{ seen is defined }}{% endfor %}",
    "{% for m in messages %}{{ c }}{% set c = m.role %}{{ c }}{% endfor %}",
    "{% set c = 'outer' %}{% for m in messages %}{{ c }}{% set c = m.role %}{% endfor %}{{ c }}",
    "{% for m in messages %}{% set r = m.role %}{% if r == 'user' %}{% continue %}{% endif %}"
    "{{ r }}{% if r == 'assistant' %}{% break %}{% endif %}{% endfor %}",
    "{% for m in messages %}{% set x, y = m.role, loop.index %}{{ x }}{{ y }}{% endfor %}",
    "{% set ns = namespace(t='') %}{% for m in messages %}{% set k = m.role|upper %}"
    "{% set ns.t = ns.t + k %}{% endfor %}{{ ns.t }}",
    # macros defined in generated code (per iteration too), their attributes, calls binding
    # by position, with defaults, keywords, varargs and a caller
    "{% macro f(x, y='-') %}{{ x }}{{ y }}{{ varargs }}{% endmacro %}"
    "{% for m in messages %}{{ f(m.role) }}{{ f(m.role, y=loop.index) }}{{ f(1, 2, 3) }}"
    "{% endfor %}{{ f.name }}{{ f.arguments }}{{ f.catch_varargs }}{{ f.catch_kwargs }}"
    "{{ f.caller }}{{ f }}",
    "{% for m in messages %}{% macro g(a) %}[{{ a }}{{ m.role }}]{% endmacro %}{{ g(loop.index) }}"
    "{% endfor %}",
    "{% macro w() %}<{{ caller(1) }}>{% endmacro %}{% for m in messages %}"
    "{% call(n) w() %}{{ n }}{{ m.role }}{% endcall %}{% endfor %}",
    "{% macro f(x) %}{{ x }}{% endmacro %}{% for m in messages %}{{ f(m.role, 2) }}{% endfor %}",
    "{% macro f(x) %}{{ x }}{% endmacro %}{% for m in messages %}{{ f(z=1) }}{% endfor %}",
    # dict.get: exact dicts directly (the result's size charged), anything else by the
    # general method call; unhashable keys refused where Jinja2 refuses them
    "{% for m in messages %}{{ m.get('content') }}|{{ m.get('n', 'none') }}|{{ m.get('x') }}|"
    "{{ m.get(loop.index0, 'i') }}|{{ {'a': m}.get('a').role }}{% endfor %}",
    "{% for m in messages %}{{ m.role.get('x') }}{% endfor %}",
    "{% for m in messages %}{{ items.get('x') }}{% endfor %}",
    "{% for m in messages %}{{ m.get([1]) }}{% endfor %}",
    "{% for m in messages %}{% if m.get('n') %}{{ m.get('content', 'x' * 40) }}{% endif %}"
    "{{ m.get('content') is string }}{% endfor %}",
    # str methods with constant arguments on an exact str: called directly, charged alike
    "{% for m in messages %}[{{ m.content.strip() }}|{{ m.content.lstrip(' B') }}|"
    "{{ m.role.rstrip('mte') }}|{{ m.role.startswith('us') }}|{{ m.role.endswith('t') }}|"
    "{{ m.content.upper() }}|{{ m.role.lower() }}|{{ (m.content * 9).strip() }}]{% endfor %}",
    "{% for m in messages %}{{ m.n.strip() }}{% endfor %}",
    "{% for m in messages %}{{ m.role.rfind('s') }}{{ m.role.find(m.role[1:]) }}"
    "{{ (m.role * 30).rfind(m.role, 2) }}{{ m.role.endswith(m.role[-1]) }}{% endfor %}",
    "{% for m in messages %}{{ m.role.find(m.n) }}{% endfor %}",
    "{% for m in messages %}{{ m.role.strip(m.role[0]) }}{{ m.role.startswith(('u', 's')) }}"
    "{% endfor %}",
    # inner loops over lists and tuples (entered once per message), over undefined values
    "{% for m in messages %}{% for c in [m.role, loop.index] %}{{ c }}{% endfor %}"
    "{% for c in (1, m.content) %}{{ c }}{% endfor %}{% for c in m.tool_calls %}x{% endfor %}"
    "{% for c in items if c %}{{ c }}{% endfor %}{% endfor %}",
    # names of enclosing scopes in a loop that binds nothing, probed once before it: the
    # template's, a global, an undefined one, one set again between two loops, a macro's
    # parameter, a namespace whose attribute the loop sets, a name set in a nested frame
    "{% set x = 1 %}{% for m in messages %}{{ x }}{{ bos_token }}{{ range(2)|list }}"
    "{{ nothing }}{{ nothing is defined }}{% endfor %}{% set x = 2 %}"
    "{% for m in messages %}{{ x }}{% endfor %}",
    "{% macro f(p, q=offset) %}{% for m in messages %}{{ p }}{{ q }}{{ m.role }}{% endfor %}"
    "{% endmacro %}{{ f('a') }}{{ f('b', 3) }}",
    "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
    "{{ ns.n }}{% endfor %}{{ ns.n }}",
    "{% for m in messages %}{% for c in [1] %}{% set y = c %}{{ y }}{% endfor %}{{ y }}"
    "{% endfor %}",
    "{% for m in messages %}{{ missing.attribute }}{% endfor %}",
    # ... and in a loop whose body binds names: the others probed once, those where used
    "{% set x = 1 %}{% set y = 'y' %}{% for m in messages %}{{ x }}{{ y }}{{ bos_token }}"
    "{% if loop.index0 == 1 %}{% set x = 5 %}{% endif %}{% set c = m.role ~ y %}{{ x }}{{ c }}"
    "{{ nothing }}{% endfor %}{{ x }}{{ c }}",
    "{% macro f(p) %}{% for m in messages %}{% set q = p ~ m.role %}{{ q }}{{ p }}{% endfor %}"
    "{% endmacro %}{{ f('a') }}",
    # loops whose bodies set names: the loop's variable is read from the item itself while
    # nothing in the body sets it again; a name the body sets (the loop's own included, in a
    # branch, by unpacking, as a macro or a block) is read where it is stored
    "{% for m in messages %}{% set c = m.role ~ '!' %}{{ c }}{{ m.role }}{{ m['content'] }}"
    "{% if m.n %}{% set m = {'role': 'x'} %}{% endif %}{{ m.role }}{% endfor %}",
    "{% for m in messages %}{% set a, m = m.role, 'swapped' %}{{ a }}{{ m }}{{ m.role }}"
    "{% endfor %}",
    "{% for m in messages %}{{ m.role }}{% macro m() %}mac{% endmacro %}{{ m() }}"
    "{% endfor %}",
    "{% for m in messages %}{% set x %}{{ m.role }}{% endset %}{{ x }}{% set m %}b{% endset %}"
    "{{ m }}{{ m.role }}{% endfor %}",
    # a subscript by a variable: a list's int index within it and a dict's str key it holds
    # are read inline, the rest (indexes out of range, other types) the closure's way
    "{% for i in range(-9, 9) %}{{ messages[i]['role'] if i >= -5 and i < 5 else i }}|"
    "{{ items[i] }}|{% endfor %}",
    "{% for m in messages %}{{ m[m.role] }}{{ m['ro' ~ 'le'] }}{{ items[loop.index0] }}"
    "{{ m.role[loop.index0] }}{{ {1: 'one'}[loop.index] }}{{ items[loop.first] }}"
    "{{ missing[m.role] }}{{ (1, 2)[loop.index0] }}{{ m[none] }}{% endfor %}",
    # text printed around a sum by the same statement: one `extend` with the sum's pieces,
    # the sum never built; a non-str operand folds the sum back, the text around it stays
    "{% for m in messages %}\n  {{ '<' + m.role + '>' + m.content|trim + '</' + m.role + '>' }}"
    "\n{% endfor %}",
    "{% for m in messages %}[{{ m.role + m.n }}]({{ m.n + m.role }}){{ m.role ~ '|' }}"
    "{{ loop.index }}{{ m.role + '!' }}|{{ m.role + m.role }}{% endfor %}",
    "{% for m in messages %}<{{ m.role + m.missing }}>{% endfor %}",
    "<{{ bos_token + messages[0].role }}>{{ offset }}{{ bos_token + bos_token }}!",
    # `x in ('a', 'b')`, a literal of strs: a str is looked up inline and charged as the
    # closure charges it; an `if`'s conditions leave their steps pending until the branch
    # taken (or none) starts, before any call in it
    "{% macro g(x) %}{{ x }}{% endmacro %}{% for m in messages %}"
    "{% if m.role in ('tool', 'ipython') %}t{% elif m.role in ['user', 'system', 'x'] %}"
    "{{ g(m.role) }}{% elif m.n not in ('a', 'b') %}n{% endif %}"
    "{% if m.content in ('Hi', 'Hello') %}{{ g(1) }}{% endif %}{{ m.role in ('a', 'b', 'c') }}"
    "{{ m.content in ['Hi'] }}{{ [m.n] in [[3], 'x'] }}{% endfor %}",
    "{% for i in items %}{% if i in ('x', 'y') %}{{ i }}{% else %}-{% endif %}"
    "{% if i not in ['x'] %}+{% endif %}{% endfor %}",
    # steps of strings built in a print or set, charged when it ends: checked where they
    # arise, and charged before any call that follows in the statement (a filter, a list
    # printed, a macro)
    "{% for m in messages %}{{ (m.role + m.role)|wordcount }}{{ m.role|upper }}{{ items }}"
    "{{ (m.role + '!')|upper }}{% endfor %}",
    "{% macro g(x) %}{{ x|length }}{% endmacro %}{% for m in messages %}"
    "{% set x = (m.role + '-' + m.role)|upper ~ m.role|trim %}{{ x }}{{ g(x + x) }}{% endfor %}",
    "{% set ns = namespace(t='') %}{% for m in messages %}{% set ns.t = ns.t + m.role|lower %}"
    "{% endfor %}{{ ns.t }}{{ (ns.t + ns.t)|trim }}",
    # attributes of namespaces, read as dict keys are; type tests written out
    "{% set ns = namespace(a=1, b=none) %}{% for m in messages %}{{ ns.a }}{{ ns.b is none }}"
    "{{ ns.c }}{{ ns.c is defined }}{{ m.n is none }}{{ m.n is not none }}{{ m.x is undefined }}"
    "{{ m.role is string }}{{ m.n is boolean }}{{ loop.first is true }}"
    "{{ loop.last is not false }}{% if ns.a and m.content is string %}s{% endif %}{% endfor %}",
    "{% for n in [namespace(x=1), {'x': 2}, none, namespace()] %}{{ n.x }}|{% endfor %}"
    "{% set ns = namespace(items=3) %}{% for m in messages %}{{ ns.items }}{% endfor %}",
    # `name is defined` of names of enclosing scopes, a miss answered without making the
    # Undefined: given or not, a global, set later in the frame, in a loop body (probed before
    # it), in a macro and a call block (a longer chain of scopes)
    "{{ tools is defined }}{{ custom is defined }}{{ custom is not defined }}"
    "{{ custom is undefined }}{{ custom is not undefined }}{{ bos_token is defined }}"
    "{{ zero is undefined }}{{ range is defined }}{{ later is defined }}{% set later = 1 %}"
    "{{ later is defined }}{% if not date is defined %}{% set date = 'd' %}{% endif %}{{ date }}",
    "{% for m in messages %}{{ custom is defined }}{{ offset is defined }}{{ m is defined }}"
    "{{ range is not defined }}{{ (m.n if m.n is defined) is defined }}{% endfor %}",
    "{% macro f(a) %}{{ a is defined }}{{ bos_token is defined }}{{ custom is defined }}"
    "{{ f is defined }}{{ caller is defined }}{% endmacro %}{{ f() }}|{{ f(1) }}|"
    "{% call f(2) %}x{% endcall %}",
    "{% for m in messages %}{% set seen = 1 %}{{ custom is defined }}{{ seen is defined }}"
    "{% endfor %}{{ seen is defined }}{% set custom = none %}{{ custom is defined }}",
    # names a generated body (the template's, a macro's, a with block's) does not bind are
    # read from the scopes once, as it starts; those it binds anywhere, where they are used
    "{{ bos_token }}{{ offset }}{% if messages %}{% set bos_token = 'B' %}{% endif %}"
    "{{ bos_token }}{{ offset }}{% macro m(x) %}{{ bos_token }}{{ zero }}{{ x }}"
    "{% if x %}{% set bos_token = x %}{% endif %}{{ bos_token }}{% endmacro %}{{ m('y') }}"
    "{{ m('') }}{{ m(bos_token) }}",
    "{{ f is defined }}{% macro f() %}{{ g is defined }}{% endmacro %}{{ f() }}"
    "{% macro g() %}{{ f() }}{% endmacro %}{{ g() }}{% with a = bos_token %}{{ a }}"
    "{{ bos_token }}{% set bos_token = 'w' %}{{ bos_token }}{{ zero }}{% endwith %}"
    "{{ bos_token }}{% for i in [1] %}{% set zero = i %}{% endfor %}{{ zero }}",
    # a name a `set` stored is read from its local until something may bind it again: a
    # branch (the names every way through left alone stay), a macro definition, a set of
    # several names, an import; an `elif` condition sees the names as they were before
    "{% set x = bos_token ~ '!' %}{{ x }}{% set x = x ~ x %}{{ x }}{% set y = 1 %}"
    "{% if messages %}{% set x = 2 %}{% elif x %}{{ x }}{% endif %}{{ x }}{{ y }}"
    "{% if zero %}{% set y = 3 %}{% else %}{% set y = 4 %}{% endif %}{{ y }}"
    "{% if zero %}{% set y = 5 %}{% endif %}{{ y }}{% macro x() %}m{% endmacro %}{{ x() }}"
    "{% set a = 0 %}{{ a }}{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set a = b + 1 %}{{ a }}"
    "{% if zero %}{% set w = 1 %}{% elif bos_token %}{% set w = 2 %}{% else %}{% set w = 3 %}"
    "{% endif %}{{ w }}{% if zero %}{% set q = 1 %}{% elif zero %}{% set q = 2 %}{% endif %}"
    "{{ q }}{{ q is defined }}",
    "{% for m in messages %}{% set r = m.role %}{% if r == 'user' %}{% set r = 'U' %}"
    "{% elif r == 'system' %}{% set r = r ~ r %}{% continue %}{% endif %}{{ r }}"
    "{% set n = loop.index %}{% if n > 2 %}{% break %}{% endif %}{{ n }}{% endfor %}",
    # keys a dict lacks: the sandbox's Undefined (charged as its path charges it), read as a
    # value or only tested for; a method's name, a private name, a dict holding an Undefined
    # value, a str, a namespace and an Undefined's attribute go the sandbox's way
    "{% for m in messages %}{{ m.n is defined }}{{ m['n'] is not defined }}"
    "{{ m.name is undefined }}{{ m.items is defined }}{{ m['items'] is defined }}"
    "{{ m._x is defined }}{{ m.content.x is defined }}{{ m.content.upper is defined }}|"
    "{% endfor %}",
    "{% for m in messages %}[{{ m.name }}|{{ m['name'] }}|{{ m.name | default('-') }}|"
    "{{ m.name or 'x' }}|{{ m.name ~ m.role }}|{{ m.values is defined }}]"
    "{% if m.name %}no{% endif %}{% if m.n is defined and m.n %}{{ m.n }}{% endif %}"
    "{% endfor %}",
    "{% macro f(m) %}{{ m.n is defined }}{{ m.name }}{{ m['name'] is defined }}"
    "{{ m.role is defined }}{% endmacro %}{% for m in messages %}{{ f(m) }}{{ f(m.role) }}"
    "{% endfor %}",
    "{% set d = {'a': nothing, 'b': 1} %}{% set ns = namespace(a=1) %}{% for m in messages %}"
    "{{ d.a is defined }}{{ d['a'] is defined }}{{ d.b is defined }}{{ d.c is defined }}"
    "{{ ns.a is defined }}{{ ns.b is defined }}{{ m.n.x is defined }}{% endfor %}",
    "{% for m in messages %}{{ m.x.y is defined }}{% endfor %}",
    # filters on the general path in a loop that sets names: one given arguments reads them
    # (the iteration's variables written first), one given none needs only the context
    "{% for m in messages %}{% set sep = m.role ~ ':' %}{{ m.role | join(sep) }}"
    "{{ m.content | trim }}{% set sep = sep ~ '!' %}{{ m.content | string | replace('e', sep) }}"
    "{{ m.content | trim | length }}{{ sep }}{% endfor %}",
    # `a + b` with a constant that is not a str: two ints inline, anything else (a float, a
    # huge int, none, a str and an int, lists) the closure's way, errors located
    "{% for m in messages %}{% if m.n is number %}{{ m.n + 1 }}{{ 1 + m.n }}{{ m.n + 0.5 }}"
    "{{ big + 1 }}{% endif %}{{ 'x' + m.role }}{{ [1] + [loop.index] }}{{ loop.index + 1 }}"
    "{% endfor %}",
    "{% for m in messages %}{{ m.n + 1 }}{% endfor %}",
    "{% for m in messages %}{{ m.role + 1 }}{% endfor %}",
    # str-method filters of none (its text, 'None', without a call), an int, an undefined
    "{% for m in messages %}{{ m.n | trim }}{{ m.n | upper }}{{ m.n | lower }}"
    "{{ m.n | capitalize }}{{ (m.content | trim) ~ '|' }}{% endfor %}",
    # `x in y` of two variables: a str key in a dict at once, anything else checked (and
    # charged) by the closure: an int key, a list, a str, an undefined key, a list as a key
    "{% set d = {'a': 1, 2: 'b'} %}{% set long = 'system, user; ' * 60 %}"
    "{% set many = range(100) | list %}{% for m in messages %}{% set k = m.role %}{{ k in m }}"
    "{{ k in long }}{{ k in many }}{{ k not in d }}{{ loop.index in d }}{{ k in [k] }}"
    "{{ k in m.role }}{{ m.n in d }}"
    "{{ m.x in m }}|{% endfor %}",
    "{% set d = {'a': 1} %}{% for m in messages %}{% set k = [m.role] %}{{ k in d }}"
    "{% endfor %}",
    # a macro given its first argument only: the others' constant defaults (bound without
    # bind), a default that is not a constant, keywords and a body that sets names
    "{% macro r(role, sp=True, n=none, s='x') %}{% set t = role ~ s %}{{ t }}{{ sp }}{{ n }}"
    "{% endmacro %}{% macro q(role, b=1, l=[1]) %}{{ role }}{{ b }}{{ l }}"
    "{% endmacro %}"
    "{% for m in messages %}{{ r(m.role) }}{{ r(m.role, False) }}{{ r(m.role, n=1) }}"
    "{{ q(m.role) }}{{ r() }}{% endfor %}",
    # `default` given one argument (its own path): the argument evaluated and charged
    # whichever value is chosen; an undefined default, the alias, `boolean` the general way
    "{% set d = {'u': nothing} %}{% for m in messages %}{{ m.n | default(m.role ~ '!') }}|"
    "{{ m.name | d([1, m.role]) }}|{{ m.name | default(m.name) }}|{{ d.u | default('u') }}|"
    "{{ m.content | default('e', true) }}|{% for c in m.calls | default([]) %}{{ c }}"
    "{% endfor %}{{ (m.n | default(range(3) | list)) | length }}{% endfor %}",
    # a dict read with a constant int key: charged what looking an int up may cost however
    # the dict's keys collide (collisions.lookup_steps), on both paths; a list as before
    "{% set d = dict.fromkeys(range(40), 'v') %}{% for m in messages %}{% set e = d %}"
    "{{ d[0] }}{{ d[-1] }}{{ e[5] }}{{ [d][0][7] }}{{ e[99] }}{{ m[0] }}{{ [m][0] }}"
    "{% endfor %}",

]


def hot_from(monkeypatch: pytest.MonkeyPatch, iterations: float,
             calls: Optional[float] = None) -> None:
    """Loops generated from ``iterations`` items (and bodies from ``calls`` runs, when
    given), from the template's first render on (no FIRST_RENDER_FACTOR)."""
    monkeypatch.setattr(compiler, "HOT_ITERATIONS", iterations)
    monkeypatch.setattr(compiler, "FIRST_RENDER_FACTOR", 1)
    if calls is not None:
        monkeypatch.setattr(compiler, "HOT_CALLS", calls)


@pytest.fixture(params=["closures", "generated"])
def hot_after(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    hot_after = 1 if request.param == "generated" else float("inf")
    hot_from(monkeypatch, hot_after, hot_after)
    return request.param


def _outcome(render: Any) -> Any:
    try:
        return ("ok", render())
    except Exception as exc:  # noqa: BLE001 - the outcome is compared with Jinja2's
        return ("error", type(exc).__name__, getattr(exc, "message", str(exc)).split("\n")[0])


@pytest.mark.parametrize("source", CASES)
def test_inline_paths_match_jinja2(source: str, hot_after: str) -> None:
    expected = _outcome(lambda: reference_jinja2.make_environment().from_string(source)
                        .render(**DATA))
    got = _outcome(lambda: mj.chat_environment().from_string(source).render(**DATA))
    if expected[0] == "error":
        assert got[0] == "error", got
        # class families are compared by the conformance suite; here the message
        assert got[2] == expected[2]
    else:
        assert got == expected


def _fitting(source: str, data: Dict[str, Any], hot: bool,
             monkeypatch: pytest.MonkeyPatch) -> Callable[[int], bool]:
    """A function telling whether rendering ``source`` fits in a given ``max_steps``, with
    everything generated (``hot``) or with closures only. The template is compiled once and
    rendered again under each budget (the limits are read when a render starts), so a search
    pays for renders, not for a compile per try."""
    hot_after = 1 if hot else float("inf")
    hot_from(monkeypatch, hot_after, hot_after)
    env = mj.chat_environment()
    template = env.from_string(source)

    def fits(max_steps: int) -> bool:
        hot_from(monkeypatch, hot_after, hot_after)  # the other path's search may run between
        env.limits = mj.Limits(max_steps=max_steps)
        try:
            template.render(**data)
            return True
        except mj.LimitExceededError:
            return False
        except mj.TemplateError:
            return True  # fails for another reason: within the budget up to that point
    return fits


def _smallest(fits: Callable[[int], bool]) -> int:
    low, high = 0, 1 << 22
    assert fits(high)
    while low < high:
        middle = (low + high) // 2
        if fits(middle):
            high = middle
        else:
            low = middle + 1
    return low


def smallest_budget(source: str, data: Dict[str, Any], hot: bool,
                    monkeypatch: pytest.MonkeyPatch) -> int:
    """The smallest ``max_steps`` rendering ``source`` fits in, with everything generated
    (``hot``) or with closures only."""
    return _smallest(_fitting(source, data, hot, monkeypatch))


def same_smallest_budget(source: str, data: Dict[str, Any],
                         monkeypatch: pytest.MonkeyPatch) -> Tuple[int, bool, bool]:
    """(the smallest ``max_steps`` the generated path fits in, whether the closures fit in
    it, whether they fit in one step less): the two paths need the same budget when the
    result is ``(budget, True, False)``. Two renders instead of a second search."""
    budget = smallest_budget(source, data, True, monkeypatch)
    closures = _fitting(source, data, False, monkeypatch)
    below = budget > 0 and closures(budget - 1)
    return budget, closures(budget), below


def spy_on(monkeypatch: pytest.MonkeyPatch, name: str) -> list:
    """Every function ``compiler.<name>`` (a code generator) returns, as it returns them."""
    made: list = []
    original = getattr(compiler, name)

    def spy(*args: Any) -> Any:
        made.append(original(*args))
        return made[-1]

    monkeypatch.setattr(compiler, name, spy)
    return made


@pytest.mark.parametrize("source", CASES)
def test_generated_code_charges_the_same_steps(source: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    budget, fits, fits_below = same_smallest_budget(source, DATA, monkeypatch)
    assert (fits, fits_below) == (True, False), budget


@pytest.mark.parametrize("source", [
    "{% for m in messages %}{{ m.n | default(m.role ~ '!') }}{{ m.n | default([1, 2]) }}"
    "{{ m.name | default(m.name) }}{% endfor %}",
    "{% set long = 'x' * 600 %}{% for m in messages %}{{ m.name | default(long ~ long) }}"
    "{{ m.n | default(long) }}{{ m.role | default(long ~ long) }}{% endfor %}",
])
def test_the_default_filters_own_path_charges_as_the_general_one(
        source: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``x | default(y)`` has a path of its own (Compiler.default_filter): its output and the
    smallest step budget it fits in are those of the general filter path."""
    own = mj.chat_environment().from_string(source).render(**DATA)
    budgets = [smallest_budget(source, DATA, hot, monkeypatch) for hot in (False, True)]
    with monkeypatch.context() as general:
        general.setattr(compiler.Compiler, "default_filter", staticmethod(lambda *_: None))
        assert mj.chat_environment().from_string(source).render(**DATA) == own
        assert [smallest_budget(source, DATA, hot, general) for hot in (False, True)] == budgets


@pytest.mark.parametrize("inner", [
    "{% for c in m.calls | default(EMPTY) %}{{ c }}{% endfor %}",
    "{% for c in m.calls | default(EMPTY) %}{% set x = c %}{{ x }}{% endfor %}",
])
def test_an_empty_list_is_looped_over_as_any_empty_iterable(
        inner: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A loop over an empty list returns at once (for_stmt, for_simple): it fits the budget
    an empty tuple does, inside a loop and as the last thing a render does."""
    for outer in ("{% for m in messages %}{{ m.role }}INNER{% endfor %}",
                  "{% set m = messages[2] %}{{ m.role }}INNER"):  # the last thing it does
        sources = [outer.replace("INNER", inner.replace("EMPTY", empty))
                   for empty in ("[]", "()")]
        for hot in (False, True):
            assert smallest_budget(sources[0], DATA, hot, monkeypatch) == \
                smallest_budget(sources[1], DATA, hot, monkeypatch)


def test_direct_attributes_are_what_the_sandbox_answers() -> None:
    """DIRECT_ATTRIBUTES lets the compiler read an attribute after a type check: for every
    entry the sandbox's own answer must be the plain attribute, never a wrapper."""
    from minijinja_py.runtime.objects import LoopContext, Undefined
    from minijinja_py.runtime.sandbox import DIRECT_ATTRIBUTES, Sandbox

    sandbox = Sandbox(True, Undefined)
    samples = {LoopContext: []}
    for index0 in range(3):  # previtem and nextitem are undefined at either end
        loop = LoopContext(["a", "b", "c"], 1, None, Undefined)
        loop.index0 = index0
        samples[LoopContext].append(loop)
    for kind, names in DIRECT_ATTRIBUTES.items():
        for obj in samples[kind]:
            for name in names:
                assert sandbox.getattr(obj, name) == getattr(obj, name)
                assert type(sandbox.getattr(obj, name)) is type(getattr(obj, name))
                assert isinstance(getattr(obj, name), Undefined) or \
                    not callable(getattr(obj, name))


def test_a_templates_first_render_generates_only_what_runs_far_more_often(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """In a template's first render a loop or a macro is generated once it has run
    FIRST_RENDER_FACTOR times its threshold, not at the threshold: rendered once (a fresh
    process) it is not worth compile(). The second render generates what the first ran
    often enough, its runs counted; the output is Jinja2's every time."""
    loops = spy_on(monkeypatch, "generate_loop")
    bodies = spy_on(monkeypatch, "generate_body")
    source = ("{% macro show(x) %}<{{ x }}>{% endmacro %}"
              "{% for m in ms %}{{ show(m) }}{% endfor %}")
    reference = reference_jinja2.make_environment().from_string(source)
    few = list(range(max(compiler.HOT_ITERATIONS, compiler.HOT_CALLS) + 1))
    template = mj.chat_environment().from_string(source)
    assert template.render(ms=few) == reference.render(ms=few)
    assert (loops, bodies) == ([], [])  # past both thresholds, not past ten times them
    assert template.render(ms=few) == reference.render(ms=few)
    assert [f.__name__ for f in loops] == ["generated_loop"]
    assert [f.__name__ for f in bodies] == ["generated_body"]  # the macro's
    loops.clear()
    bodies.clear()
    many = list(range(compiler.HOT_ITERATIONS * compiler.FIRST_RENDER_FACTOR))
    assert mj.chat_environment().from_string(source).render(ms=many) == reference.render(ms=many)
    assert [f.__name__ for f in loops] == ["generated_loop"]
    assert [f.__name__ for f in bodies] == ["generated_body"]


def test_loops_that_assign_are_generated_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    made = spy_on(monkeypatch, "generate_charging_loop")
    hot_from(monkeypatch, 1)
    source = "{% for m in messages %}{% set c = m.role + '!' %}{{ c }}{% endfor %}"
    assert mj.chat_environment().from_string(source).render(**DATA) == \
        "system!user!assistant!user!tool!"
    assert len(made) == 1 and made[0].__name__ == "generated_loop"


def test_limits_stop_a_generated_loop_that_assigns(monkeypatch: pytest.MonkeyPatch) -> None:
    hot_from(monkeypatch, 1)
    source = "{% for i in range(100000) %}\n{% set x = 'abc' ~ i %}{{ x }}{% endfor %}"
    env = mj.chat_environment(limits=mj.Limits(max_steps=20_000))
    with pytest.raises(mj.LimitExceededError) as steps:
        env.from_string(source).render()
    assert "max_steps" in steps.value.message and steps.value.lineno == 1
    env = mj.chat_environment(limits=mj.Limits(max_output_size=1000))
    with pytest.raises(mj.LimitExceededError) as output:
        env.from_string(source).render()
    assert "max_output_size" in output.value.message


def test_the_generated_code_can_be_shown(monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture) -> None:
    """MINIJINJA_PY_SHOW_CODE prints each generated function, its names explained and its
    statements marked with their template lines; the code runs the same."""
    hot_from(monkeypatch, 1)
    monkeypatch.setenv("MINIJINJA_PY_SHOW_CODE", "1")
    source = "{% for m in messages %}\n{% if m.role == 'user' %}{{ m.content }}{% endif %}{% endfor %}"
    shown = mj.chat_environment().from_string(source).render(**DATA)
    printed = capsys.readouterr().err
    assert "def generated_loop(scope, out, items, loop," in printed
    assert "# if, line 2" in printed and "# output, line 2" in printed
    assert "If node, line 2" in printed
    monkeypatch.delenv("MINIJINJA_PY_SHOW_CODE")
    assert mj.chat_environment().from_string(source).render(**DATA) == shown
    assert capsys.readouterr().err == ""


def test_sums_over_the_limit_are_refused_before_they_are_built(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Generated `+` measures its operands first, as the closures do: a sum the string limit
    refuses is never made, so the render allocates nothing near its size."""
    import tracemalloc

    hot_from(monkeypatch, 1, 1)
    big = "x" * 700_000
    env = mj.chat_environment(limits=mj.Limits(max_string_size=1_000_000))
    for source in ("{% for i in [1] %}{% set s = a + b %}{% endfor %}",
                   "{% for i in [1] %}{% set s = a + '-' + b %}{% endfor %}"):
        template = env.from_string(source)
        tracemalloc.start()
        try:
            with pytest.raises(mj.LimitExceededError):
                template.render(a=big, b=big)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 1_000_000, source


def test_printed_joins_are_measured_and_put_out_in_pieces(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`{{ a ~ b }}` in a generated loop: measured and charged as the closure does (the string
    limit refuses a join too long before anything is output), then its pieces go to the
    output as they are, no joined copy made."""
    made = spy_on(monkeypatch, "generate_loop")
    hot_from(monkeypatch, 1)
    source = "{% for m in messages %}{{ '<' ~ m.role ~ '>' ~ m.content ~ 1 }}{% endfor %}"
    expected = reference_jinja2.make_environment().from_string(source).render(**DATA)
    assert mj.chat_environment().from_string(source).render(**DATA) == expected
    code = made[0].source  # an append per piece, or (Python 3.10) a tuple of them
    assert ("out.append('<')" in code or "out += ('<', _t" in code) and " f'{" not in code
    env = mj.chat_environment(limits=mj.Limits(max_string_size=1_000_000))
    big = [{"role": "x" * 600_000, "content": "y" * 600_000}]
    with pytest.raises(mj.LimitExceededError):
        env.from_string(source).render(messages=big)


def _mutating_environments() -> Any:
    """Both engines with a global function and a filter that change the message they get."""
    def rename(message: Dict[str, Any]) -> str:
        message["role"] = message["role"].upper()
        return ""

    pairs = []
    for env in (reference_jinja2.make_environment(), mj.chat_environment()):
        env.globals["rename"] = rename
        env.filters["renamed"] = rename
        pairs.append(env)
    return pairs


@pytest.mark.parametrize("source", [
    "{% for m in messages %}{{ m.role }}{{ rename(m) }}{{ m.role }}{% endfor %}",
    "{% for m in messages %}{{ m.role }}{{ m | renamed }}{{ m.role }}{% endfor %}",
    # the pure global's name given to the user's function by the context, or set outside
    "{% for m in messages %}{{ m.role }}{{ raise_exception(m) }}{{ m.role }}{% endfor %}",
    "{% set raise_exception = rename %}{% for m in messages %}{{ m.role }}"
    "{% if m.role %}{{ raise_exception(m) }}{% endif %}{{ m.role }}{% endfor %}",
    "{% for m in messages %}{% set r = m.role %}{{ r }}{{ raise_exception(m) }}{{ m.role }}"
    "{{ m.role }}{% endfor %}",
    # a name holding a pure function as the loop starts, bound to the user's in the body
    "{% set f = range %}{% for m in messages %}{{ m.role }}{% set f = rename %}"
    "{{ f(m) }}{{ m.role }}{{ m.role }}{% endfor %}",
    "{% set f = range %}{% for m in messages %}{{ m.role }}{% for f in [rename] %}{{ f(m) }}"
    "{% endfor %}{{ m.role }}{{ m.role }}{% endfor %}",
])
def test_keys_are_read_again_after_user_code(source: str, hot_after: str) -> None:
    """A call or a filter of the user's may change the items, so a loop that has one reads
    each key where it is used (as Jinja2 does), never once per iteration; a loop calling
    names that hold the engine's pure functions as it starts reads them once."""
    outputs = []
    for env in _mutating_environments():
        template = env.from_string(source)
        # (the first render makes the loop with `raise_exception` the pure global; the second
        # passes the user's function under that name)
        with contextlib.suppress(Exception):
            template.render(messages=[dict(m) for m in MESSAGES if m["role"] != "tool"])
        messages = [dict(m) for m in MESSAGES]
        outputs.append(template.render(messages=messages,
                                       raise_exception=env.globals["rename"]))
    assert outputs[0] == outputs[1]
    assert "systemSYSTEM" in outputs[1]


def test_loops_calling_pure_functions_read_each_key_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """`raise_exception` (the commonest call in a message loop) changes nothing: a loop calling
    only such functions reads each key once per iteration, after asking, as it starts, whether
    the names it calls hold them; a clock the user passes makes strftime_now impure."""
    made = spy_on(monkeypatch, "generate_charging_loop")
    hot_from(monkeypatch, 1)
    source = "{% for m in messages %}{% set n = loop.index %}{% if m.role == 'x' %}" \
             "{{ raise_exception('no ' + m.role) }}{% endif %}{{ n }}{{ m.role }}{% endfor %}"
    expected = reference_jinja2.make_environment().from_string(source).render(**DATA)
    assert mj.chat_environment().from_string(source).render(**DATA) == expected
    code = made[0].source
    assert "_stable = _pure_callees(scope, ('raise_exception',))" in code
    assert "if _stable and _d0:" in code and "_r0 = _o0['role']" in code
    assert mj.chat_environment().globals["strftime_now"].pure
    assert not mj.chat_environment(now=lambda: None).globals["strftime_now"].pure


def test_stable_loops_read_each_key_once_per_iteration(monkeypatch: pytest.MonkeyPatch) -> None:
    made = spy_on(monkeypatch, "generate_loop")
    hot_from(monkeypatch, 1)
    stable = "{% for m in messages %}{% if m.role == 'user' %}{{ m.role|upper }}{% endif %}" \
             "{{ m.content }}{% endfor %}"
    calling = "{% for m in messages %}{% if m.role == 'user' %}{{ m.role|upper }}{% endif %}" \
              "{{ raise_exception('x') if m.role == 1 }}{% endfor %}"
    for source in (stable, calling):
        mj.chat_environment().from_string(source).render(**DATA)
    stable_code, calling_code = made[0].source, made[1].source
    assert "_r0 = _o0.get('role', _M)" in stable_code
    assert "'content'" in stable_code and "_r1" not in stable_code  # read once: read where used
    # calling the pure raise_exception: read once when the name holds it as the loop starts
    assert "_r0 = _o0.get('role', _M) if _stable and _d0 else _M" in calling_code
    # a method called, or a name the body binds called: read where used
    user_call = calling.replace("raise_exception('x')", "messages.pop()")
    bound_callee = "{% for m in messages %}{% set f = raise_exception %}" + \
        calling.split("%}", 1)[1].replace("raise_exception", "f")
    charging = spy_on(monkeypatch, "generate_charging_loop")
    for source in (user_call, bound_callee):
        mj.chat_environment().from_string(source).render(**DATA)
    assert "_r0" not in made[2].source
    assert "_stable" not in charging[0].source and "_r0" not in charging[0].source


def test_keys_tested_for_are_never_read_early(monkeypatch: pytest.MonkeyPatch) -> None:
    """A key the body tests for (`'tool_calls' in m`, `m.name is defined`) is one most items
    lack: read early, it would send most iterations to the copy of the body that checks every
    read. Such keys are read where used; the others early, as ever."""
    made = spy_on(monkeypatch, "generate_loop")
    hot_from(monkeypatch, 1)
    source = "{% for m in messages %}{% if 'n' in m and m.n %}{{ m.n }}{{ m.role }}" \
             "{% elif m.content is defined %}{{ m.content }}{{ m.role }}{% endif %}" \
             "{{ m.content }}{{ m['n'] }}{{ m.role }}{% endfor %}"
    expected = reference_jinja2.make_environment().from_string(source).render(**DATA)
    assert mj.chat_environment().from_string(source).render(**DATA) == expected
    code = made[0].source
    assert "_r0 = _o0['role']" in code
    assert "= _o0['n']" not in code and "= _o0['content']" not in code


def test_a_filter_of_the_users_is_never_inlined(hot_after: str) -> None:
    """Only the engine's own filters are applied inline: one the user put in their place runs."""
    env = mj.chat_environment()
    env.filters["trim"] = lambda value: f"<{value}>"
    env.filters["length"] = lambda value: "many"
    source = "{% for m in messages %}{{ m.role|trim }}{{ m.role|length }}{% endfor %}"
    assert env.from_string(source).render(**DATA) == \
        "<system>many<user>many<assistant>many<user>many<tool>many"


@pytest.mark.parametrize("source", [
    "{% for m in messages %}{{ m.role }},{{ items[9] }}{% endfor %}",
    "{% for m in messages %}{{ m.role }}{% if m.content is string %}{{ m.content|trim }}"
    "{% continue %}{% endif %}{{ items['x'] }}{% endfor %}",
])
def test_a_loop_over_the_step_limit_never_ends_quietly(source: str, hot_after: str) -> None:
    """Work charged on top of a loop's iterations (slow lookups) can pass the limit midway:
    whatever the budget, the render gives the whole output or the limit's error, never the
    output of the iterations run so far (the generated loop stopped there once)."""
    whole = mj.chat_environment().from_string(source).render(**DATA)
    outcomes = set()
    for max_steps in range(20, 400, 3):
        env = mj.chat_environment(limits=mj.Limits(max_steps=max_steps))
        try:
            assert env.from_string(source).render(**DATA) == whole
            outcomes.add("whole")
        except mj.LimitExceededError:
            outcomes.add("refused")
    assert outcomes == {"whole", "refused"}


def test_items_lacking_a_key_read_early_take_the_general_copy(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A loop reading keys early runs its body as written for items that hold them all (the
    item known to be a dict there, the limits looked at after it, then the next item), and
    a second copy (each read checked, the sandbox path for a missing key) for the others; a
    body too long to write twice is written once, with the checks."""
    from minijinja_py.compiler import codegen

    made = spy_on(monkeypatch, "generate_loop")
    hot_from(monkeypatch, 1)
    source = ("{% for m in messages %}{% if m.n %}{{ m.role + ':' + m.n|string }}"
              "{% elif m.role == 'user' %}{{ m.role|upper }}{% endif %}"
              "{% if 'content' in m %}.{% endif %}{% endfor %}")
    expected = reference_jinja2.make_environment().from_string(source).render(**DATA)
    assert mj.chat_environment().from_string(source).render(**DATA) == expected
    two_copies = made[-1].source
    assert "_r0 = _o0['n']" in two_copies and "except KeyError:" in two_copies
    first_copy, second_copy = two_copies.split("\n                continue\n")
    first_copy = first_copy.split("except KeyError:")[1]
    assert "'content' in _o0 if True else" in first_copy and "_d0" not in first_copy
    assert first_copy.rstrip().endswith(
        "if ctx.output_size > max_output or ctx.steps > ctx.max_steps:\n"
        "                    return remaining")
    assert "_r0 = _o0.get('n', _M) if _d0 else _M" in second_copy
    assert "'content' in _o0 if _d0 else" in second_copy
    lines = len([line for line in two_copies.splitlines() if line.strip()])
    monkeypatch.setattr(codegen, "MAX_LINES", lines - 5)
    assert mj.chat_environment().from_string(source).render(**DATA) == expected
    one_copy = made[-1].source
    assert "except KeyError" not in one_copy and "_r0 = _o0.get('n', _M)" in one_copy


@pytest.mark.parametrize("hot", [False, True])
def test_a_loop_over_a_list_is_limited_and_charged_as_any_iterable(
        hot: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Lists and tuples enter a loop by a path of their own: refused over
    max_collection_size at the loop's iterable, and charged what any iterable of that length
    is (a range takes the general path)."""
    source = "{% for m in messages %}{% for x in values %}{{ x }}{% endfor %}{% endfor %}"
    budgets = {type(values).__name__: smallest_budget(
        source, {"messages": MESSAGES, "values": values}, hot, monkeypatch)
        for values in (list(range(40)), tuple(range(40)), range(40))}
    assert budgets["list"] == budgets["tuple"] == budgets["range"], budgets
    env = mj.chat_environment(limits=mj.Limits(max_collection_size=39))
    for values in (list(range(40)), tuple(range(40))):
        with pytest.raises(mj.LimitExceededError) as caught:
            env.from_string(source).render(messages=MESSAGES, values=values)
        assert "max_collection_size" in str(caught.value)
        assert (caught.value.lineno, caught.value.column) == (1, 36)  # at `values`


def _limited_outcome(source: str, hot: bool, monkeypatch: pytest.MonkeyPatch,
                     **limits: int) -> Any:
    """The output, or where the limit's error falls, with everything generated (``hot``)
    or with closures only."""
    hot_from(monkeypatch, 1 if hot else float("inf"), 1 if hot else float("inf"))
    env = mj.chat_environment(limits=mj.Limits(**limits))
    try:
        return env.from_string(source).render(**DATA)
    except mj.LimitExceededError as exc:
        return ("refused", exc.lineno, exc.column)


@pytest.mark.parametrize("source", [
    "{% macro g(x) %}{{ x }}{% endmacro %}{% for m in messages %}\n"
    "{% if m.role in ('tool', 'ipython', 'a', 'b') %}t{% endif %}\n{{ g(m.role) }}{% endfor %}",
    "{% macro g(x) %}{{ x }}{% endmacro %}{% for m in messages %}\n"
    "{% if m.role in ('tool', 'ipython', 'a', 'b') %}t{% elif m.role == 'user' %}\n"
    "{{ g(m.role) }}{% elif m.role in ['a', 'b', 'c'] %}c{% else %}{{ g(m.content) }}"
    "{% endif %}\n{{ g(m.role) }}{% endfor %}",
])
def test_limit_errors_fall_where_the_closures_raise_them(
        source: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Steps an `if`'s conditions leave pending are charged before the branch taken, or the
    statement after the `if` when none is: whatever the budget, a call there sees the same
    count, and the limit's error falls on the same line, as on the closures' path."""
    outcomes = set()
    for max_steps in range(20, 900, 3):
        generated = _limited_outcome(source, True, monkeypatch, max_steps=max_steps)
        assert generated == _limited_outcome(source, False, monkeypatch, max_steps=max_steps)
        outcomes.add(generated if isinstance(generated, tuple) else "whole")
    assert "whole" in outcomes and len(outcomes) > 2  # refused at more than one place


@pytest.mark.parametrize("source", [
    "{% for m in messages %}\n  {{ '<' + m.role + '>' + m.role|trim + '</' + m.role + '>' }}"
    "\n{% endfor %}",
    "{% for m in messages %}[{{ m.role + m.role }}]{{ m.role }}({{ m.role ~ '|' }}){% endfor %}",
])
def test_output_limit_errors_fall_where_the_closures_raise_them(
        source: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Text printed around a sum by the same statement goes out with it: whatever the output
    limit, the render gives the same output, or the limit's error at the same place, with
    generated code as with the closures."""
    whole = mj.chat_environment().from_string(source).render(**DATA)
    outcomes = set()
    for size in range(len(whole) + 2):
        generated = _limited_outcome(source, True, monkeypatch, max_output_size=size)
        assert generated == _limited_outcome(source, False, monkeypatch, max_output_size=size)
        outcomes.add(generated if isinstance(generated, tuple) else "whole")
    assert "whole" in outcomes and len(outcomes) > 1
