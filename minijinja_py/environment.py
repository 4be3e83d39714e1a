"""Environment and Template: configuration, the parse cache, and rendering.

Last step of the flow: ``Environment.from_string`` parses (once per source, cached) and compiles
a template; ``Template.render`` runs the compiled closures and joins the output pieces once.
:func:`chat_environment` builds the Environment exactly as Hugging Face transformers
configures Jinja2 for chat templates.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported at run time: it costs milliseconds
if TYPE_CHECKING:  # pragma: no cover
    import datetime as _datetime
    from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

    from .provenance.origins import ProvenanceResult

from sys import getrecursionlimit as _getrecursionlimit
from time import monotonic as _monotonic

from .guard import deadline as _deadline
from .guard import limits as _limits
from .compiler.closures import Compiler, RenderContext, Scope
from .compiler.closures import starting_undefined
from .exceptions import TemplateError, wrap_python_error
from .guard.prices import CALL_STEPS, filter_input_cost, size_cost
from .guard.limits import Limits
from ._startup.gcpause import paused_gc
from .runtime.objects import (Cycler, GlobalFunction, GuardedNamespace, Joiner, Namespace,
                              TemplateDict, TemplateReference, Undefined, raise_template_error,
                              wants_environment)
from .runtime.sandbox import Sandbox

_CACHE_SIZE = 400
# limits.ensure_recursion_headroom is called only when a render may need more than Python's
# default recursion limit: raised limits, or a limit lowered below the default
_DEFAULT_RECURSION = _limits.DEFAULT_LIMITS.max_recursion
_DEFAULT_NESTING = _limits.DEFAULT_LIMITS.max_nesting
_unwatch = _deadline.unwatch_id
#: The extensions this engine has, by Jinja2's import path or short name -> the statement
#: each adds (None: loopcontrols' break and continue, always there). ``generation`` is
#: transformers' ``{% generation %}`` (its AssistantTracker, which has no import path).
_EXTENSIONS = {"jinja2.ext.do": "do", "do": "do", "jinja2.ext.loopcontrols": None,
               "loopcontrols": None, "generation": "generation"}


def _load_filters() -> Dict[str, Callable[..., Any]]:
    from .runtime.filters.common import FILTERS

    return dict(FILTERS)


def _load_tests() -> Dict[str, Callable[..., Any]]:
    from .runtime.tests import TESTS

    return dict(TESTS)


class Environment:
    """Settings shared by the templates made from it, plus the filter/test/global tables.

    ``filters``, ``tests`` and ``globals`` are plain dicts: add to them before calling
    :meth:`from_string`. ``immutable=True`` refuses list/dict mutators (``append``, ``update``,
    ...) with SecurityError, as transformers' ImmutableSandboxedEnvironment does.
    ``extensions`` takes Jinja2's names: ``"jinja2.ext.do"`` (or ``"do"``) accepts
    ``{% do expr %}``; ``"jinja2.ext.loopcontrols"`` is accepted and always on; and
    ``"generation"`` accepts transformers' ``{% generation %}`` (on in
    :func:`chat_environment`; like Jinja2's, a plain environment does not know the tag).
    """

    def __init__(self, trim_blocks: bool = False, lstrip_blocks: bool = False,
                 keep_trailing_newline: bool = False, undefined: type = Undefined,
                 immutable: bool = False, limits: Optional[Limits] = None,
                 parse_cache: bool = True, extensions: Sequence[str] = ()) -> None:
        unknown = [e for e in extensions if e not in _EXTENSIONS]
        if unknown:
            raise ValueError(f"unknown extension {unknown[0]!r} (available: "
                             f"{', '.join(sorted(_EXTENSIONS))})")
        #: the statements the extensions add (`do`, `generation`); break/continue are always on
        self.extension_tags: Tuple[str, ...] = tuple(sorted(
            {_EXTENSIONS[e] for e in extensions} - {None}))
        self.trim_blocks = trim_blocks
        self.lstrip_blocks = lstrip_blocks
        self.keep_trailing_newline = keep_trailing_newline
        self.undefined = undefined
        self.immutable = immutable
        self.limits = limits if limits is not None else Limits()
        #: keep parsed templates in the user's cache directory (see syntax/parse_cache.py)
        self.parse_cache = parse_cache
        self.sandbox = Sandbox(immutable, undefined)
        with paused_gc():  # the first environment imports the filters and tests
            self.filters: Dict[str, Callable[..., Any]] = _load_filters()
            self.tests: Dict[str, Callable[..., Any]] = _load_tests()
        self.globals: Dict[str, Any] = default_globals(self)
        self._cache: Dict[Tuple[Any, ...], Any] = {}  # insertion-ordered: oldest first

    # -- templates -----------------------------------------------------------------------
    def from_string(self, source: str, name: Optional[str] = None) -> "Template":
        """Parse and compile ``source``; raises :class:`TemplateSyntaxError` when malformed."""
        return Template(source, environment=self, name=name)

    def _compile(self, source: str, name: Optional[str]) -> Callable[..., Any]:
        if not isinstance(source, str):
            raise TypeError(f"template source must be str, not {type(source).__name__}")
        if len(source) > self.limits.max_source_size:
            raise _source_too_large(source, name, self.limits.max_source_size)
        key = (source, name, self.trim_blocks, self.lstrip_blocks, self.keep_trailing_newline,
               self.extension_tags)
        cached = self._cache.pop(key, None)
        if cached is not None:
            self._cache[key] = cached  # most recently used goes last
            return cached
        _limits.ensure_recursion_headroom(self.limits)
        parse_token = _limits.activate_parse(self.limits)  # the deadline of this parse
        try:
            with paused_gc():  # see gcpause
                # (no retry without the cache when compiling fails: the parse cache checks
                # every node, field and constant it loads against what the parser makes,
                # and its key names this engine, so an error here is the compiler's, and
                # parsing again would only hide it)
                ast = self._parse(source, name)
                compiled = Compiler(self).compile_template(ast)  # (root, fresh, blocks)
        except TemplateError as exc:
            exc._attach_source(name, source)
            raise
        except RecursionError:
            raise self.limits.exceeded("max_nesting", "template nested too deeply") from None
        finally:
            _limits.deactivate(parse_token)
        self._cache[key] = (ast, compiled)
        if len(self._cache) > _CACHE_SIZE:
            del self._cache[next(iter(self._cache))]
        return self._cache[key]

    def _parse(self, source: str, name: Optional[str]) -> Any:
        """The AST: from the persistent cache when it holds this source, else parsed."""
        options = (self.trim_blocks, self.lstrip_blocks, self.keep_trailing_newline,
                   self.limits.max_nesting, self.extension_tags)
        key = None
        if self.parse_cache:
            from .syntax import parse_cache as diskcache

            if diskcache.enabled():
                key = diskcache.entry_key(source, options, _engine_id())
                ast = diskcache.load(key)
                if ast is not None:
                    return ast
        from .syntax.parser import parse

        ast = parse(source, name=name, trim_blocks=self.trim_blocks,
                    lstrip_blocks=self.lstrip_blocks,
                    keep_trailing_newline=self.keep_trailing_newline,
                    max_nesting=self.limits.max_nesting, extension_tags=self.extension_tags)
        if key is not None:
            from .syntax import parse_cache as diskcache

            diskcache.store(key, ast)
        return ast

    # -- helpers for filters and tests --------------------------------------------------
    def call_filter(self, name: str, value: Any, args: tuple = (),
                    kwargs: Optional[Mapping[str, Any]] = None) -> Any:
        """Apply the filter called ``name`` (as ``value|name(*args, **kwargs)``)."""
        return self._call_table("filter", self.filters, name, value, args, kwargs)

    def call_test(self, name: str, value: Any, args: tuple = (),
                  kwargs: Optional[Mapping[str, Any]] = None) -> Any:
        """Apply the test called ``name`` (as ``value is name(*args, **kwargs)``)."""
        return self._call_table("test", self.tests, name, value, args, kwargs)

    def test_caller(self, name: str, args: tuple = (),
                    kwargs: Optional[Mapping[str, Any]] = None) -> Callable[[Any], Any]:
        """``lambda value: self.call_test(name, value, args, kwargs)``, with what does not
        depend on the value (the lookup, the charge for the arguments) worked out once:
        ``select``/``selectattr`` call one test per item."""
        function = self.tests.get(name)
        if function is None or type(self).call_test is not Environment.call_test:
            return lambda value: self.call_test(name, value, args, kwargs)
        # charged as _call_table charges a test (kept in step with it: a test has no input
        # cost, so what depends on the item is the result's size alone)
        fixed_cost = CALL_STEPS // 3 + sum(map(size_cost, args))
        keywords = dict(kwargs or {})
        takes_environment = wants_environment(function)
        charge = _limits.charge

        def call_test(value: Any) -> Any:
            charge(fixed_cost)
            if takes_environment:
                result = function(self, value, *args, **keywords)
            else:
                result = function(value, *args, **keywords)
            if result is not value:
                charge(size_cost(result))
            return result

        return call_test

    def _call_table(self, kind: str, table: Dict[str, Any], name: str, value: Any,
                    args: tuple, kwargs: Optional[Mapping[str, Any]]) -> Any:
        function = table.get(name)
        if function is None:
            from .exceptions import TemplateRuntimeError

            raise TemplateRuntimeError(f"No {kind} named {name!r}.")
        # `map('upper')` and `select('in', big)` call filters per item: charged per call,
        # as the template's own filter calls are (guard/prices.py); test_caller charges the same
        input_cost = filter_input_cost(name) if kind == "filter" else None
        _limits.charge(CALL_STEPS // 3 + (input_cost(value) if input_cost is not None else 0)
                       + sum(map(size_cost, args)))
        if wants_environment(function):
            result = function(self, value, *args, **(kwargs or {}))
        else:
            result = function(value, *args, **(kwargs or {}))
        if result is not value:
            _limits.charge(size_cost(result))
        return result

    def getattr(self, obj: Any, name: str) -> Any:
        """``obj.name`` with the sandbox's rules."""
        return self.sandbox.getattr(obj, name)

    def getitem(self, obj: Any, key: Any) -> Any:
        """``obj[key]`` with the sandbox's rules."""
        return self.sandbox.getitem(obj, key)


def _source_too_large(source: str, name: Optional[str], limit: int) -> Exception:
    from .exceptions import SourceTooLargeError

    line = source.count("\n", 0, limit) + 1
    column = limit - (source.rfind("\n", 0, limit) + 1) + 1
    return SourceTooLargeError(
        f"template source of {len(source):,} characters refused (limit "
        f"Limits.max_source_size={limit:,}; raise it with Environment(limits=Limits("
        "max_source_size=...)) if this template is trusted)", line, column, name, source)


_ENGINE_ID: Optional[str] = None


def _engine_id() -> str:
    """Version and grammar: a cached AST is only reused by the engine that made it."""
    global _ENGINE_ID
    if _ENGINE_ID is None:
        import os

        from . import __version__
        from .syntax.lalr import grammar_identity

        # The AST's shape is defined by the grammar, the parser and the node classes. Their
        # files are told apart by size and modification time, as Python tells a stale .pyc
        # (reading and hashing them cost a cold start about 0.3 ms).
        here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "syntax")
        stamps = []
        for module in ("nodes.py", "parser.py", "scanner.py", "lalr.py", "_lalr_tables.py",
                       "parse_cache.py"):
            try:
                info = os.stat(os.path.join(here, module))
                stamps.append(f"{info.st_size}.{info.st_mtime_ns}")
            except OSError:
                stamps.append("-")
        _ENGINE_ID = f"{__version__}:{grammar_identity()}:{','.join(stamps)}"
    return _ENGINE_ID


class Template:
    """A compiled template. ``Template(source, **env_options)`` is a shortcut that makes its
    own :class:`Environment`; normally use ``env.from_string(source)``."""

    def __init__(self, source: str, environment: Optional[Environment] = None,
                 name: Optional[str] = None, **env_options: Any) -> None:
        if environment is None:
            environment = Environment(**env_options)
        elif env_options:
            raise TypeError("pass either an environment or environment options, not both")
        self.environment = environment
        self.source = source
        self.name = name
        self.ast, (self._root, self._fresh, self._blocks) = environment._compile(source, name)
        # the root's generated function once it is made (compiler.hot_switching): a render
        # then calls it directly, not through the switch
        self._hot_root = getattr(self._root, "hot_state", None)

    def render(self, *args: Any, **kwargs: Any) -> str:
        """Render with variables given as a dict and/or keyword arguments."""
        # ``kwargs`` is a dict of this call's own: the render may add to it (undefined names,
        # ``self``) without touching the caller's
        return self._render(dict(*args, **kwargs) if args else kwargs, False)[0]

    def render_with_spans(self, *args: Any, **kwargs: Any) -> Tuple[str, List[Tuple[int, int]]]:
        """Render and return ``(text, spans)``: the ``(start, end)`` character offsets of the
        output of each ``{% generation %}`` block, as transformers records them."""
        return self._render(dict(*args, **kwargs), True)

    def render_with_provenance(self, *args: Any, **kwargs: Any) -> "ProvenanceResult":
        """Render and say where every output character came from.

        Returns a :class:`~minijinja_py.provenance.origins.ProvenanceResult`: ``text`` (the same as
        :meth:`render`'s), ``runs`` covering it in order, each ``(start, end, origin)`` with
        the origin "template" (line and column of the literal), "input" (a verbatim copy of
        the variable at ``origin.path``, e.g. ``messages[3].content``, from character
        ``origin.offset``), "derived" (computed from the inputs ``origin.paths``) or "unknown",
        and the ``{% generation %}`` spans. The template is compiled a second time for this
        (once, on first use); :meth:`render` is not affected.

        >>> result = Template("Hi {{ name|upper }}! {{ name }}").render_with_provenance(name="Al")
        >>> [(run.start, run.end, run.origin.kind) for run in result.runs]
        [(0, 3, 'template'), (3, 5, 'derived'), (5, 7, 'template'), (7, 9, 'input')]
        """
        from .provenance.origins import ProvenanceResult, runs_of, wrap_variables
        from .provenance.compiler import ProvenanceContext

        compiled = self._provenance_code()
        variables = dict(*args, **kwargs)
        # only what the template can name can reach the output: the rest is passed as it is.
        # Copying the data is linear in its size, under the deadline (it may be a client's).
        read = self._provenance_names
        token = _limits.activate_parse(self.environment.limits, "render")
        try:
            variables.update(wrap_variables({name: value for name, value in variables.items()
                                             if name in read}))
        except TemplateError as exc:
            exc._attach_source(self.name, self.source)
            raise
        finally:
            _limits.deactivate(token)
        text, spans = self._render(variables, True, compiled, ProvenanceContext)
        return ProvenanceResult(str.__str__(text), None, spans, raw=runs_of(text))

    def _provenance_code(self) -> Tuple[Any, Tuple[str, ...], Dict[str, Any]]:
        """(root, fresh names, blocks) compiled by the provenance compiler, made once."""
        compiled = getattr(self, "_provenance_compiled", None)
        if compiled is None:
            from .syntax import nodes as n
            from .provenance.compiler import ProvenanceCompiler, locate_literals

            env = self.environment
            parse_token = _limits.activate_parse(env.limits)
            try:
                with paused_gc():  # as the plain compile (see gcpause): 6x faster on 1 MB
                    ast = locate_literals(env._parse(self.source, self.name))
                    compiled = ProvenanceCompiler(env).compile_template(ast)
                    self._provenance_names = frozenset(
                        node.name for node in ast.find_all(n.Name))
            except TemplateError as exc:
                exc._attach_source(self.name, self.source)
                raise
            finally:
                _limits.deactivate(parse_token)
            self._provenance_compiled = compiled
        return compiled

    def _render(self, variables: Dict[str, Any], track_spans: bool,
                compiled: Any = None, context_class: Any = RenderContext
                ) -> Tuple[str, List[Tuple[int, int]]]:
        # (every render of every template runs this: the limits' bookkeeping is written out
        # here rather than called, see limits.activate and deadline.watch)
        env = self.environment
        out: List[str] = []
        ctx = context_class(env, out, track_spans)
        if compiled is None:
            root_code, fresh, blocks = self._root, self._fresh, self._blocks
            hot = self._hot_root
            if hot is not None and hot[1] is not None:
                root_code = hot[1]
        else:
            root_code, fresh, blocks = compiled
        if fresh:
            variables.update(starting_undefined(fresh, env.undefined))
        root = Scope(variables, Scope(env.globals, None, ctx), ctx)
        if blocks and "self" not in variables:  # `self.name()` renders a block again
            variables["self"] = TemplateReference(blocks, root)
        limits = env.limits
        if limits.max_recursion > _DEFAULT_RECURSION or limits.max_nesting > _DEFAULT_NESTING \
                or _getrecursionlimit() < _limits.PYTHON_RECURSION_LIMIT:
            _limits.ensure_recursion_headroom(limits)
        in_progress = _limits.in_progress
        limits_token = in_progress.work  # limits.activate(ctx): the sandbox too, see there
        in_progress.work = ctx
        max_seconds = limits.max_seconds
        if max_seconds is not None:  # Limits.deadline(), written out: every render asks
            ctx.deadline = _monotonic() + max_seconds
            _deadline.watch(ctx, max_seconds)
        try:
            root_code(root, out)
            if ctx.output_size > ctx.max_output:
                ctx.check_output()  # raises
            text = ctx.output(out)
        except TemplateError as exc:
            exc._attach_source(self.name, self.source)
            raise
        except Exception as exc:  # a last net: nothing but TemplateError leaves render()
            err = wrap_python_error(exc)
            err._attach_source(self.name, self.source)
            raise err from exc
        finally:
            if ctx.deadline is not None:
                _unwatch(id(ctx), None)  # deadline.unwatch(ctx)
            in_progress.work = limits_token  # limits.deactivate
        return text, (ctx.spans or [])

    def literal_strings(self) -> frozenset:
        """Every piece of text the template writes as it is and every string constant in its
        expressions (what it can print without reading a variable): the chat layer looks in
        them for the control tokens a template writes itself."""
        from .syntax import nodes as n

        found = set()
        for node in self.ast.find_all((n.TemplateData, n.Const)):
            value = node.data if isinstance(node, n.TemplateData) else node.value
            if isinstance(value, str):
                found.add(value)
        return frozenset(found)

    def __repr__(self) -> str:
        return f"<Template {self.name or 'memory'!r}>"


# ---- globals ---------------------------------------------------------------------------------
def default_globals(env: Environment) -> Dict[str, Any]:
    """Jinja2's default globals: range, dict, lipsum, cycler, joiner, namespace."""

    def safe_range(*args: Any) -> range:
        result = range(*args)
        # len() itself overflows past sys.maxsize items: count with Python integers
        length = max(0, (result.stop - result.start + result.step - (1 if result.step > 0
                                                                    else -1)) // result.step)
        if length > env.limits.max_range:
            raise env.limits.exceeded(
                "max_range", f"range of {length:,} items refused (the sandbox blocks ranges"
                f" larger than {env.limits.max_range:,})")
        return result

    return {
        "range": GlobalFunction("safe_range", safe_range, pure=True),  # the names Jinja2 prints
        # Instances and plain functions only, never the classes: a class reached by a
        # template is shared by every render in the process (`cycler.reset(cycler)` would
        # replace a method for all of them) and its unbound methods write to any object
        # (`dict.update(messages[0], ...)` in the immutable sandbox).
        "dict": TemplateDict(),  # calls like `dict`; `dict.fromkeys` works, nothing else
        "lipsum": GlobalFunction("generate_lorem_ipsum", generate_lorem_ipsum,
                                pure=True),
        "cycler": GlobalFunction("cycler", Cycler, pure=True),
        "joiner": GlobalFunction("joiner", Joiner, pure=True),
        "namespace": GlobalFunction("namespace", Namespace, pure=True),
        "self": TemplateReference(),
    }


_LOREM_WORDS = ("lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor "
                "incididunt ut labore et dolore magna aliqua enim ad minim veniam quis nostrud "
                "exercitation ullamco laboris nisi aliquip ex ea commodo consequat duis aute "
                "irure in reprehenderit voluptate velit esse cillum fugiat nulla pariatur "
                "excepteur sint occaecat cupidatat non proident sunt culpa qui officia deserunt "
                "mollit anim id est laborum").split()


def generate_lorem_ipsum(n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> str:
    """Random lorem-ipsum paragraphs (Jinja2's ``lipsum``).

    Drawn from the operating system's randomness (``random.SystemRandom``), not the host's
    global ``random`` state, which a template could otherwise observe and advance."""
    import random as _random

    from .guard.limits import charge, check_string_size
    from .runtime.markup import Markup

    random = _random.SystemRandom()
    check_string_size(int(n) * int(max) * 12)
    charge(int(n) * int(max) * 10)  # a draw from the OS per word: about a microsecond
    paragraphs = []
    for _ in range(int(n)):
        words = [random.choice(_LOREM_WORDS) for _ in range(random.randint(min, max))]
        text = " ".join(words).capitalize()
        if not text.endswith("."):
            text += "."
        paragraphs.append(text)
    if not html:
        return "\n\n".join(paragraphs)
    return Markup("\n".join(f"<p>{p}</p>" for p in paragraphs))


# ---- transformers' configuration -------------------------------------------------------------
def make_strftime_now(now: Union[None, _datetime.datetime, Callable[[], Any]]
                      ) -> Callable[[str], str]:
    """``strftime_now(format)``: formats ``now`` (a datetime, a callable, or the local clock)."""

    def strftime_now(format: str) -> str:
        moment = now() if callable(now) else now
        if moment is None:
            import datetime

            moment = datetime.datetime.now()
        return moment.strftime(format)

    return strftime_now


def chat_environment(now: Union[None, _datetime.datetime, Callable[[], Any]] = None,
                     **env_options: Any) -> Environment:
    """An Environment configured exactly like transformers' chat-template environment.

    Immutable sandbox, ``trim_blocks`` and ``lstrip_blocks`` on, ``break``/``continue``,
    ``{% generation %}``, transformers' ``tojson`` (the builtin one), the globals
    ``raise_exception`` and ``strftime_now`` (formatting ``now``), and transformers' own
    ``dict`` (a callable with ``fromkeys``) and ``namespace`` (no ``_`` names).
    ``env_options`` override the Environment settings (``extensions`` replaces
    ``["generation"]``).
    """
    options: Dict[str, Any] = {"trim_blocks": True, "lstrip_blocks": True, "immutable": True,
                               "extensions": ["generation"]}
    options.update(env_options)
    env = Environment(**options)
    env.globals["raise_exception"] = GlobalFunction("raise_exception", raise_template_error,
                                                    pure=True)
    env.globals["namespace"] = GlobalFunction("namespace", GuardedNamespace, pure=True)
    env.globals["strftime_now"] = GlobalFunction("strftime_now", make_strftime_now(now),
                                                 pure=not callable(now))
    return env
