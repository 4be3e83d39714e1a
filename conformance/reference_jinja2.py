"""The reference engine: Jinja2 3.1.6 configured the way Hugging Face transformers 5.24 is.

This is the ONE definition of "what Jinja2 does with a chat template" in this repository.
Everything that compares minijinja_py against Jinja2 builds its Jinja2 environment here:

* ``conformance/regenerate.py`` -- the only producer of ``conformance/expected/*.json``;
* ``benchmarks/bench.py`` -- the Jinja2 side of every timing and of its correctness check
  (also exec'd, by path, inside the cold-start child processes);
* ``tests/security/security_support.py`` -- ``reference_env()`` / ``jinja2_outcome()``.

Keeping one copy means the three cannot drift apart (they had: the security reference lacked
``{% generation %}`` and transformers' ``dict``/``namespace``, the benchmark lacked the latter).

The environment, as transformers 5.24 builds it for ``apply_chat_template``:

* ``ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
  extensions=[GenerationTracker, loopcontrols])``;
* the ``tojson`` filter is transformers' ``json.dumps`` wrapper (``ensure_ascii=False``, no HTML
  escaping, not ``Markup``), not Jinja2's own;
* globals ``raise_exception`` (raises ``TemplateError``) and ``strftime_now`` (formats a FIXED
  clock here instead of the wall clock, so outputs are reproducible and comparable byte for byte);
* globals ``dict`` and ``namespace`` replaced by transformers' hardened versions
  (:class:`TemplateDict`, :class:`TemplateNamespace`).

Constraints on this file, because of how it is used:

* it must NOT import minijinja_py (it is the reference the engine is judged against, and the
  benchmark's Jinja2 cold-start timing must not pay for the other engine);
* besides Jinja2 it imports only ``json`` (which Jinja2 loads anyway) and ``datetime``
  (which the benchmark child loads before its clock starts), and it does no work at import
  time beyond defining a few names: its import cost inside the benchmark's timed region must
  stay negligible;
* it is a plain module, not a package: callers put ``conformance/`` on ``sys.path`` and
  ``import reference_jinja2``.

Public names: :data:`JINJA2_VERSION`, :data:`FIXED_NOW`, :func:`make_environment`, and the
pieces it installs (:class:`GenerationTracker`, :func:`tojson`, :func:`raise_exception`,
:func:`make_strftime_now`, :class:`TemplateDict`, :class:`TemplateNamespace`).
"""

import datetime
import json

from jinja2 import TemplateError, nodes
from jinja2.exceptions import SecurityError
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import Namespace

__all__ = ["JINJA2_VERSION", "FIXED_NOW", "make_environment", "GenerationTracker", "tojson",
           "raise_exception", "make_strftime_now", "TemplateDict", "TemplateNamespace"]

#: The Jinja2 release the expectations were produced with. Other releases differ in error
#: messages and edge cases, so regenerate.py refuses to run under anything else.
JINJA2_VERSION = "3.1.6"

#: The clock ``strftime_now`` reads by default (a Thursday), the same one every caller hands
#: to ``minijinja_py.chat_environment(now=...)`` so both engines print the same date.
FIXED_NOW = datetime.datetime(2025, 7, 10, 12, 0, 0)


class GenerationTracker(Extension):
    """transformers' AssistantTracker, as far as the output goes.

    ``{% generation %}...{% endgeneration %}`` renders its body unchanged. transformers also
    records the character span of the body (for assistant masks); no caller here needs the
    spans, only the text, so that bookkeeping is left out.
    """

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    """transformers' ``tojson`` filter: plain ``json.dumps``.

    Jinja2's builtin ``tojson`` HTML-escapes ``<>&'`` and returns Markup; transformers replaces
    it so that tool schemas reach the model verbatim.
    """
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def raise_exception(message):
    """transformers' ``raise_exception`` global: templates use it to reject bad input."""
    raise TemplateError(message)


def make_strftime_now(now):
    """transformers' ``strftime_now(format)`` global, reading ``now`` instead of the wall clock.

    The parameter is called ``format`` as in transformers, so a template passing it by keyword
    behaves the same.
    """

    def strftime_now(format):
        return now.strftime(format)

    return strftime_now


class TemplateDict:
    """transformers 5.24's ``dict`` global: a callable with ``fromkeys``, nothing else.

    Jinja2's default is the ``dict`` type itself, whose unbound methods
    (``dict.update(messages[0], ...)``) would let a template mutate the caller's data even in
    the immutable sandbox; transformers closes that by exposing only these two entry points.
    """

    def __call__(self, *args, **kwargs):
        return dict(*args, **kwargs)

    def fromkeys(self, *args, **kwargs):
        return dict.fromkeys(*args, **kwargs)


class TemplateNamespace(Namespace):
    """transformers 5.24's ``namespace``: refuses attribute names starting with ``_``.

    Checked at creation (``namespace(_x=1)``, ``namespace({'_x': 1})``) and on assignment
    (``{% set ns._x = 1 %}``, which Jinja2 compiles to ``__setitem__``); both raise
    ``SecurityError``. The class name matters: it appears in Jinja2's messages (e.g. "Object of
    type TemplateNamespace is not JSON serializable" in conformance/expected/).
    """

    # Same signature trick as jinja2.utils.Namespace: ``self`` is taken from *args so that a
    # template can pass an attribute literally named "self".
    def __init__(*args, **kwargs):
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            TemplateNamespace._check_name(name)
        Namespace.__init__(self, attrs)

    def __setitem__(self, name, value):
        TemplateNamespace._check_name(name)
        Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check_name(name):
        if isinstance(name, str) and name.startswith("_"):
            raise SecurityError(f"namespace attribute names may not start with '_': {name!r}")


def make_environment(now=FIXED_NOW, generation=True, **options):
    """A new Jinja2 environment configured like transformers' chat-template environment.

    ``now`` is the datetime ``strftime_now`` formats. ``generation=False`` leaves out the
    ``{% generation %}`` extension (Jinja2's own tags only, as in a plain environment).
    ``options`` are passed to the environment and override the transformers defaults
    (``trim_blocks=True``, ``lstrip_blocks=True``); the conformance cases use this for
    ``trim_blocks``, ``lstrip_blocks`` and ``keep_trailing_newline``.

    Every call builds a fresh environment (Jinja2 caches compiled templates per environment);
    callers that want reuse keep their own.
    """
    settings = {"trim_blocks": True, "lstrip_blocks": True}
    settings.update(options)
    extensions = [GenerationTracker, loopcontrols] if generation else [loopcontrols]
    env = ImmutableSandboxedEnvironment(extensions=extensions, **settings)
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = make_strftime_now(now)
    env.globals["dict"] = TemplateDict()
    env.globals["namespace"] = TemplateNamespace
    return env
