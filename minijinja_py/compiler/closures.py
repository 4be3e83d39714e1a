"""Compiler: walks the AST once and turns every node into a Python closure.

Third step of the flow. Expressions become ``f(scope) -> value``; statements become
``f(scope, out) -> signal`` where ``out`` is the list of output pieces and ``signal`` is None,
BREAK or CONTINUE. Dispatch happens once per node here, through the ``_EXPRESSIONS`` and
``_STATEMENTS`` tables, so rendering is only closure calls.

Scoping follows Jinja2: a for-loop iteration, a macro call and a ``with`` block get a child
:class:`Scope`; ``if`` does not; the template's own scope holds the render variables and
top-level ``set``s, its parent holds the globals. Names are resolved at render time by walking
the chain, so a macro sees the latest value of a template variable (as Jinja2's do).

Errors: the innermost failing expression locates the error once (``TemplateError._locate``);
Python errors from operators and builtins become TemplateRuntimeError subclasses there.

Why one module of this size: each node's closure carries its semantics, its limits and
step charges, and the ``spec`` codegen.py reads (a class of compiler/specs.py), and closures
of one template share the compiler's state (frames, symbols, the hot switching); the helpers
they call are in arith, budget, methods, runtime, sandbox and symbols.
"""

from __future__ import annotations

import itertools
import math
import operator
from functools import partial
TYPE_CHECKING = False  # typing is not imported at run time: it costs milliseconds
if TYPE_CHECKING:  # pragma: no cover
    from typing import (Any, Callable, Dict, FrozenSet, Iterable, List, Optional, Tuple,
                        TypeVar, Union)

    from . import specs as kinds  # at run time, records (see _Kinds)
    from .specs import Spec

    ClosureT = TypeVar("ClosureT", bound=Callable[..., Any])

from ..syntax import nodes as n
from ..exceptions import (LimitExceededError, TemplateAssertionError, TemplateError,
                          TemplateRuntimeError, TemplateSyntaxError, TemplateTypeError,
                          wrap_python_error)
from ..runtime.operators import apply as arith_apply
from ..guard.prices import (CALL_STEPS, CHARS_SHIFT, FILTERED_ITEM_STEPS, FRESH_ITEM_METHODS,
                            FRESH_ITEM_STEPS, ITEMS_SHIFT, LOOP_STEPS, METHOD_WEIGHTS,
                            SLOW_LOOKUP_STEPS, filter_input_cost, size_cost)
from .cost import body_cost
from ..guard.collisions import (STR_HASH_SECRET, check_compared, check_lookup, check_membership,
                                check_table, literal_allowed, literal_steps, lookup_steps)
from ..guard.limits import (check_comparable, check_stored_tuples, check_string_size,
                            check_tuple_depth, materialise)
from ..runtime.methods import METHODS, MUTATORS
from .symbols import analyse_frame
from ..runtime.sandbox import DIRECT_ATTRIBUTES, dict_item_only
from ..runtime.objects import (MISSING, NAMESPACE_TYPES, BoundMethod, ChainableUndefined,
                               LoopContext, Macro, Namespace, StrictUndefined, Undefined,
                               to_text as _to_text, unsafe_undefined, wants_environment)

#: A loop body is compiled to Python (codegen.py) once it has run this many times (over all
#: renders).
HOT_ITERATIONS = 40
#: A template's own body, a macro's or a block's, once it has run this many times.
HOT_CALLS = 16
#: During a template's first render both thresholds are this many times higher. Generating
#: and compiling Python costs milliseconds (jamba's `is_param_set`, called a few times per
#: message, made its first render with tools 1.3 -> 4.5 ms), which a template rendered once,
#: as in a fresh process, never earns back; rendered again, a template generates what is
#: hot from its second render on, the runs of the first counted.
FIRST_RENDER_FACTOR = 10


# ---- fast-path specs: described while compiling, built when codegen first reads them -------
# A closure whose fast path generated code writes out inline carries a spec: one class of
# compiler/specs.py per kind, the typed contract codegen reads. A cold start compiles its
# template but generates no code (that waits for HOT_CALLS runs), and defining those classes
# costs about 0.6 ms of a 20 ms cold start; so the compiler writes ``kinds.Print(items, node)``
# and at run time ``kinds`` only records the kind and its fields (a _Described), which
# fastpath_specs.spec_of builds into the instance when codegen first reads it. For static
# analysis ``kinds`` is the module itself: every construction is checked against its class.
class _Described:
    """A spec as the compiler wrote it, the kind's name and its fields; built once, on the
    first read (two closures sharing a description share the spec)."""

    __slots__ = ("kind", "fields", "built")

    def __init__(self, kind: str, *fields: Any) -> None:
        self.kind = kind
        self.fields = fields
        self.built: Optional[Spec] = None

    def build(self) -> Spec:
        """The spec itself (for fastpath_specs.spec_of), fields described in turn built."""
        built = self.built
        if built is None:
            from . import specs as fastpath_specs

            fields = [part.build() if type(part) is _Described else part
                      for part in self.fields]
            built = self.built = getattr(fastpath_specs, self.kind)(*fields)
        return built


class _Kinds:
    """``kinds`` at run time: ``kinds.Print(items, node)`` describes a Print spec."""

    def __getattr__(self, kind: str) -> Callable[..., _Described]:
        describe = partial(_Described, kind)
        setattr(self, kind, describe)  # asked once per kind
        return describe


if not TYPE_CHECKING:
    kinds = _Kinds()


def attach(closure: ClosureT, spec: Optional[Spec]) -> ClosureT:
    """Give ``closure`` its fast path ``spec`` (None: none) and return it."""
    closure.spec = spec  # type: ignore[attr-defined]  # the one place a spec is stored
    return closure


def _spec_described(closure: Any) -> Any:
    """The spec described for ``closure``, not built (None: it has none)."""
    return getattr(closure, "spec", None)


def _static_arguments(args: Any) -> Tuple[Optional[List[Expr]], Optional[list]]:
    """The positional and keyword argument closures of a call without ``*``/``**`` (its
    Arguments spec, read while compiling), or (None, None)."""
    described = getattr(args, "spec", None)
    if described is None or described.kind != "Arguments":
        return None, None
    positional, keywords = described.fields
    return positional, keywords


def _hot_enough(runs: float, hot_after: float, renders: List[Any]) -> bool:
    """Whether a body or loop that has run ``runs`` times (items, for a loop) is generated
    now: past ``hot_after``, and past FIRST_RENDER_FACTOR times it while the template is in
    its first render (``renders``: the hot state of the template's own body, see
    Compiler.renders)."""
    return runs >= hot_after and (renders[0] > 1 or runs >= hot_after * FIRST_RENDER_FACTOR)


# codegen.py (and compile()) only once something is hot: a cold start never imports it
def generate_body(body: Any, binds: Any = None) -> Any:
    from .codegen import generate

    return generate(body, binds)


def generate_loop(*args: Any) -> Any:
    from .codegen import generate_loop as generate

    return generate(*args)


def generate_charging_loop(*args: Any) -> Any:
    from .codegen import generate_charging_loop as generate

    return generate(*args)

BREAK = "break"
CONTINUE = "continue"

if TYPE_CHECKING:  # pragma: no cover
    Expr = Callable[["Scope"], Any]
    Stmt = Callable[["Scope", list], Any]


class Scope:
    """One level of variables, chained to the enclosing level."""

    __slots__ = ("vars", "parent", "ctx")

    def __init__(self, variables: Dict[str, Any], parent: Optional["Scope"],
                 ctx: "RenderContext") -> None:
        self.vars = variables
        self.parent = parent
        self.ctx = ctx

    def lookup(self, name: str) -> Any:
        scope: Optional[Scope] = self
        while scope is not None:
            value = scope.vars.get(name, MISSING)
            if value is not MISSING:
                return value
            scope = scope.parent
        return MISSING


class RenderContext:
    """Per-render state: the environment's settings, counters, the root output, spans."""

    __slots__ = ("env", "sandbox", "undefined", "limits", "steps", "max_steps", "depth",
                 "output_size", "max_output", "root_out", "spans", "deadline", "expired",
                 "measured_pieces", "measured_length", "autoescape")

    def __init__(self, env: Any, root_out: list, track_spans: bool) -> None:
        self.env = env
        self.sandbox = env.sandbox
        self.undefined = env.undefined
        self.limits = env.limits
        self.steps = 0
        self.max_steps = env.limits.max_steps
        self.depth = 0
        # Characters appended to any output list so far (captured macro output counts again
        # when re-emitted: an overestimate, which is the safe side). Checked at every step and
        # before every join, so no piece list can be joined into something over the limit.
        self.output_size = 0
        self.max_output = env.limits.max_output_size
        self.root_out = root_out
        self.spans: Optional[List[Tuple[int, int]]] = [] if track_spans else None
        # Wall-clock deadline (time.monotonic()), watched by deadline.py; None: no deadline.
        self.deadline: Optional[float] = None
        self.expired = False
        # Pieces of root_out measured so far and their length (root_out only grows): each
        # {% generation %} block measures only what was added since the last one.
        self.measured_pieces = 0
        self.measured_length = 0
        # Inside `{% autoescape true %}` now (Jinja2's eval context): macro output and `set`
        # captures made meanwhile are Markup
        self.autoescape = False

    def root_length(self) -> int:
        """Characters the top-level output holds so far."""
        pieces = self.root_out
        count = len(pieces)
        if count > self.measured_pieces:
            self.measured_length += sum(map(len, pieces[self.measured_pieces:count]))
            self.measured_pieces = count
        return self.measured_length

    activity = "render"  # what check_deadline() calls the work in progress
    #: Joins output pieces (a provenance render keeps their origins: see provenance.py).
    join = staticmethod("".join)
    #: Joins the render's own output (a provenance render works out its origins then).
    output = staticmethod("".join)

    @staticmethod
    def safe(text: str) -> Any:
        """Text made inside ``{% autoescape true %}`` (a macro's output, a ``set`` capture):
        already escaped, so Markup."""
        from ..runtime.markup import Markup

        return Markup(text)

    def expire(self) -> None:
        """Called by the watchdog thread once the deadline has passed: every step check
        from now on fails (see deadline.py), and the error says why."""
        self.expired = True
        self.max_steps = -1

    def step(self, steps: int = 1) -> None:
        """Charge ``steps`` and check the output size (a loop iteration, a call)."""
        self.charge(steps)
        if self.output_size > self.max_output:
            raise self.limits.exceeded("max_output_size", "rendered output too large")

    def charge(self, steps: int) -> None:
        """Count ``steps`` of work (see guard/prices.py) against ``Limits.max_steps``."""
        self.steps += steps
        if self.steps > self.max_steps:
            raise self.too_much_work()

    def too_much_work(self) -> LimitExceededError:
        if self.expired:
            return self.limits.timed_out("render")
        return self.limits.exceeded(
            "max_steps", f"the render needs more than {self.max_steps:,} steps of work (loop "
            "iterations, macro calls and data processed)")

    def check_output(self) -> None:
        """Before joining pieces: refuse output over the limit."""
        if self.output_size > self.max_output:
            raise self.limits.exceeded("max_output_size", "rendered output too large")

    def captured(self, buffer: list, before: int) -> str:
        """Join the output captured since the output size was ``before`` (a macro call, a set
        or filter block): it is counted again where it is printed, so it leaves the output
        count here and is charged as work instead (it is a string the render built)."""
        self.check_output()
        text = self.join(buffer)
        self.output_size = before
        self.charge(len(text) >> CHARS_SHIFT)
        return text

    def enter(self) -> None:
        self.depth += 1
        if self.depth > self.limits.max_recursion:
            self.depth = 0
            raise self.limits.exceeded("max_recursion", "macro/loop recursion too deep")


def _locate(exc: BaseException, node: n.Node) -> TemplateError:
    """The located TemplateError for ``exc`` raised while evaluating ``node``."""
    err = wrap_python_error(exc)
    err._locate(node.lineno, node.column)
    return err


def to_output(value: Any) -> str:
    """How ``{{ value }}`` prints: Python's str(), as Jinja2 with autoescape off."""
    return str(value)


#: Tests without arguments whose work grows with their operand (the others look at its type).
_SCANNING_TESTS = frozenset({"lower", "upper", "odd", "even", "escaped"})
#: Operand types a comparison never needs to price (scalars: constant time).
_FREE_TO_COMPARE = frozenset({int, float, bool, type(None)})
#: Operators whose result codegen.py computes inline for two ints (``-``, ``%``, ``//``: no
#: size check needed before; the result is range-checked as arith.apply does).
_INT_FAST_OPS = frozenset({"-", "%", "//"})

_COMPARE: Dict[str, Callable[[Any, Any], Any]] = {
    "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
    ">": operator.gt, ">=": operator.ge,
    "in": lambda a, b: a in b, "notin": lambda a, b: a not in b,
}


class Compiler:
    """Compiles one template's AST for one environment."""

    #: Hot loop bodies become generated Python (codegen.py); the provenance compiler, whose
    #: values carry origins that generated code would not keep, turns this off.
    generates_code = True
    #: How ``{{ value }}`` and ``~`` print a value that is not a str, and how ``~`` joins the
    #: pieces: the provenance compiler swaps in versions that keep origins.
    printer = staticmethod(_to_text)
    join_text = staticmethod("".join)
    fold_text = staticmethod(str)  # a piece of `~` folded while compiling, as Jinja2 makes it
    expressions: Dict[type, Callable[["Compiler", Any], Expr]]  # node type -> method
    statements: Dict[type, Callable[["Compiler", Any], Stmt]]

    def __init__(self, env: Any) -> None:
        self.env = env
        self.sandbox = env.sandbox
        self.in_if = 0  # inside an `if`, unknown filters/tests fail at render time (Jinja2)
        self.facts: Dict[int, int] = {}  # node id -> what its subtree holds (body_facts)
        self.blocks: Dict[str, Callable[[Any], str]] = {}  # {% block %} name -> self.name()
        # Jinja2's eval context while compiling: whether output is escaped, as the innermost
        # `{% autoescape %}` whose flag is computed while compiling says; and whether the
        # code is *volatile*, inside a block whose flag is only known at render time (then
        # values are escaped as the flag is then, see escaping_output)
        self.autoescape = False
        self.volatile = False
        self.outer_refs: FrozenSet[str] = frozenset()  # names enclosing frames know
        # Names certainly bound in the innermost scope at run time (loop targets, macro
        # parameters): reading them needs no walk up the scope chain.
        self.local_names: List[FrozenSet[str]] = [frozenset()]
        # frames being compiled: 1 in the template's own body (a loop, macro, block, `with`,
        # filter or set block, call block or generation block is a frame of its own)
        self.frame_depth = 0
        # What Python refuses in the code Jinja2 generates (its SyntaxError): found while
        # compiling, raised once the whole template has compiled, since Jinja2's own compile
        # errors come first; a parameter named twice before the rest (Python's symbol table
        # sees every function before its compiler sees the code), then the first of a keyword
        # given twice and a break/continue outside a loop (see refuse_in_code).
        self.duplicate_parameter: Optional[TemplateSyntaxError] = None
        self.refused_code: Optional[TemplateSyntaxError] = None
        # Whether a break or continue here stops a loop: in a loop's body, and in an `else`
        # or a block that Jinja2 writes in the same Python function (an `if`, `with`,
        # `filter`, `set` or `autoescape` block); not in what it writes as a function of its
        # own (a macro, call block, `{% block %}`, `{% generation %}` or the `else` of a
        # recursive loop), where Python refuses the statement.
        self.in_loop = False
        # The template's own body's hot state (hot_switching): its runs, one per render
        # started (until it is generated, after HOT_CALLS renders), and its generated
        # function. Every hot threshold reads the runs (see FIRST_RENDER_FACTOR).
        self.renders: List[Any] = [0, None]

    def frame(self, statements: List[n.Node], declared: Tuple[str, ...] = (),
              extra: Tuple[n.Node, ...] = ()) -> Tuple[Stmt, Tuple[str, ...]]:
        """Compile the body of a new frame; also return the names that start undefined.

        ``extra`` expressions (macro defaults) are compiled in the frame too: call
        ``self.compiled_extra`` afterwards for them.
        """
        symbols = analyse_frame(statements, self.outer_refs, declared, extra)
        self.frame_depth += 1
        saved = self.outer_refs
        self.outer_refs = symbols.refs()
        # Jinja2 defers unknown filters and tests only in the frame of the `if` that guards
        # them; a loop, macro or block inside it is a frame of its own, checked when compiled
        saved_in_if, self.in_if = self.in_if, 0
        # Defaults run while the parameters are still being bound: no direct local reads.
        self.local_names.append(frozenset())
        try:
            compiled_extra = [self.expr(e) for e in extra]
        finally:
            self.local_names.pop()
        self.local_names.append(frozenset(declared))
        try:
            body = self.body(statements)
        finally:
            self.outer_refs = saved
            self.in_if = saved_in_if
            self.local_names.pop()
            self.frame_depth -= 1
        self.compiled_extra = compiled_extra  # after the body: nested frames overwrite it
        self.frame_stores = frozenset(symbols.stores)  # the names the frame binds
        return body, tuple(sorted(symbols.starts_undefined() - set(declared)))

    def frame_where(self, loop_controls: bool, statements: List[n.Node],
                    declared: Tuple[str, ...] = (), extra: Tuple[n.Node, ...] = ()
                    ) -> Tuple[Stmt, Tuple[str, ...]]:
        """:meth:`frame`, with break and continue allowed in it or not (see ``in_loop``)."""
        saved, self.in_loop = self.in_loop, loop_controls
        try:
            return self.frame(statements, declared, extra)
        finally:
            self.in_loop = saved

    def refuse_in_code(self, message: str, node: n.Node) -> None:
        """Python's SyntaxError compiling Jinja2's code for ``node``, raised once the whole
        template has compiled (the first one met)."""
        if self.refused_code is None:
            self.refused_code = TemplateSyntaxError(message, node.lineno, node.column)

    def is_local(self, name: str) -> bool:
        return name in self.local_names[-1]

    # -- entry points --------------------------------------------------------------------
    def compile_template(self, template: n.Template
                         ) -> Tuple[Stmt, Tuple[str, ...], Dict[str, Callable[[Any], str]]]:
        """The root frame's code, the names it starts undefined, and its blocks (for
        ``self.name()``)."""
        self.outer_refs = frozenset()
        self.facts = self.subtree_facts(template)
        root, fresh = self.frame(template.body)
        refused = self.duplicate_parameter or self.refused_code
        if refused is not None:
            raise refused
        hot_root = self.hot_switching(root, self.renders)
        if hot_root is root:  # renders are not counted: every one is past the first
            self.renders[0] = 2
        return hot_root, fresh, dict(self.blocks)

    def subtree_facts(self, root: n.Node) -> Dict[int, int]:
        """_subtree_facts with this environment's filters and tests."""
        return _subtree_facts(root, self.env.filters, self.env.tests)

    def hot_switching(self, body: Stmt, state: Optional[List[Any]] = None) -> Stmt:
        """``body`` (of the template, a macro, a block: any frame but a loop's, which
        loops generate themselves), switching to its generated Python
        (codegen.generate) once it has run :data:`HOT_CALLS` times: a template rendered
        again and again, a macro called for every tool, runs as one function; a cold start
        does not pay for ``compile()``. ``state``: the list to keep its runs and generated
        function in (the template's own body's is ``self.renders``)."""
        if not self.generates_code or _spec_described(body) is None:
            return body
        hot_after = HOT_CALLS
        if state is None:
            state = [0, None]  # runs so far, the generated function
        renders = self.renders
        binds = self.frame_stores  # (every caller has just compiled the frame of ``body``)

        def run_hot(scope: Scope, out: list) -> Any:
            generated = state[1]
            if generated is not None:
                return generated(scope, out)
            state[0] += 1
            if _hot_enough(state[0], hot_after, renders):
                state[1] = generated = generate_body(body, binds)
                return generated(scope, out)
            return body(scope, out)

        attach(run_hot, _spec_described(body))  # still inlined where nested
        run_hot.hot_state = state  # type: ignore[attr-defined]  # a macro calls state[1] itself
        return run_hot

    def body_facts(self, statements: List[n.Node]) -> int:
        """What a body holds anywhere inside it (_MENTIONS_LOOP, _KEEPS_SCOPE, _ASSIGNS)."""
        facts = self.facts
        found = 0
        for statement in statements:
            known = facts.get(id(statement))
            if known is None:
                facts.update(self.subtree_facts(statement))
                known = facts[id(statement)]
            found |= known
        return found

    def expr(self, node: n.Node) -> Expr:
        # (Jinja2 folds no expression in volatile code, see __init__)
        if self.facts.get(id(node), 0) & _FOLDED_FIRST and not self.volatile and \
                type(node) in _folded_kinds():
            folded = self.constant(node)
            if folded is not None:
                return folded
        return self.expressions[type(node)](self, node)

    def constant(self, node: n.Node) -> Optional[Expr]:
        """Jinja2 folds an expression made of constants while compiling, where its value
        can be written as a constant: with a slice inside, that value can differ from the
        render-time one (see constfold.py), so it is taken here; and what a folded
        expression leaves out (``false and f(a=1, a=2)``, ``1 if true else x|unknown``)
        Jinja2 never compiles, so its compile errors are not raised."""
        from .constfold import fold_printed, has_safe_repr

        value = fold_printed(node, self.env, self.join_text, self.fold_text,
                             escaping=self.autoescape)
        if value is MISSING or not has_safe_repr(value):
            return None
        if isinstance(value, (list, dict)):
            return _fresh_copier(value)
        return lambda scope: value

    def stmt(self, node: n.Node) -> Stmt:
        return self.statements[type(node)](self, node)

    def body(self, statements: List[n.Node]) -> Stmt:
        compiled = [self.stmt(s) for s in statements]
        if not compiled:
            def nothing(scope: Scope, out: list) -> None:
                return None

            attach(nothing, kinds.Body([]))
            return nothing
        if len(compiled) == 1:
            return compiled[0]
        return _sequence(compiled)

    # -- statements ----------------------------------------------------------------------
    def s_output(self, node: n.Node) -> Stmt:
        if self.autoescape or self.volatile:
            return self.escaping_output(node)
        printer = self.printer
        items: List[Tuple[bool, Any]] = []
        for item in node.nodes:
            if isinstance(item, n.TemplateData):
                if items and items[-1][0]:
                    items[-1] = (True, items[-1][1] + item.data)
                else:
                    items.append((True, item.data))
            elif isinstance(item, n.Const) and isinstance(item.value, str):
                items.append((True, item.value))
            else:
                folded = self.printed_constant(item)
                if folded is not None:
                    items.append((True, folded))
                else:
                    items.append((False, (self.expr(item), item)))

        if len(items) == 1 and items[0][0]:
            text = items[0][1]
            size = len(text)

            def output_text(scope: Scope, out: list) -> None:
                out.append(text)
                ctx = scope.ctx
                ctx.output_size += size

            attach(output_text, kinds.Text(text))
            return output_text

        if len(items) == 1 and hasattr(items[0][1][0], "output"):
            return items[0][1][0].output
        if any(not is_text and hasattr(item[0], "output") for is_text, item in items):
            return self.output_in_parts(items, node)
        if len(items) == 1:
            expression, expression_node = items[0][1]

            def output_one(scope: Scope, out: list) -> None:
                value = expression(scope)
                if type(value) is not str:
                    try:
                        value = printer(value)
                    except Exception as exc:
                        raise _locate(exc, expression_node) from exc
                out.append(value)
                ctx = scope.ctx
                ctx.output_size += len(value)
                if ctx.output_size > ctx.max_output:
                    raise _locate(ctx.limits.exceeded(
                        "max_output_size", "rendered output too large"), expression_node)

            attach(output_one, kinds.Print(items, expression_node))
            return output_one

        def output(scope: Scope, out: list) -> None:
            size = 0
            for is_text, item in items:
                if is_text:
                    out.append(item)
                    size += len(item)
                    continue
                value = item[0](scope)
                if type(value) is not str:
                    try:
                        value = printer(value)
                    except Exception as exc:
                        raise _locate(exc, item[1]) from exc
                out.append(value)
                size += len(value)
            ctx = scope.ctx
            ctx.output_size += size
            if ctx.output_size > ctx.max_output:
                raise _locate(ctx.limits.exceeded(
                    "max_output_size", "rendered output too large"), node)

        attach(output, kinds.Print(items, node))
        return output

    def output_in_parts(self, items: List[Tuple[bool, Any]], node: n.Node) -> Stmt:
        """``text {{ a + b }} text``: each part printed as it would be alone, the sum
        without building it (its own ``output``), then the output limit checked at the
        statement, as the single statement checks it."""
        parts = []
        for is_text, item in items:
            if is_text:
                parts.append(self.stmt(n.Output([n.TemplateData(item)], lineno=node.lineno,
                                                column=node.column)))
            elif hasattr(item[0], "output"):
                parts.append(item[0].output)
            else:
                parts.append(self.stmt(n.Output([item[1]], lineno=node.lineno,
                                                column=node.column)))

        def check_output_size(scope: Scope, out: list) -> None:
            ctx = scope.ctx
            if ctx.output_size > ctx.max_output:
                raise _locate(ctx.limits.exceeded(
                    "max_output_size", "rendered output too large"), node)

        output = _sequence(parts + [check_output_size])
        attach(output, kinds.PrintParts(parts, node))
        return output

    def printed_constant(self, node: n.Node) -> Optional[str]:
        """The text Jinja2 prints for ``{{ node }}`` when it computes it while compiling and
        that differs from evaluating it at render time (a constant sliced: see
        constfold.py), or that holds what does not compile (folded, it is never compiled),
        else None."""
        if not self.facts.get(id(node), 0) & _FOLDED_FIRST:
            return None
        from .constfold import fold_printed

        value = fold_printed(node, self.env, self.join_text, self.fold_text)
        if value is MISSING:
            return None
        try:
            return self.printer(value)
        except Exception:  # printing fails too (a strict undefined): at render time then
            return None

    def escaping_output(self, node: n.Node) -> Stmt:
        """Output inside ``{% autoescape %}``: values HTML-escaped (unless Markup) where the
        block escapes. A flag Jinja2 computes while compiling decides for the whole block;
        any other makes the block volatile: a value is then escaped as the flag is at render
        time, while a constant, which Jinja2 prints while compiling, is escaped as the blocks
        around decide then (not at all outside them)."""
        items: List[Tuple[bool, Any]] = []
        for item in node.nodes:
            if isinstance(item, n.TemplateData):
                items.append((True, item.data))
                continue
            text = self.compiled_output(item)
            items.append((True, text) if text is not None else (False, (self.expr(item), item)))
        escaped = self.escaped_text
        printer = self.printer
        volatile = self.volatile

        def output(scope: Scope, out: list) -> None:
            ctx = scope.ctx
            show = printer if volatile and not ctx.autoescape else escaped
            size = 0
            for is_text, item in items:
                if is_text:
                    out.append(item)
                    size += len(item)
                    continue
                try:
                    text = show(item[0](scope))
                except TemplateError:
                    raise
                except Exception as exc:
                    raise _locate(exc, item[1]) from exc
                out.append(text)
                size += len(text)
            ctx.output_size += size
            if ctx.output_size > ctx.max_output:
                raise _locate(ctx.limits.exceeded(
                    "max_output_size", "rendered output too large"), node)

        return output

    def compiled_output(self, node: n.Node) -> Optional[str]:
        """The text of ``{{ node }}`` where Jinja2 computes it while compiling (escaped if the
        blocks around escape then), else None. Inside ``{% autoescape %}`` this is not the
        text evaluating it at render time would give: there ``~`` keeps Markup, and a
        volatile block escapes by its flag at render time."""
        from .constfold import fold_printed

        value = fold_printed(node, self.env, self.join_text, self.fold_text, self.volatile,
                             self.autoescape)
        if value is MISSING:
            return None
        try:
            return self.escaped_text(value) if self.autoescape else self.printer(value)
        except Exception:  # printing fails (a strict undefined): at render time then
            return None

    def captured_as(self) -> Optional[Callable[[RenderContext, str], Any]]:
        """How output captured by the code compiled now is handed on (a filter block's body
        to its filter, a recursive loop's ``loop(...)``): Markup where it is escaped already,
        as compiled, or in a volatile block as the render escapes then; None: as it is."""
        if self.volatile:
            return lambda ctx, text: ctx.safe(text) if ctx.autoescape else text
        if self.autoescape:
            return lambda ctx, text: ctx.safe(text)
        return None

    @staticmethod
    def escaped_text(value: Any) -> str:
        """How ``{{ value }}`` prints inside ``{% autoescape true %}``."""
        from ..runtime.markup import escape

        return str(escape(value))

    def s_autoescape(self, node: n.Node) -> Stmt:
        """``{% autoescape flag %}``: a frame of its own (Jinja2 puts the block in a Scope),
        the flag evaluated in it. What the flag is while compiling decides how its output is
        compiled (see escaping_output); at render time it is the render's escaping state
        (``RenderContext.autoescape``) until the block ends."""
        from .constfold import fold_printed

        flag = fold_printed(node.enabled, self.env, self.join_text, self.fold_text,
                            self.volatile, self.autoescape)
        saved = self.autoescape, self.volatile
        if flag is MISSING:
            self.volatile = True
        else:
            self.autoescape = bool(flag)
        try:
            body, fresh = self.frame(node.body, extra=(node.enabled,))
            enabled = self.truth_of(self.compiled_extra[0], node.enabled)
        finally:
            self.autoescape, self.volatile = saved

        def autoescape(scope: Scope, out: list) -> Any:
            ctx = scope.ctx
            inner = Scope(fresh_variables(fresh, ctx), scope, ctx)
            saved_state = ctx.autoescape
            ctx.autoescape = enabled(inner)
            try:
                return body(inner, out)
            finally:
                ctx.autoescape = saved_state

        return autoescape

    def s_if(self, node: n.Node) -> Stmt:
        branches = []
        self.in_if += 1
        try:
            for branch in [node] + list(node.elif_):
                branches.append((self.expr(branch.test), self.body(branch.body), branch.test))
            else_ = self.body(node.else_) if node.else_ else None
        finally:
            self.in_if -= 1

        def if_stmt(scope: Scope, out: list) -> Any:
            for test, body, test_node in branches:
                value = test(scope)
                if value is True:
                    return body(scope, out)
                if value is False:
                    continue
                try:
                    truth = bool(value)
                except Exception as exc:
                    raise _locate(exc, test_node) from exc
                if truth:
                    return body(scope, out)
            if else_ is not None:
                return else_(scope, out)
            return None

        attach(if_stmt, kinds.If(branches, else_, node))
        return if_stmt

    def truth(self, node: n.Node) -> Expr:
        """``bool(expr)``, located (a StrictUndefined raises when tested)."""
        return self.truth_of(self.expr(node), node)

    @staticmethod
    def truth_of(value: Expr, node: n.Node) -> Expr:
        """``bool(value(scope))``, located at ``node``."""
        def test(scope: Scope) -> bool:
            result = value(scope)
            if result is True or result is False:
                return result
            try:
                return bool(result)
            except Exception as exc:
                raise _locate(exc, node) from exc

        attach(test, kinds.Truth(value, node))
        return test

    def loop_parts(self, node: n.Node) -> Tuple[Any, ...]:
        """What a ``for`` loop is made of, compiled (s_for builds its closures from them):
        (facts of its body, whether it uses ``loop``, the body and its fresh names, the names
        the body binds, the ``else`` body and its fresh names, the ``if`` filter or None)."""
        targets = tuple(t.name for t in _target_names(node.target))
        facts = self.body_facts(node.body)
        # Jinja2 looks at the whole loop, its `else` included
        stores_loop = (facts | (self.body_facts(node.else_) if node.else_ else 0)) & _STORES_LOOP
        if stores_loop or any(t == "loop" for t in targets):
            raise TemplateAssertionError(
                "Can't assign to special loop variable in for-loop target", node.lineno,
                node.column)
        # Jinja2 builds `loop` only when the body mentions it (it costs per iteration).
        uses_loop = node.recursive or bool(facts & _MENTIONS_LOOP)
        body, fresh = self.frame_where(True, node.body,
                                       targets + (("loop",) if uses_loop else ()))
        body_binds = self.frame_stores
        else_, else_fresh = (None, ())
        if node.else_:
            # the `else` runs where the loop stands, but a recursive loop is a function of
            # its own in Jinja2, its `else` included
            else_, else_fresh = self.frame_where(self.in_loop and not node.recursive,
                                                 node.else_)
        loop_filter = None
        if node.test is not None:
            # evaluated with only the targets, in a frame of its own (Jinja2's filter
            # function): an unknown filter or test there is a compile error even inside an `if`
            self.local_names.append(frozenset(targets))
            saved_in_if, self.in_if = self.in_if, 0
            try:
                loop_filter = self.truth(node.test)
            finally:
                self.in_if = saved_in_if
                self.local_names.pop()
        return facts, uses_loop, body, fresh, body_binds, else_, else_fresh, loop_filter

    def s_for(self, node: n.Node) -> Stmt:
        """A ``for`` loop (see loop_parts; the closures that run it share their state: the
        loop's parts, its hot switching, its generated function once made)."""
        iterable = self.expr(node.iter)
        assign = self.assigner(node.target)
        facts, uses_loop, body, fresh, body_binds, else_, else_fresh, loop_filter = \
            self.loop_parts(node)
        recursive = node.recursive
        simple_name = node.target.name if isinstance(node.target, n.NameTarget) else None
        # One scope object can serve every iteration (cleared each time) unless something in
        # the body keeps a reference to the scope: a macro or call block defined there.
        reuse_scope = not facts & _KEEPS_SCOPE
        # Without assignments in the body, the iteration scope holds only the target and
        # `loop`: nothing to clear between iterations.
        body_assigns = bool(facts & _ASSIGNS)
        fast_path = reuse_scope and not body_assigns and simple_name is not None and \
            else_ is None
        iteration_cost = LOOP_STEPS + body_cost(node.body)
        hot_after = HOT_ITERATIONS if self.generates_code else float("inf")
        is_hot, hot_body, hot_loop, hot_charging_loop, generated_loop = _loop_hot_parts(
            self.env, node, body, simple_name, uses_loop, iteration_cost, facts, body_binds,
            fresh, hot_after, self.renders)
        # A loop whose body assigns (or reads names before assigning them), one target name
        # and no `else`: generated too, charging each iteration as it starts, like `run`.
        charging_loop_fits = reuse_scope and simple_name is not None and else_ is None
        filter_cost = FILTERED_ITEM_STEPS + body_cost([node.test]) if node.test is not None else 0
        items_of = _loop_items_of(node, assign, loop_filter, filter_cost)
        charged_list = _loop_charged_list(loop_filter)
        stop_over_limit = _loop_stop_over_limit(node, iteration_cost)

        def run(scope: Scope, out: list, value: Any, depth0: int) -> Any:
            ctx = scope.ctx
            items = items_of(scope, value)
            if not items:
                if else_ is not None:
                    return else_(Scope(fresh_variables(else_fresh, ctx), scope, ctx), out)
                return None
            loop = LoopContext(items, depth0, recurse_in(scope) if recursive else None,
                               ctx.undefined) if uses_loop else None
            if fast_path and not fresh:
                return run_simple(scope, out, items, loop, ctx)
            completed = False  # Jinja2 runs `else` unless some iteration reached its end
            shared = Scope({}, scope, ctx) if reuse_scope else None
            hot = is_hot(len(items))
            if hot and charging_loop_fits:
                looped = hot_charging_loop(shared)
                if looped is not None:
                    if looped(shared, out, items, loop) is not None:
                        try:
                            ctx.step(0)
                        except TemplateError as exc:
                            raise _locate(exc, node) from None
                    return None
            run_body = hot_body() if hot else body
            for item in items:
                ctx.steps += iteration_cost
                if ctx.steps > ctx.max_steps or ctx.output_size > ctx.max_output:
                    try:
                        ctx.step(0)
                    except TemplateError as exc:
                        raise _locate(exc, node) from None
                if loop is not None:
                    loop.index0 += 1
                if shared is not None:
                    inner = shared
                    variables = inner.vars
                    variables.clear()
                    if fresh:
                        variables.update(fresh_variables(fresh, ctx))
                    if loop is not None:
                        variables["loop"] = loop
                    if simple_name is not None:
                        variables[simple_name] = item
                    else:
                        assign(inner, item)
                elif simple_name is not None and not fresh and loop is not None:
                    inner = Scope({simple_name: item, "loop": loop}, scope, ctx)
                else:
                    variables = fresh_variables(fresh, ctx)
                    if loop is not None:
                        variables["loop"] = loop
                    inner = Scope(variables, scope, ctx)
                    assign(inner, item)
                signal = run_body(inner, out)
                if signal is None:
                    completed = True
                elif signal is BREAK:
                    break
            if not completed and else_ is not None:
                return else_(Scope(fresh_variables(else_fresh, ctx), scope, ctx), out)
            return None

        def run_simple(scope: Scope, out: list, items: List[Any], loop: Any,
                       ctx: RenderContext) -> Any:
            """The common loop: one name, no `else`, no assignments in the body."""
            # charged up front, one check instead of one per item; `break` refunds the rest
            ctx.steps += len(items) * iteration_cost
            if ctx.steps > ctx.max_steps:
                raise _locate(ctx.too_much_work(), node)
            variables: Dict[str, Any] = {}
            inner = Scope(variables, scope, ctx)
            if loop is not None:
                variables["loop"] = loop
            max_output = ctx.max_output
            if generated_loop:  # made already (or refused: then the body is generated)
                hot, looped = True, generated_loop[0]
            else:
                hot = is_hot(len(items))
                looped = hot_loop(inner) if hot else None
            if looped is not None:
                stopped = looped(inner, out, items, loop)
                while stopped is not None:  # raises, or the loop goes on where it was
                    stop_over_limit(ctx, stopped)
                    stopped = looped(inner, out, stopped, loop)
                return None
            run_body = hot_body() if hot else body
            remaining = iter(items)
            for item in remaining:
                if loop is not None:
                    loop.index0 += 1
                variables[simple_name] = item
                signal = run_body(inner, out)
                if signal is BREAK:
                    ctx.steps -= operator.length_hint(remaining) * iteration_cost
                    break
                # ctx.max_steps is read afresh: the deadline watchdog lowers it (deadline.py)
                if ctx.output_size > max_output or ctx.steps > ctx.max_steps:
                    stop_over_limit(ctx, remaining)
            return None

        captured_as = self.captured_as()

        def recurse_in(scope: Scope) -> Callable[[Any, int], str]:
            def recurse(value: Any, depth0: int) -> str:
                ctx = scope.ctx
                ctx.enter()
                try:
                    buffer: list = []
                    before = ctx.output_size
                    run(scope, buffer, value, depth0)
                    text = ctx.captured(buffer, before)
                    return text if captured_as is None else captured_as(ctx, text)
                finally:
                    ctx.depth -= 1
            return recurse

        if not (fast_path and not fresh):
            return _loop_for_stmt(node, iterable, else_, generated_loop, charged_list, recurse_in,
                                  run, uses_loop)
        return _loop_for_simple(node, iterable, generated_loop, charged_list, items_of,
                                recurse_in, run_simple, stop_over_limit, uses_loop,
                                iteration_cost)

    def assigner(self, target: n.Node) -> Callable[[Scope, Any], None]:
        """A function storing a value into ``target`` within a scope."""
        if isinstance(target, n.NameTarget):
            name = target.name

            def assign_name(scope: Scope, value: Any) -> None:
                scope.vars[name] = value

            return assign_name
        if isinstance(target, n.NSRef):
            ns_name, attr = target.name, target.attr

            def assign_nsref(scope: Scope, value: Any) -> None:
                namespace = scope.lookup(ns_name)
                if not isinstance(namespace, Namespace):
                    raise _locate(TemplateRuntimeError(
                        "cannot assign attribute on non-namespace object"), target)
                scope.ctx.steps += SLOW_LOOKUP_STEPS
                try:
                    if isinstance(value, tuple):  # kept across iterations: bound its nesting
                        check_tuple_depth(value)
                    namespace._template_setattr(attr, value)
                except TemplateError as exc:
                    exc._locate(target.lineno, target.column)
                    raise

            return assign_nsref
        parts = [self.assigner(item) for item in target.items]
        count = len(parts)

        def assign_tuple(scope: Scope, value: Any) -> None:
            try:
                # one more than needed tells "too many" apart: never the whole of a long value
                values = (value if type(value) in (tuple, list)
                          else list(itertools.islice(iter(value), count + 1)))
            except Exception as exc:
                raise _locate(exc, target) from exc
            if len(values) != count:
                if len(values) > count:
                    message = f"too many values to unpack (expected {count})"
                else:
                    message = f"not enough values to unpack (expected {count}, got {len(values)})"
                raise _locate(ValueError(message), target)
            for part, item in zip(parts, values):
                part(scope, item)

        return assign_tuple

    def s_assign(self, node: n.Node) -> Stmt:
        value = self.expr(node.node)
        assign = self.assigner(node.target)

        def assign_stmt(scope: Scope, out: list) -> None:
            assign(scope, value(scope))

        if isinstance(node.target, n.NameTarget):  # see codegen.py
            attach(assign_stmt, kinds.Set(node.target.name, value, node))
        elif isinstance(node.target, n.NSRef) and node.target.attr[:1] != "_":
            # `set ns.flag = ...`: generated code stores into one of the engine's namespaces
            # itself (what assign_nsref does for them; anything else is assign_nsref's)
            attach(assign_stmt, kinds.SetNamespace(node.target.name, node.target.attr, value,
                                                   assign, Scope.lookup, node))

        # see codegen.py: `set ns.x` changes a namespace, not a variable of this scope
        assign_stmt.rebinds = _bound_names(node.target)  # type: ignore[attr-defined]
        return assign_stmt

    def s_assign_block(self, node: n.Node) -> Stmt:
        body, fresh = self.frame(node.body)
        body = self.hot_switching(body)
        assign = self.assigner(node.target)
        apply_filter = self.filter_chain(node.filter) if node.filter is not None else None

        def assign_block(scope: Scope, out: list) -> Any:
            buffer: list = []
            before = scope.ctx.output_size
            signal = body(Scope(fresh_variables(fresh, scope.ctx), scope, scope.ctx), buffer)
            if signal is not None:
                return signal
            value: Any = scope.ctx.captured(buffer, before)
            if scope.ctx.autoescape:  # inside `{% autoescape true %}`: escaped already
                value = scope.ctx.safe(value)
            if apply_filter is not None:
                value = apply_filter(scope, value)
            assign(scope, value)
            return None

        assign_block.rebinds = _bound_names(node.target)  # type: ignore[attr-defined]
        return assign_block

    def s_filter_block(self, node: n.Node) -> Stmt:
        captured_as = self.captured_as()
        body, fresh = self.frame(node.body)
        body = self.hot_switching(body)
        # Jinja2 applies the filter in the block's own frame, where an unknown filter is a
        # compile error even inside an `if`
        saved_in_if, self.in_if = self.in_if, 0
        try:
            apply_filter = self.filter_chain(node.filter)
        finally:
            self.in_if = saved_in_if
        printer = self.printer

        def filter_block(scope: Scope, out: list) -> Any:
            buffer: list = []
            ctx = scope.ctx
            before = ctx.output_size
            signal = body(Scope(fresh_variables(fresh, ctx), scope, ctx), buffer)
            if signal is not None:
                return signal
            value = ctx.captured(buffer, before)
            if captured_as is not None:
                value = captured_as(ctx, value)
            value = apply_filter(scope, value)
            try:
                text = printer(value)
            except Exception as exc:
                raise _locate(exc, node) from exc
            out.append(text)
            ctx.output_size += len(text)
            if ctx.output_size > ctx.max_output:
                raise _locate(ctx.limits.exceeded(
                    "max_output_size", "rendered output too large"), node)
            return None

        return filter_block

    def filter_chain(self, node: n.Node) -> Callable[[Scope, Any], Any]:
        """A chain of Filter nodes whose innermost operand is the given value."""
        chain = []
        while node is not None:
            chain.append(node)
            node = node.node
        steps = [self.filter_call(f) for f in reversed(chain)]

        def apply(scope: Scope, value: Any) -> Any:
            for step in steps:
                value = step(scope, value)
            return value

        return apply

    def s_macro(self, node: n.Node) -> Stmt:
        signature, invoke = self.macro_parts(node.name, node.params, node.body, node)
        make = _macro_maker(signature, invoke)
        name = node.name

        def define_macro(scope: Scope, out: list) -> None:
            scope.vars[name] = make(scope)

        define_macro.rebinds = frozenset((name,))  # type: ignore[attr-defined]
        attach(define_macro, kinds.Define(name, signature, invoke, node))
        return define_macro

    def macro_parts(self, name: str, params: list, body_nodes: list, defined_at: n.Node,
                    caller_macro: bool = False) -> Tuple[tuple, Callable[..., Any]]:
        """What a macro of this definition is made of: (its signature, ``invoke``, which runs
        it given the scope it was defined in, then the call's arguments); see
        :func:`_macro_maker`."""
        arg_names = tuple(p for p, _ in params)
        twice = _first_repeated(arg_names) if self.duplicate_parameter is None else None
        if twice is not None:
            self.duplicate_parameter = TemplateSyntaxError(
                f"duplicate argument {twice!r} in macro definition", defined_at.lineno,
                defined_at.column)
        shown_name = None if caller_macro else name  # a call block's macro is anonymous
        used = _referenced_names(body_nodes)
        catch_kwargs = "kwargs" in used
        catch_varargs = "varargs" in used
        wants_caller = "caller" in used
        explicit_caller = "caller" in arg_names
        if wants_caller and explicit_caller and dict(params)["caller"] is None:
            # Jinja2 refuses it while compiling the macro (or the call block's caller), before
            # its defaults and body
            raise TemplateAssertionError(
                'When defining macros or call blocks the special "caller" argument must be '
                "omitted or be given a default.", defined_at.lineno, defined_at.column)
        count = len(arg_names)
        specials = tuple(name for name, used_ in (("caller", wants_caller),
                                                  ("kwargs", catch_kwargs),
                                                  ("varargs", catch_varargs)) if used_)
        default_nodes = tuple(d for _, d in params if d is not None)
        call_cost = CALL_STEPS + body_cost(body_nodes)
        body, fresh = self.frame_where(False, body_nodes, arg_names + specials,
                                       extra=default_nodes)
        body = self.hot_switching(body)
        compiled_defaults = iter(self.compiled_extra)
        defaults = [(p, next(compiled_defaults) if d is not None else None) for p, d in params]

        # The common call binds every parameter by position and nothing else: no keywords,
        # no defaults to evaluate, no caller, kwargs or varargs to collect.
        plain_parameters = not specials and not explicit_caller

        # (param, its default's closure or None, the default's value when a constant)
        parameters = tuple(
            (param, default, _constant_value(default)) for param, default in defaults)
        positions = {param: index for index, param in enumerate(arg_names)}
        # the constant defaults of every parameter after the first, when all have one:
        # `handle_role(role)` of `handle_role(role, add_space=True)` binds without bind
        after_first = parameters[1:]
        defaults_after_first = {param: constant for param, _, constant in after_first} \
            if after_first and all(constant is not MISSING for _, _, constant in after_first) \
            else None
        bind = _macro_binder(shown_name, parameters, positions, fresh, explicit_caller,
                             wants_caller, catch_kwargs, catch_varargs)

        first_name = arg_names[0] if arg_names else None
        # the body's generated function once it is hot (see hot_switching), called directly
        hot_state = getattr(body, "hot_state", None) or [0, None]

        # Defined once here, bound to each definition's scope with a partial: a template
        # defining nine macros per render makes no closures per render.
        def invoke(defining_scope: Scope, args: tuple, kwargs: dict) -> str:
            """Bind the arguments, then run the body charged, depth-checked and captured.

            What ctx.step(call_cost), ctx.enter() and ctx.captured() do is written out here
            (a template calls a macro per message, per tool parameter): the same checks in
            the same order; where one fails, that method raises its own error."""
            ctx = defining_scope.ctx
            if plain_parameters and not kwargs and len(args) == count:
                if fresh:
                    local: Dict[str, Any] = fresh_variables(fresh, ctx)
                    local.update(zip(arg_names, args))
                elif count == 1:  # `render_content(message.content)`
                    local = {first_name: args[0]}
                else:
                    local = dict(zip(arg_names, args))
                scope = Scope(local, defining_scope, ctx)
            elif defaults_after_first is not None and plain_parameters and not kwargs and \
                    len(args) == 1:
                # `handle_role(role)`: the rest take their constant defaults, as bind binds
                # them (a dict made by zip() costs more than the call saves)
                if fresh:
                    local = fresh_variables(fresh, ctx)
                    local[first_name] = args[0]
                else:
                    local = {first_name: args[0]}
                local.update(defaults_after_first)
                scope = Scope(local, defining_scope, ctx)
            else:
                scope = bind(defining_scope, ctx, args, kwargs)
            ctx.steps += call_cost
            if ctx.steps > ctx.max_steps or ctx.output_size > ctx.max_output:
                ctx.steps -= call_cost
                ctx.step(call_cost)
            ctx.depth += 1
            if ctx.depth > ctx.limits.max_recursion:
                ctx.depth -= 1
                ctx.enter()
            try:
                buffer: list = []
                before = ctx.output_size
                (hot_state[1] or body)(scope, buffer)
                if ctx.output_size > ctx.max_output:
                    ctx.check_output()
                text = ctx.join(buffer)
                ctx.output_size = before
                ctx.steps += len(text) >> CHARS_SHIFT
                if ctx.steps > ctx.max_steps:
                    raise ctx.too_much_work()
                # called while the render escapes (in `{% autoescape true %}`): Markup
                return ctx.safe(text) if ctx.autoescape else text
            finally:
                ctx.depth -= 1

        return (shown_name, arg_names, catch_kwargs, catch_varargs, wants_caller), invoke

    def s_call_block(self, node: n.Node) -> Stmt:
        make_caller = _macro_maker(*self.macro_parts("caller", node.params, node.body, node,
                                                     caller_macro=True))
        call = node.call
        callee = self.expr(call.node)
        args, star_args = self.arguments(call)
        printer = self.printer

        def call_block(scope: Scope, out: list) -> None:
            function = callee(scope)
            positional, keywords = args(scope)
            keywords["caller"] = make_caller(scope)
            try:
                text = printer(scope.ctx.sandbox.call(function, positional, keywords))
            except Exception as exc:
                raise _locate(exc, call) from exc
            out.append(text)
            ctx = scope.ctx
            ctx.output_size += len(text)
            if ctx.output_size > ctx.max_output:
                raise _locate(ctx.limits.exceeded(
                    "max_output_size", "rendered output too large"), node)

        del star_args
        return call_block

    def s_with(self, node: n.Node) -> Stmt:
        values = [self.expr(v) for v in node.values]
        assigns = [self.assigner(t) for t in node.targets]
        declared = tuple(t.name for target in node.targets for t in _target_names(target))
        body, fresh = self.frame(node.body, declared)
        body = self.hot_switching(body)

        def with_stmt(scope: Scope, out: list) -> Any:
            inner = Scope(fresh_variables(fresh, scope.ctx), scope, scope.ctx)
            for assign, value in zip(assigns, values):
                assign(inner, value(scope))
            return body(inner, out)

        return with_stmt

    def s_expr_stmt(self, node: n.Node) -> Stmt:
        value = self.expr(node.node)

        def do(scope: Scope, out: list) -> None:
            value(scope)

        return do

    def s_scope(self, node: n.Node) -> Stmt:
        """``{% block %}``: rendered where it stands, and callable as ``self.name()``. A block
        sees the template's variables, not the loop or macro around it, unless ``scoped``."""
        saved = self.outer_refs, self.autoescape, self.volatile
        if not node.scoped:
            self.outer_refs = frozenset()  # its own frame, outside any other
        # Jinja2 compiles blocks after the template's body, outside every `{% autoescape %}`
        # (escaping where it stands is the render's: a filter or a `set` block asks it)
        self.autoescape = self.volatile = False
        try:
            body, fresh = self.frame_where(False, node.body)
        finally:
            self.outer_refs, self.autoescape, self.volatile = saved
        name = node.name
        block_cost = body_cost(node.body)

        def render_block(scope: Scope, out: list) -> Any:
            if node.required:
                raise _locate(TemplateRuntimeError(f"Required block {name!r} not found"), node)
            return body(Scope(fresh_variables(fresh, scope.ctx), scope, scope.ctx), out)

        def call_block(root: Scope) -> str:
            """``self.name()``: the block rendered again, in the template's own scope."""
            ctx = root.ctx
            ctx.step(CALL_STEPS + block_cost)
            ctx.enter()  # a block may call itself: bounded like a macro
            try:
                buffer: list = []
                before = ctx.output_size
                render_block(root, buffer)
                text = ctx.captured(buffer, before)
                # called while the render escapes: Markup (Jinja2's BlockReference)
                return ctx.safe(text) if ctx.autoescape else text
            finally:
                ctx.depth -= 1

        self.blocks[name] = call_block
        if node.scoped:
            return render_block

        def in_root_scope(scope: Scope, out: list) -> Any:
            root = scope
            while root.parent is not None and root.parent.parent is not None:
                root = root.parent
            return render_block(root, out)

        return in_root_scope

    def s_break(self, node: n.Node) -> Stmt:
        if not self.in_loop:
            self.refuse_in_code("'break' outside loop", node)

        def break_(scope: Scope, out: list) -> str:
            return BREAK

        attach(break_, kinds.Break())
        return break_

    def s_continue(self, node: n.Node) -> Stmt:
        if not self.in_loop:
            self.refuse_in_code("'continue' not properly in loop", node)

        def continue_(scope: Scope, out: list) -> str:
            return CONTINUE

        attach(continue_, kinds.Continue())
        return continue_

    def s_generation(self, node: n.Node) -> Stmt:
        # transformers implements the tag as a call block: its body is a frame of its own,
        # and a function (a break or continue in it is refused)
        body, fresh = self.frame_where(False, node.body)
        body = self.hot_switching(body)

        def generation(scope: Scope, out: list) -> Any:
            buffer: list = []
            signal = body(Scope(fresh_variables(fresh, scope.ctx), scope, scope.ctx), buffer)
            if signal is not None:
                return signal
            scope.ctx.check_output()
            text = scope.ctx.join(buffer)
            ctx = scope.ctx
            if ctx.spans is not None:
                # transformers measures everything the top-level render has produced so far,
                # even when this block sits inside a macro whose output is not yet emitted.
                start = ctx.root_length()
                ctx.spans.append((start, start + len(text)))
            out.append(text)
            return None

        return generation

    def s_no_loader(self, node: n.Node) -> Stmt:
        if node.kind == "extends" and self.frame_depth > 1:
            # Jinja2 refuses this while compiling, loader or not (an `if` is no frame)
            raise TemplateAssertionError("cannot use extend from a non top-level scope",
                                         node.lineno, node.column)

        def no_loader(scope: Scope, out: list) -> None:
            raise _locate(TemplateTypeError(
                f"no loader for this environment specified ('{node.kind}' needs one)"), node)

        return no_loader

    # -- expressions ---------------------------------------------------------------------
    def e_const(self, node: n.Node) -> Expr:
        value = node.value

        def const(scope: Scope) -> Any:
            return value

        attach(const, kinds.Const(value))
        return const

    def e_name(self, node: n.Node) -> Expr:
        name = node.name
        if self.is_local(name):
            def load_local(scope: Scope) -> Any:
                return scope.vars[name]

            attach(load_local, kinds.Local(name))
            return load_local

        def load(scope: Scope) -> Any:
            current: Optional[Scope] = scope
            while current is not None:
                value = current.vars.get(name, MISSING)
                if value is not MISSING:
                    return value
                current = current.parent
            return scope.ctx.undefined(name=name)

        def beyond(scope: Scope) -> Any:
            """The name's value in the scopes above the parent's, or MISSING (generated code
            probes the first two itself: see codegen.py)."""
            parent = scope.parent
            above = parent.parent if parent is not None else None
            return above.lookup(name) if above is not None else MISSING

        attach(load, kinds.Name(name, beyond))
        return load

    def e_tuple(self, node: n.Node) -> Expr:
        value = _literal_value(node)
        if value is not MISSING:  # all constants: built once (copied if it holds a list)
            if any(isinstance(item, (list, dict, tuple)) for item in value):
                return _fresh_copier(value)
            return lambda scope: value
        items = [self.expr(item) for item in node.items]

        def build_tuple(scope: Scope) -> tuple:
            value = tuple([item(scope) for item in items])
            for element in value:
                if isinstance(element, tuple):  # nesting: bounded (see check_tuple_depth)
                    try:
                        check_tuple_depth(value)
                    except TemplateError as exc:
                        raise _locate(exc, node) from None
                    break
            return value

        return build_tuple

    def e_list(self, node: n.Node) -> Expr:
        value = _literal_value(node)
        if value is not MISSING:
            return _fresh_copier(value)
        items = [self.expr(item) for item in node.items]
        return lambda scope: [item(scope) for item in items]

    def e_dict(self, node: n.Node) -> Expr:
        value = _literal_value(node)
        if value is not MISSING:
            return _fresh_copier(value)
        pairs = [(self.expr(k), self.expr(v), k) for k, v in node.pairs]

        def build_dict(scope: Scope) -> dict:
            result = {}
            for key, value, key_node in pairs:
                k = key(scope)
                try:
                    result[k] = value(scope)
                except Exception as exc:  # unhashable key (or a StrictUndefined one)
                    raise _locate(exc, key_node) from exc
            return result

        if all(_key_never_aimed(key) for key, _ in node.pairs):
            return build_dict  # `{'role': ..., 'content': ...}`: no key to count

        def build_checked_dict(scope: Scope) -> dict:
            """Keys that may be aimed (collisions.py): strs are added as they come; from the
            first other key on, the pairs are evaluated (each key hashed, as build_dict
            does) in order, all the keys counted, then the rest added."""
            result = {}
            for position, (key, value, key_node) in enumerate(pairs):
                k = key(scope)
                if type(k) is not str:
                    return finish_checked_dict(scope, result, k, position)
                result[k] = value(scope)
            return result

        def finish_checked_dict(scope: Scope, result: dict, first: Any, position: int) -> dict:
            evaluated = []
            for key, value, key_node in pairs[position:]:
                k = key(scope) if evaluated else first
                v = value(scope)
                try:
                    hash(k)
                except Exception as exc:  # unhashable key (or a StrictUndefined one)
                    raise _locate(exc, key_node) from exc
                evaluated.append((k, v))
            try:
                check_table(list(result) + [k for k, _ in evaluated])
            except TemplateError as exc:
                raise _locate(exc, node) from None
            result.update(evaluated)
            return result

        return build_checked_dict

    def e_getattr(self, node: n.Node) -> Expr:
        name = node.attr
        # private names are never read from a dict first: `{'__class__': 1}.__class__` is the
        # (unsafe) attribute, as in Jinja2
        is_dict_method = name in METHODS[dict] or name[:1] == "_"
        sandbox = self.sandbox
        if isinstance(node.node, n.Name) and not is_dict_method:
            return self.getattr_of_name(node)
        obj_of = self.expr(node.node)
        if is_dict_method:  # `obj.items`, a private name: always the sandbox
            through_sandbox = _slow_lookup(sandbox.getattr, name, node)

            def get_attribute(scope: Scope) -> Any:
                return through_sandbox(obj_of(scope), scope)

            return get_attribute
        slow = _slow_getattr(sandbox, name, node)

        def get_attribute_of(scope: Scope) -> Any:
            obj = obj_of(scope)
            if type(obj) is dict:
                value = obj.get(name, MISSING)
                if value is not MISSING:
                    return value
            return slow(obj, scope)

        attach(get_attribute_of, kinds.Lookup(obj_of, name, slow, _reads_namespaces(name)))
        return get_attribute_of

    # The closures below repeat the scope walk of e_name and the dict fast path of
    # e_getattr/e_getitem on purpose: these lookups run for every message of every render,
    # and inlining them saves a Python call each time (see benchmarks/).
    def getattr_of_name(self, node: n.Node) -> Expr:
        """``var.key``, the commonest lookup (``message.role``): one closure, no inner calls."""
        variable = node.node.name
        name = node.attr
        sandbox = self.sandbox

        if self.is_local(variable):
            direct_type = next((kind for kind, names in DIRECT_ATTRIBUTES.items()
                                if name in names), None)
            if direct_type is not None:
                return self.direct_attribute_of_local(node, direct_type)

            slow = _slow_getattr(sandbox, name, node)

            def get_attribute_of_local(scope: Scope) -> Any:
                obj = scope.vars[variable]
                if type(obj) is dict:
                    value = obj.get(name, MISSING)
                    if value is not MISSING:
                        return value
                return slow(obj, scope)

            attach(get_attribute_of_local, kinds.Lookup(_local_loader(variable), name, slow,
                                                        _reads_namespaces(name)))
            return get_attribute_of_local

        def get_attribute_of_name(scope: Scope) -> Any:
            current: Optional[Scope] = scope
            while current is not None:
                obj = current.vars.get(variable, MISSING)
                if obj is not MISSING:
                    break
                current = current.parent
            else:
                obj = scope.ctx.undefined(name=variable)
            if type(obj) is dict:
                value = obj.get(name, MISSING)
                if value is not MISSING:
                    return value
            return slow(obj, scope)

        slow = _slow_getattr(sandbox, name, node)
        attach(get_attribute_of_name, kinds.Lookup(self.e_name(node.node), name, slow,
                                                  _reads_namespaces(name)))
        return get_attribute_of_name

    def direct_attribute_of_local(self, node: n.Node, direct_type: type) -> Expr:
        """``loop.index0``: an attribute the sandbox answers directly for ``direct_type``
        (sandbox.DIRECT_ATTRIBUTES) is read after one type check. It costs what a dict hit
        costs: nothing beyond the node's static price (no SLOW_LOOKUP_STEPS), since no
        sandbox walk happens; any other object takes the sandbox path and its charge."""
        variable = node.node.name
        name = node.attr
        read = operator.attrgetter(name)
        slow = _slow_getattr(self.sandbox, name, node)

        def other_object(obj: Any, scope: Scope) -> Any:
            """What getattr_of_name does for anything else: a dict hit, or the sandbox."""
            if type(obj) is dict:
                value = obj.get(name, MISSING)
                if value is not MISSING:
                    return value
            return slow(obj, scope)

        def get_direct_attribute(scope: Scope) -> Any:
            obj = scope.vars[variable]
            if type(obj) is direct_type:
                return read(obj)
            return other_object(obj, scope)

        attach(get_direct_attribute, kinds.DirectAttribute(_local_loader(variable), name,
                                                           direct_type, other_object))
        return get_direct_attribute

    def getitem_of_name(self, node: n.Node) -> Expr:
        """``var['key']`` / ``var[0]`` with a constant key: one closure, no inner calls."""
        variable = node.node.name
        key = node.arg.value
        sandbox = self.sandbox
        aimed = _aimed_key(key)  # a dict lookup of it is charged (collisions.py)

        if self.is_local(variable):
            def get_item_of_local(scope: Scope) -> Any:
                obj = scope.vars[variable]
                cls = type(obj)
                if cls is dict or cls is list:
                    if aimed and cls is dict:
                        _charge(scope, lookup_steps(key, obj), node)
                    try:
                        return obj[key]
                    except (KeyError, IndexError, TypeError):
                        pass
                try:
                    scope.ctx.steps += SLOW_LOOKUP_STEPS
                    return sandbox.getitem(obj, key)
                except Exception as exc:
                    raise _locate(exc, node) from exc

            if type(key) is str:
                attach(get_item_of_local, kinds.Lookup(_local_loader(variable), key,
                                                       _slow_lookup(sandbox.getitem, key, node),
                                                       False))
            elif _small_int(key):
                attach(get_item_of_local, kinds.Index(_local_loader(variable), key,
                                                      _slow_lookup(sandbox.getitem, key, node),
                                                      _step_charger(node)))
            return get_item_of_local

        def get_item_of_name(scope: Scope) -> Any:
            current: Optional[Scope] = scope
            while current is not None:
                obj = current.vars.get(variable, MISSING)
                if obj is not MISSING:
                    break
                current = current.parent
            else:
                obj = scope.ctx.undefined(name=variable)
            cls = type(obj)
            if cls is dict or cls is list:
                if aimed and cls is dict:
                    _charge(scope, lookup_steps(key, obj), node)
                try:
                    return obj[key]
                except (KeyError, IndexError, TypeError):
                    pass
            try:
                scope.ctx.steps += SLOW_LOOKUP_STEPS
                return sandbox.getitem(obj, key)
            except Exception as exc:
                raise _locate(exc, node) from exc

        if type(key) is str:  # (a list never holds a str key: the slow path's charge holds)
            attach(get_item_of_name, kinds.Lookup(self.e_name(node.node), key,
                                                  _slow_lookup(sandbox.getitem, key, node), False))
        elif _small_int(key):  # `messages[-1]`
            attach(get_item_of_name, kinds.Index(self.e_name(node.node), key,
                                                 _slow_lookup(sandbox.getitem, key, node),
                                                 _step_charger(node)))
        return get_item_of_name

    def e_getitem(self, node: n.Node) -> Expr:
        obj_of = self.expr(node.node)
        sandbox = self.sandbox
        if isinstance(node.arg, n.Slice):
            parts = [self.expr(p) if p is not None else None
                     for p in (node.arg.start, node.arg.stop, node.arg.step)]

            def get_slice(scope: Scope) -> Any:
                # Jinja2 slices with a plain subscript: no fallback to undefined.
                obj = obj_of(scope)
                key = slice(*[p(scope) if p is not None else None for p in parts])
                try:
                    result = obj[key]
                    cost = size_cost(result)  # a copy: `big[1:]` in a loop is not free
                    if cost:
                        scope.ctx.charge(cost)
                    return result
                except Exception as exc:
                    raise _locate(exc, node) from exc

            return get_slice
        folded = _negative_constant(node.arg)
        if folded is not None:  # `messages[-1]`: a constant key, as Jinja2 folds it
            node = n.Getitem(node.node, folded, lineno=node.lineno, column=node.column)
        if isinstance(node.node, n.Name) and isinstance(node.arg, n.Const):
            return self.getitem_of_name(node)
        if isinstance(node.arg, n.Const):
            constant = node.arg.value
            aimed = _aimed_key(constant)  # a dict lookup of it is charged (collisions.py)

            def get_constant_item(scope: Scope) -> Any:
                obj = obj_of(scope)
                cls = type(obj)
                if cls is dict or cls is list:
                    if aimed and cls is dict:
                        _charge(scope, lookup_steps(constant, obj), node)
                    try:
                        return obj[constant]
                    except (KeyError, IndexError, TypeError):
                        pass
                try:
                    scope.ctx.steps += SLOW_LOOKUP_STEPS
                    return sandbox.getitem(obj, constant)
                except Exception as exc:
                    raise _locate(exc, node) from exc

            if type(constant) is str:
                slow = _slow_lookup(sandbox.getitem, constant, node)
                attach(get_constant_item, kinds.Lookup(obj_of, constant, slow, False))
            elif _small_int(constant):
                slow = _slow_lookup(sandbox.getitem, constant, node)
                attach(get_constant_item, kinds.Index(obj_of, constant, slow,
                                                      _step_charger(node)))
            return get_constant_item
        key_of = self.expr(node.arg)

        def get_item(scope: Scope) -> Any:
            return item_of(obj_of(scope), key_of(scope), scope)

        def item_of(obj: Any, key: Any, scope: Scope) -> Any:
            """``obj[key]``, both evaluated (codegen.py reads a list's int index and a
            dict's str key itself, and calls this for anything else)."""
            if type(obj) is dict:
                try:
                    if type(key) is not str:  # a key a template may aim (collisions.py)
                        check_lookup(key, obj)
                    return obj[key]
                except (KeyError, TypeError):
                    pass
                except TemplateError as exc:  # a StrictUndefined key refuses to hash
                    exc._locate(node.lineno, node.column)
                    raise
            elif type(obj) is list and type(key) is int:
                try:
                    return obj[key]
                except IndexError:
                    pass
            try:
                scope.ctx.steps += SLOW_LOOKUP_STEPS
                return sandbox.getitem(obj, key)
            except Exception as exc:
                raise _locate(exc, node) from exc

        attach(get_item, kinds.Subscript(obj_of, key_of, item_of))
        return get_item

    def arguments(self, node: n.Node) -> Tuple[Callable[[Scope], Tuple[list, dict]], bool]:
        """Compile the arguments of a Call/Filter/Test into ``f(scope) -> (args, kwargs)``."""
        if self.refused_code is None:
            repeated = _repeated_keyword(node)
            if repeated is not None:
                self.refuse_in_code(f"keyword argument repeated: {repeated}", node)
        args = [self.expr(a) for a in node.args]
        kwargs = [(k, self.expr(v)) for k, v in node.kwargs]
        dyn_args = self.expr(node.dyn_args) if node.dyn_args is not None else None
        dyn_kwargs = self.expr(node.dyn_kwargs) if node.dyn_kwargs is not None else None
        dynamic = dyn_args is not None or dyn_kwargs is not None

        def evaluate(scope: Scope) -> Tuple[list, dict]:
            positional = [a(scope) for a in args]
            keywords = {k: v(scope) for k, v in kwargs}
            if dyn_args is not None:
                extra = dyn_args(scope)
                try:
                    positional.extend(extra if type(extra) in (list, tuple)
                                      else materialise(extra))
                except Exception as exc:
                    raise _locate(exc, node.dyn_args) from exc
            if dyn_kwargs is not None:
                extra = dyn_kwargs(scope)
                try:
                    keywords.update(extra)
                except Exception as exc:
                    raise _locate(exc, node.dyn_kwargs) from exc
            return positional, keywords

        if not dynamic:  # see codegen.py: the arguments written out in the call
            attach(evaluate, kinds.Arguments(args, kwargs))
        return evaluate, dynamic

    def e_call(self, node: n.Node) -> Expr:
        args, _ = self.arguments(node)
        sandbox = self.sandbox
        if isinstance(node.node, n.Getattr):
            return self.method_call(node, args)
        callee = self.expr(node.node)

        def invoke(function: Any, positional: list, keywords: dict) -> Any:
            try:
                return sandbox.call(function, positional, keywords)
            except Exception as exc:
                raise _locate(exc, node) from exc

        def call(scope: Scope) -> Any:
            function = callee(scope)
            positional, keywords = args(scope)
            return invoke(function, positional, keywords)

        if _spec_described(args) is not None:  # see codegen.py
            attach(call, kinds.Call(callee, _spec_described(args), invoke))
        return call

    def method_call(self, node: n.Node, args: Callable[[Scope], Tuple[list, dict]]) -> Expr:
        """``obj.name(...)``: call plain-type methods straight from the table."""
        owner_of = self.expr(node.node.node)
        name = node.node.attr
        sandbox = self.sandbox
        immutable = sandbox.immutable
        direct: Dict[type, Callable[..., Any]] = {}
        for cls in (str, dict, list):
            function = METHODS[cls].get(name)
            if function is not None and not (immutable and name in MUTATORS.get(cls, ())):
                direct[cls] = function
        attribute_node = node.node
        weight = METHOD_WEIGHTS.get(name, 1)
        # a mutator keeps its arguments: tuples stored that way must not nest without bound
        stores = not immutable and any(name in names for names in MUTATORS.values())
        fresh_items = name in FRESH_ITEM_METHODS

        def call_on(scope: Scope, owner: Any, positional: list, keywords: dict) -> Any:
            """The call, its owner and arguments evaluated."""
            function = direct.get(type(owner))
            if stores:
                try:
                    check_stored_tuples(positional, keywords)
                except TemplateError as exc:
                    raise _locate(exc, node) from None
            if weight:
                cost = size_cost(owner)
                if cost:
                    _charge(scope, cost * weight, node)
            try:
                if function is not None:
                    result = function(owner, *positional, **keywords)
                else:
                    try:
                        bound = sandbox.getattr(owner, name)
                    except Exception as exc:
                        raise _locate(exc, attribute_node) from exc
                    result = sandbox.call(bound, positional, keywords)
            except Exception as exc:
                raise _locate(exc, node) from exc
            charge_result(scope, result, owner)
            return result

        def charge_result(scope: Scope, result: Any, owner: Any) -> None:
            """A result that is not the owner itself is something the render now holds."""
            if result is not owner:
                cost = (len(result) * FRESH_ITEM_STEPS if fresh_items and type(result) is list
                        else size_cost(result))
                if cost:
                    _charge(scope, cost, node)

        def method_call(scope: Scope) -> Any:
            owner = owner_of(scope)
            positional, keywords = args(scope)
            return call_on(scope, owner, positional, keywords)

        positional, keywords = _static_arguments(args)
        if name == "get" and dict in direct and positional is not None and \
                not keywords and 1 <= len(positional) <= 2:
            # `message.get('content')`, a few times per message in many templates: an exact
            # dict's own get(), charged what the general path charges (the result's size:
            # get() has no weight); any other owner takes the general path
            key_of = positional[0]
            default_of = positional[1] if len(positional) == 2 else None

            def dict_get(scope: Scope, owner: Any, key: Any, default: Any) -> Any:
                """``owner.get(key[, default])``, its operands evaluated (also codegen's)."""
                if type(owner) is not dict:
                    return call_on(scope, owner, [key] if default_of is None else [key, default],
                                   {})
                try:
                    if type(key) is not str:  # a key a template may aim (collisions.py)
                        check_lookup(key, owner)
                    result = owner.get(key, default)
                except Exception as exc:  # an unhashable key
                    raise _locate(exc, node) from exc
                charge_result(scope, result, owner)
                return result

            def method_call(scope: Scope) -> Any:  # noqa: F811  # the same, for get()
                owner = owner_of(scope)
                key = key_of(scope)
                default = default_of(scope) if default_of is not None else None
                return dict_get(scope, owner, key, default)

            attach(method_call, kinds.DictGet(owner_of, key_of, default_of, dict_get,
                                              _step_charger(node)))
        elif name in _INLINE_STR_METHODS and str in direct and positional is not None and \
                not keywords and len(positional) <= 2:
            # `content.strip()`, `role.startswith('<')`, `text.rfind(marker)`: on an exact
            # str with str arguments (then it cannot fail), generated code calls the str
            # method itself and charges what call_on charges; anything else goes to call_on
            def on_other(scope: Scope, owner: Any, *arguments: Any) -> Any:
                return call_on(scope, owner, list(arguments), {})

            attach(method_call, kinds.StrMethod(owner_of, name, tuple(positional), weight,
                                                on_other, _step_charger(node)))
        return method_call

    def resolve(self, kind: str, name: str, node: n.Node) -> Optional[Callable[..., Any]]:
        """The filter or test function, or None when it must fail at render time."""
        table = self.env.filters if kind == "filter" else self.env.tests
        function = table.get(name)
        if function is None and not self.in_if:
            raise TemplateAssertionError(f"No {kind} named {name!r}.", node.lineno, node.column)
        if kind == "filter":
            from ..runtime.filters.common import LoadedOnUse

            if type(function) is LoadedOnUse:  # a builtin filter not imported yet
                function = function.load()
        return function

    def filter_call(self, node: n.Node) -> Callable[[Scope, Any], Any]:
        """``f(scope, value)`` applying the filter of a Filter node to ``value``."""
        function = self.resolve("filter", node.name, node)
        args, _ = self.arguments(node)
        env = self.env
        name = node.name
        pass_env = function is not None and wants_environment(function)
        input_cost = filter_input_cost(name)

        if not (node.args or node.kwargs or node.dyn_args or node.dyn_kwargs) and \
                function is not None:
            compares_items = _COMPARING_FILTERS.get(name)

            def apply_without_arguments(scope: Scope, value: Any) -> Any:
                if input_cost is not None:
                    cost = input_cost(value)
                    if cost:
                        _charge(scope, cost, node)
                try:
                    if compares_items:
                        _check_compared(value, ())
                    result = function(env, value) if pass_env else function(value)
                except Exception as exc:
                    raise _locate(exc, node) from exc
                if result is not value:
                    cost = size_cost(result)
                    if cost:
                        _charge(scope, cost, node)
                return result

            apply_without_arguments.reads_no_variables = True  # type: ignore[attr-defined]
            return apply_without_arguments

        if input_cost is None and not pass_env:
            special = self.default_filter(node, function, args)
            if special is not None:
                return special

        def apply(scope: Scope, value: Any) -> Any:
            positional, keywords = args(scope)
            if function is None:
                raise _locate(TemplateRuntimeError(f"No filter named {name!r} found."), node)
            if input_cost is not None:
                cost = input_cost(value)
                if cost:
                    _charge(scope, cost, node)
            try:
                if name in _COMPARING_FILTERS:
                    _check_compared(value, positional, _COMPARING_FILTERS[name])
                if pass_env:
                    result = function(env, value, *positional, **keywords)
                else:
                    result = function(value, *positional, **keywords)
            except Exception as exc:
                raise _locate(exc, node) from exc
            if result is not value:
                cost = size_cost(result)
                if cost:
                    _charge(scope, cost, node)
            return result

        return apply

    @staticmethod
    def default_filter(node: n.Node, function: Any, args: Any
                       ) -> Optional[Callable[[Scope, Any], Any]]:
        """``x | default(y)``, the commonest filter given an argument, as ``apply`` runs the
        engine's own: the argument evaluated, then chosen for an undefined value (and
        charged as a new result is), without building the call's arguments. None for any
        other filter or arguments."""
        from ..runtime.filters.common import do_default

        positional, keywords = _static_arguments(args)
        if function is not do_default or positional is None or \
                len(positional) != 1 or keywords:
            return None
        fallback = positional[0]

        def apply_default(scope: Scope, value: Any) -> Any:
            chosen = fallback(scope)
            if isinstance(value, Undefined):
                if chosen is not value:
                    cost = size_cost(chosen)
                    if cost:
                        _charge(scope, cost, node)
                return chosen
            return value

        return apply_default

    def e_filter(self, node: n.Node) -> Expr:
        operand = self.expr(node.node)
        apply = self.filter_call(node)

        def filtered(scope: Scope) -> Any:
            return apply(scope, operand(scope))

        attach(filtered, kinds.Filter(operand, apply, self.inline_filter(node)))
        return filtered

    def inline_filter(self, node: n.Node) -> Optional[tuple]:
        """How codegen.py may apply the engine's own filter of ``node`` to an exact str (or
        container, for ``length``) without calling it, charging what ``filter_call``'s
        ``apply_without_arguments`` charges; None when it may not (arguments, a filter of the
        user's)."""
        name = node.name
        if node.args or node.kwargs or node.dyn_args or node.dyn_kwargs:
            return None
        from ..runtime.filters.common import FILTERS

        if self.env.filters.get(name) is not FILTERS.get(name, self):
            return None
        if name in _LEN_FILTERS:
            return ("len",)  # free (FILTER_WEIGHTS), an int result costs nothing
        if name == "string":
            return ("same",)  # a str is its own result; free (FILTER_ITEM_STEPS)
        method = _STR_METHOD_FILTERS.get(name)
        if method is None or filter_input_cost(name) is not size_cost:
            return None

        # what reading the str and building the result cost, charged at once (the filter
        # cannot fail, so only the total matters)
        return ("str_method", method, _step_charger(node))

    def e_test(self, node: n.Node) -> Expr:
        operand = self.expr(node.node)
        function = self.resolve("test", node.name, node)
        args, _ = self.arguments(node)
        env = self.env
        negated = node.negated
        name = node.name
        pass_env = function is not None and wants_environment(function)

        if not (node.args or node.kwargs or node.dyn_args or node.dyn_kwargs) and \
                function is not None and not pass_env:
            scans = name in _SCANNING_TESTS

            def test_without_arguments(scope: Scope) -> bool:
                value = operand(scope)
                try:
                    if scans and type(value) not in _FREE_TO_COMPARE:
                        scope.ctx.charge(size_cost(value))
                    result = function(value)
                except Exception as exc:
                    raise _locate(exc, node) from exc
                return (not result) if negated else bool(result)

            if not scans:  # see codegen.py: TYPE_TESTS are called inline
                attach(test_without_arguments, kinds.Test(operand, function, negated))
            return test_without_arguments

        def test(scope: Scope) -> bool:
            value = operand(scope)
            positional, keywords = args(scope)
            if function is None:
                raise _locate(TemplateRuntimeError(f"No test named {name!r} found."), node)
            try:
                # `big is eq(other)`, `x is in(big)`: what the test compares or scans
                cost = size_cost(value) + sum(map(size_cost, positional))
                if cost:
                    scope.ctx.charge(cost)
                    _check_compared(value, positional, once=True)
                if pass_env:
                    result = function(env, value, *positional, **keywords)
                else:
                    result = function(value, *positional, **keywords)
                return (not result) if negated else bool(result)
            except Exception as exc:
                raise _locate(exc, node) from exc

        return test

    def e_condexpr(self, node: n.Node) -> Expr:
        self.in_if += 1  # Jinja2 defers unknown filters/tests in here, as in `if`
        try:
            test = self.truth(node.test)
            expr1 = self.expr(node.expr1)
            expr2 = self.expr(node.expr2) if node.expr2 is not None else None
        finally:
            self.in_if -= 1
        if expr2 is not None:
            def choose(scope: Scope) -> Any:
                return expr1(scope) if test(scope) else expr2(scope)

            attach(choose, kinds.Cond(test, node.test, expr1, expr2))
            return choose
        hint = (f"the inline if-expression on line {node.lineno} evaluated to false and no else"
                " section was defined.")

        def otherwise(scope: Scope) -> Any:
            # Jinja2: always its plain Undefined here, whatever the environment's undefined
            return Undefined(hint)

        def choose_or_undefined(scope: Scope) -> Any:
            return expr1(scope) if test(scope) else otherwise(scope)

        attach(choose_or_undefined, kinds.Cond(test, node.test, expr1, otherwise))
        return choose_or_undefined

    def e_binop(self, node: n.Node) -> Expr:
        if node.op == "+":
            return self.add_chain(node)
        op = node.op
        left = self.expr(node.left)
        right = self.expr(node.right)

        def apply(a: Any, b: Any, scope: Scope) -> Any:
            try:
                return arith_apply(op, a, b)
            except TemplateError as exc:
                exc._locate(node.lineno, node.column)
                raise
            except Exception as exc:
                raise _locate(exc, node) from exc

        def binop(scope: Scope) -> Any:
            return apply(left(scope), right(scope), scope)

        if op in _INT_FAST_OPS:  # see codegen.py: int operands computed inline
            attach(binop, kinds.IntOp(left, right, op, apply))
        return binop

    def local_lookup(self, node: n.Node) -> Tuple[Optional[str], Any]:
        """(variable, key) when ``node`` is ``local['key']`` or ``local.key`` on a name bound
        in the current scope (string key, not a dict method): closures may read it inline,
        falling back to the node's own closure for anything but a plain dict hit."""
        if isinstance(node, n.Getitem) and isinstance(node.node, n.Name) and \
                isinstance(node.arg, n.Const) and type(node.arg.value) is str and \
                self.is_local(node.node.name):
            return node.node.name, node.arg.value
        if isinstance(node, n.Getattr) and isinstance(node.node, n.Name) and \
                node.attr not in METHODS[dict] and node.attr[:1] != "_" and \
                self.is_local(node.node.name):
            return node.node.name, node.attr
        return None, None

    def add_chain(self, node: n.Node) -> Expr:
        """``a + b + c + ...``: one closure for the whole left-deep chain.

        Chat templates build prompts with long `+` chains of strings; evaluating them in one
        loop (still strictly left to right, one `+` at a time) avoids a closure call per `+`.
        """
        chain: List[n.Node] = []
        current = node
        while isinstance(current, n.BinOp) and current.op == "+":
            chain.append(current)
            current = current.left
        chain.reverse()
        first = self.expr(current)
        first_constant = _constant(current)
        steps = [(_constant(link.right), self.expr(link.right), link) + self.local_lookup(link.right)
                 for link in chain]

        def add_slowly(value: Any, index: int, scope: Scope, given: tuple = ()) -> Any:
            """Python's `+`, one link at a time from ``index`` on; the first operands may be
            ``given`` already evaluated (generated code evaluates them itself)."""
            built = 0  # characters of the strings built: charged once at the end
            pending = len(given)
            for constant, operand, link, _, _ in steps[index:]:
                if pending:
                    other = given[-pending]
                    pending -= 1
                else:
                    other = operand(scope) if constant is MISSING else constant
                if type(value) is str and type(other) is str and \
                        len(value) + len(other) < 1_000_000:
                    value = value + other
                    built += len(value)
                    continue
                try:
                    value = arith_apply("+", value, other)
                except TemplateError as exc:
                    exc._locate(link.lineno, link.column)
                    raise
                except Exception as exc:
                    raise _locate(exc, link) from exc
            if built >> CHARS_SHIFT:
                try:
                    scope.ctx.charge(built >> CHARS_SHIFT)
                except TemplateError as exc:
                    raise _locate(exc, node) from None
            return value

        def add(scope: Scope) -> Any:
            value = first(scope) if first_constant is MISSING else first_constant
            return add_slowly(value, 0, scope)

        def add_evaluated(values: tuple, scope: Scope) -> Any:
            """The sum, its first operands evaluated already (codegen.py's way back when
            one of them is not a str)."""
            return add_slowly(values[0], 0, scope, values[1:])

        attach(add, kinds.Add([(first_constant, first)] + [
                  (constant, operand) for constant, operand, _, _, _ in steps],
                  add_evaluated, _step_charger(node)))  # charges what add_slowly charges

        # The operands for printing: runs of constant strings merged (valid while everything
        # before them is a str, which is the only time they are used), local lookups marked.
        operands = [(current, first)] + [(link.right, operand) for _, operand, link, _, _ in steps]
        parts: List[Tuple[Optional[str], Optional[str], Any, Any, int]] = []
        for position, (operand_node, operand) in enumerate(operands):
            constant = _constant(operand_node)
            if type(constant) is str:
                if parts and parts[-1][0] is not None:
                    parts[-1] = (parts[-1][0] + constant,) + parts[-1][1:]
                else:
                    parts.append((constant, None, None, None, position))
                continue
            variable, key = self.local_lookup(operand_node)
            parts.append((None, variable, key, operand, position))

        def output_sum(scope: Scope, out: list) -> None:
            """``{{ a + b + ... }}``: while the operands are str (evaluated strictly left to
            right), they go straight into the output: ``((a + b) + c)`` printed is the same
            as printing a, b and c. A non-str operand folds what was emitted back into one
            value and continues with Python's `+`."""
            start = len(out)
            append = out.append
            variables = scope.vars
            size = 0
            for text, variable, key, operand, position in parts:
                if text is not None:
                    append(text)
                    size += len(text)
                    continue
                if variable is not None:
                    # `message['content']` on a loop variable: read it here, no call
                    obj = variables[variable]
                    other = obj.get(key, MISSING) if type(obj) is dict else MISSING
                    if other is MISSING:
                        other = operand(scope)
                else:
                    other = operand(scope)
                if type(other) is str:
                    append(other)
                    size += len(other)
                    continue
                return finish_sum(scope, out, start, position, other)
            ctx = scope.ctx
            ctx.output_size += size
            if size > 1_000_000:
                sum_too_big(ctx, size)

        def sum_too_big(ctx: RenderContext, size: int) -> None:
            """The sum printed is a string the template made: its size limit applies."""
            try:
                check_string_size(size)
                ctx.check_output()
            except TemplateError as exc:
                raise _locate(exc, node) from None

        def finish_sum(scope: Scope, out: list, start: int, position: int, other: Any) -> None:
            """Operand ``position`` is not a str: fold what was emitted since ``start`` and
            go on with Python's `+` from there."""
            if position == 0:
                value = add_slowly(other, 0, scope)
            else:
                link = steps[position - 1][2]
                try:
                    joined = _join_checked(out[start:])
                    del out[start:]
                    if scope.ctx.measured_pieces > start:  # see RenderContext.root_length
                        scope.ctx.measured_pieces = scope.ctx.measured_length = 0
                    value = arith_apply("+", joined, other)
                except TemplateError as exc:
                    exc._locate(link.lineno, link.column)
                    raise
                except Exception as exc:
                    raise _locate(exc, link) from exc
                value = add_slowly(value, position, scope)
            if type(value) is not str:
                try:
                    value = _to_text(value)
                except Exception as exc:
                    raise _locate(exc, node) from exc
            out.append(value)
            ctx = scope.ctx
            ctx.output_size += len(value)
            if ctx.output_size > ctx.max_output:
                raise _locate(ctx.limits.exceeded(
                    "max_output_size", "rendered output too large"), node)

        attach(output_sum, kinds.SumPrint(parts, finish_sum, sum_too_big))
        add.output = output_sum  # type: ignore[attr-defined]  # used by {{ a + b }}
        return add

    def e_concat(self, node: n.Node) -> Expr:
        parts = [self.expr(p) for p in node.nodes]
        printer = self.printer
        join = self.join_text

        def text_of(value: Any) -> str:
            """How a part that is not a str joins (here and in codegen.py)."""
            try:
                return printer(value)
            except TemplateError as exc:
                exc._locate(node.lineno, node.column)
                raise
            except Exception as exc:
                raise _locate(exc, node) from exc

        def charge_joined(scope: Scope, total: int) -> bool:
            """What joining ``total`` characters costs, checked before they are joined (here
            and in codegen.py)."""
            try:
                if total > 1_000_000:
                    check_string_size(total)
                scope.ctx.charge(total >> CHARS_SHIFT)
            except TemplateError as exc:
                exc._locate(node.lineno, node.column)
                raise
            return True

        def concat(scope: Scope) -> str:
            try:
                pieces = []
                for part in parts:
                    value = part(scope)
                    pieces.append(value if type(value) is str else text_of(value))
                total = sum(map(len, pieces))
                if total >> CHARS_SHIFT:
                    charge_joined(scope, total)
                return join(pieces)
            except TemplateError as exc:
                exc._locate(node.lineno, node.column)
                raise
            except Exception as exc:
                raise _locate(exc, node) from exc

        if self.autoescape and not self.volatile:
            escaped = self.escaped_text

            def markup_concat(scope: Scope) -> str:
                """Jinja2's markup_join, its `~` inside ``{% autoescape true %}``: with a
                Markup piece, the others are escaped and the result is Markup."""
                try:
                    pieces = []
                    for part in parts:
                        value = part(scope)
                        pieces.append(value if isinstance(value, str) else text_of(value))
                    if any(hasattr(piece, "__html__") for piece in pieces):
                        pieces = [piece if hasattr(piece, "__html__") else escaped(piece)
                                  for piece in pieces]
                        joined = concat_pieces(scope, pieces)
                        return scope.ctx.safe(joined)
                    return concat_pieces(scope, pieces)
                except TemplateError as exc:
                    exc._locate(node.lineno, node.column)
                    raise
                except Exception as exc:
                    raise _locate(exc, node) from exc

            def concat_pieces(scope: Scope, pieces: List[str]) -> str:
                total = sum(map(len, pieces))
                if total >> CHARS_SHIFT:
                    charge_joined(scope, total)
                return join(pieces)

            return markup_concat

        attach(concat, kinds.Concat(parts, text_of, charge_joined, _step_charger(node)))
        return concat

    def e_compare(self, node: n.Node) -> Expr:
        first = self.expr(node.expr)
        ops = [(_COMPARE[op], self.expr(operand)) for op, operand in node.ops]
        if len(node.ops) == 1:
            op, operand_node = node.ops[0]
            function = _COMPARE[op]
            constant = _constant(operand_node)
            second = ops[0][1]
            variable, key = self.local_lookup(node.expr)
            if op in ("==", "!=") and type(constant) is str and variable is not None:
                negate = op == "!="

                def local_equals_string(scope: Scope) -> Any:
                    """``message['role'] == 'user'``: read and compare without a call."""
                    obj = scope.vars[variable]
                    left = obj.get(key, MISSING) if type(obj) is dict else MISSING
                    if left is MISSING:
                        left = first(scope)
                    if type(left) is str:
                        return (left != constant) if negate else (left == constant)
                    try:
                        return function(left, constant)
                    except Exception as exc:
                        raise _locate(exc, node) from exc

                attach(local_equals_string, kinds.EqStr(first, constant, negate))
                return local_equals_string
            if op == "==" and constant is not MISSING and type(constant) is str:
                def equals_string(scope: Scope) -> Any:
                    left = first(scope)
                    if type(left) is str:
                        return left == constant
                    try:
                        return left == constant
                    except Exception as exc:
                        raise _locate(exc, node) from exc

                attach(equals_string, kinds.EqStr(first, constant, False))
                return equals_string

            if op in ("in", "notin"):
                left_constant = _constant(node.expr)
                negate = op == "notin"

                def check_contains(left: Any, right: Any, scope: Scope) -> bool:
                    """``left in right``, charged by what it scans (codegen calls it too)."""
                    kind = type(right)
                    try:
                        if kind is str:
                            if len(right) >> CHARS_SHIFT:
                                scope.ctx.charge(len(right) >> CHARS_SHIFT)
                        elif kind is list or kind is tuple:
                            if len(right) >> ITEMS_SHIFT:
                                scope.ctx.charge(len(right) >> ITEMS_SHIFT)
                        elif kind is not dict:  # Markup, sets, views, host objects
                            scope.ctx.charge(size_cost(right))
                        if type(left) is not str:  # hashing or comparing a big key costs too
                            scope.ctx.charge(size_cost(left))
                            # a key a template may aim, or a container compared with every
                            # item (collisions.py)
                            check_membership(left, right)
                        return left in right
                    except TemplateError as exc:
                        exc._locate(node.lineno, node.column)
                        raise
                    except Exception as exc:
                        raise _locate(exc, node) from exc

                def contains(scope: Scope) -> Any:
                    """``'tool_calls' in message``: no call through an operator function."""
                    left = first(scope) if left_constant is MISSING else left_constant
                    right = second(scope) if constant is MISSING else constant
                    found = check_contains(left, right, scope)
                    return not found if negate else found

                # `role in ('tool', 'ipython')`: a literal of strs only, which a str is looked
                # up in without a call (codegen.py); what scanning it costs is charged there
                literal = _literal_value(operand_node)
                members = tuple(literal) if type(literal) in (tuple, list) and all(
                    type(item) is str for item in literal) else None
                attach(contains, kinds.Contains(first, second, negate, check_contains, members,
                                                _step_charger(node) if members else None))
                return contains

            def compare_values(left: Any, right: Any, scope: Scope) -> Any:
                try:
                    if type(left) not in _FREE_TO_COMPARE or type(right) not in _FREE_TO_COMPARE:
                        _price_comparison(left, right, scope)
                    return function(left, right)
                except Exception as exc:
                    raise _locate(exc, node) from exc

            def compare_once(scope: Scope) -> Any:
                left = first(scope)
                return compare_values(left, second(scope) if constant is MISSING else constant,
                                      scope)

            # see codegen.py: two ints compared inline (free, and never raising)
            attach(compare_once, kinds.IntCompare(first, second, op, compare_values))
            return compare_once

        contains = {_COMPARE["in"], _COMPARE["notin"]}

        def compare(scope: Scope) -> Any:
            left = first(scope)
            try:
                for function, operand in ops:
                    right = operand(scope)
                    if type(left) not in _FREE_TO_COMPARE or type(right) not in _FREE_TO_COMPARE:
                        _price_comparison(left, right, scope)
                        if function in contains:  # `a in b < c`: a lookup (collisions.py)
                            check_membership(left, right)
                    if not function(left, right):
                        return False
                    left = right
                return True
            except Exception as exc:
                raise _locate(exc, node) from exc

        return compare

    def e_and(self, node: n.Node) -> Expr:
        left = self.expr(node.left)
        right = self.expr(node.right)

        def and_(scope: Scope) -> Any:
            value = left(scope)
            try:
                truth = bool(value)
            except Exception as exc:
                raise _locate(exc, node) from exc
            return right(scope) if truth else value

        attach(and_, kinds.And(left, right, node))
        return and_

    def e_or(self, node: n.Node) -> Expr:
        left = self.expr(node.left)
        right = self.expr(node.right)

        def or_(scope: Scope) -> Any:
            value = left(scope)
            try:
                truth = bool(value)
            except Exception as exc:
                raise _locate(exc, node) from exc
            return value if truth else right(scope)

        attach(or_, kinds.Or(left, right, node))
        return or_

    def e_not(self, node: n.Node) -> Expr:
        value = self.truth(node.node)

        def not_(scope: Scope) -> bool:
            return not value(scope)

        attach(not_, kinds.Not(value))
        return not_

    def _unary(self, node: n.Node, function: Callable[[Any], Any]) -> Expr:
        operand = self.expr(node.node)

        def unary(scope: Scope) -> Any:
            value = operand(scope)
            try:
                return function(value)
            except Exception as exc:
                raise _locate(exc, node) from exc

        return unary

    def e_neg(self, node: n.Node) -> Expr:
        folded = _negative_constant(node)
        if folded is not None:  # `-1`: a constant, as Jinja2's optimizer makes it
            return self.e_const(folded)
        return self._unary(node, operator.neg)

    def e_pos(self, node: n.Node) -> Expr:
        return self._unary(node, operator.pos)

    def e_slice(self, node: n.Node) -> Expr:
        raise TemplateSyntaxError("a slice is only allowed inside []", node.lineno, node.column)


_NESTING = (list, tuple, dict)


# What a loop needs to know about its body (Compiler.body_facts), as bits. _CALLS: a call or
# a filter block, which may run code the user supplied; _FILTERS_OR_TESTS: a filter or a test,
# which may too, when the environment's table holds the user's (see _stable_items).
_MENTIONS_LOOP, _KEEPS_SCOPE, _ASSIGNS, _STORES_LOOP = 1, 2, 4, 8
_CALLS, _FILTERS_OR_TESTS = 16, 32
# Not for loops: a subscript by a slice inside (where Jinja2's compile-time folding can differ
# from the value at run time: constfold.py); found in the same walk. _COMPILE_ERROR: something
# that does not compile (a keyword given twice, a filter or test the environment lacks),
# unless Jinja2's folding leaves it out. The compiler folds what holds either (expr).
_OVER_SLICE, _COMPILE_ERROR = 64, 128
_FOLDED_FIRST = _OVER_SLICE | _COMPILE_ERROR

#: Filters without arguments that generated code applies to an exact str as the str method
#: they are (see Compiler.inline_filter), and those that are ``len()`` of an exact container.
_STR_METHOD_FILTERS = {"trim": "strip", "upper": "upper", "lower": "lower",
                       "capitalize": "capitalize"}
_LEN_FILTERS = frozenset({"length", "count"})

#: Built-in filters that apply other filters or tests by name, which may be the user's.
_DISPATCHING_FILTERS = frozenset({"map", "select", "reject", "selectattr", "rejectattr"})


def _own_facts(node: n.Node, filters: Any = None, tests: Any = None) -> int:
    """The facts of ``node`` alone (``filters`` and ``tests``: the environment's tables; a
    filter or test without them is taken to be known)."""
    kind = type(node)
    if kind is n.Call:
        return _CALLS | (_COMPILE_ERROR if _repeated_keyword(node) is not None else 0)
    if kind is n.Filter or kind is n.Test:
        table = filters if kind is n.Filter else tests
        unknown = table is not None and node.name not in table
        return _FILTERS_OR_TESTS | (
            _COMPILE_ERROR if unknown or _repeated_keyword(node) is not None else 0)
    if kind is n.Name:
        return _MENTIONS_LOOP if node.name == "loop" else 0
    if kind is n.NameTarget:
        return _STORES_LOOP if node.name == "loop" else 0
    if kind is n.Getitem and type(node.arg) is n.Slice:
        return _OVER_SLICE
    return _FIXED_FACTS.get(kind, 0)


#: The facts of the nodes whose kind alone decides them (_own_facts looks at the others).
_FIXED_FACTS = {n.Macro: _KEEPS_SCOPE | _ASSIGNS, n.CallBlock: _KEEPS_SCOPE | _CALLS,
                n.Assign: _ASSIGNS, n.AssignBlock: _ASSIGNS, n.FilterBlock: _CALLS}
_NODE_DEPENDENT_FACTS = frozenset({n.Name, n.NameTarget, n.Getitem, n.Call, n.Filter, n.Test})


def _repeated_keyword(node: n.Node) -> Optional[str]:
    """The first keyword given twice in the arguments of a Call, Filter or Test node."""
    keywords = node.kwargs
    return _first_repeated([name for name, _ in keywords]) if len(keywords) > 1 else None


def _first_repeated(names: Iterable[str]) -> Optional[str]:
    """The first name of ``names`` that an earlier one repeats, or None."""
    seen = set()
    for name in names:
        if name in seen:
            return name
        seen.add(name)
    return None


def _folded_kinds() -> frozenset:
    """constfold.FOLDED_KINDS (that module is imported only for templates with a slice)."""
    from .constfold import FOLDED_KINDS

    return FOLDED_KINDS


def _stable_items(env: Any, statements: List[n.Node], facts: int,
                  binds: FrozenSet[str]) -> Union[bool, FrozenSet[str]]:
    """Whether nothing in ``statements`` can change a dict the loop reads: only the engine's
    own filters and tests (none changes its input, and in the immutable sandbox templates
    cannot), and no calls, or only calls of names ``binds`` leaves alone (then those names,
    a frozenset: the generated loop asks, as it starts, whether each holds one of the
    engine's pure functions, ``raise_exception`` the usual one; see codegen.pure_callees).
    Generated loops then read each key of an item once per iteration
    (codegen._Writer.dict_read). Python's special methods of user objects (``__str__``,
    ``__eq__``) are assumed not to change the data they are in."""
    callees: FrozenSet[str] = frozenset()
    if facts & _CALLS:
        callees = _called_names(statements, binds)
        if not callees:
            return False
    if not facts & _FILTERS_OR_TESTS:
        return callees or True
    from ..runtime.filters.common import FILTERS
    from ..runtime.tests import TESTS

    for statement in statements:
        for node in itertools.chain((statement,), statement.find_all((n.Filter, n.Test))):
            if type(node) is n.Filter:
                if node.name in _DISPATCHING_FILTERS or \
                        env.filters.get(node.name) is not FILTERS.get(node.name, env):
                    return False
            elif type(node) is n.Test:
                if env.tests.get(node.name) is not TESTS.get(node.name, env):
                    return False
    return callees or True


# ---- the parts of a macro (Compiler.macro_parts) ----------------------------------------------
def _macro_binder(shown_name: Optional[str], parameters: Tuple[Tuple[str, Any, Any], ...],
                  positions: Dict[str, int], fresh: Tuple[str, ...], explicit_caller: bool,
                  wants_caller: bool, catch_kwargs: bool, catch_varargs: bool
                  ) -> Callable[[Scope, RenderContext, tuple, dict], Scope]:
    """``bind(defining_scope, ctx, args, kwargs)``: a macro's scope for a call its invoke does
    not bind itself. ``parameters``: (name, its default's closure or None, the default's
    value when a constant, else MISSING)."""
    count = len(parameters)
    collects_specials = (wants_caller and not explicit_caller) or catch_kwargs or \
        catch_varargs

    def bind(defining_scope: Scope, ctx: RenderContext, args: tuple, kwargs: dict
             ) -> Scope:
        """The macro's scope for any other call: keywords, defaults (a constant taken as
        it is), the specials (`is_param_set(m, field="name")`, `handle_role(role)`)."""
        local = fresh_variables(fresh, ctx) if fresh else {}
        scope = Scope(local, defining_scope, ctx)
        found_caller = explicit_caller
        given = len(args)
        taken = 0  # keywords a parameter took
        index = 0  # (counts the parameters given by position only)
        for param, default, constant in parameters:
            if index < given:
                local[param] = args[index]
                index += 1
                continue
            value = kwargs.get(param, MISSING) if kwargs else MISSING
            if value is not MISSING:
                taken += 1
            elif constant is not MISSING:
                value = constant
            elif default is not None:
                value = default(scope)
            else:
                value = ctx.undefined(f"parameter {param!r} was not provided",
                                      name=param)
            local[param] = value
        if taken == len(kwargs) and given <= count and not collects_specials:
            return scope  # the common call: nothing left over, nothing to collect
        # the keywords no parameter took, in their order, in a dict of the macro's own
        # (the caller's is left alone)
        kwargs = {key: value for key, value in kwargs.items()
                  if positions.get(key, -1) < given}
        if wants_caller and not found_caller:
            caller = kwargs.pop("caller", None)
            if caller is None:
                caller = ctx.undefined("No caller defined", name="caller")
            local["caller"] = caller
        if catch_kwargs:
            local["kwargs"] = kwargs
        elif kwargs:
            if "caller" in kwargs:
                raise TypeError(
                    f"macro {shown_name!r} was invoked with two values for the special caller"
                    " argument. This is most likely a bug.")
            raise TypeError(
                f"macro {shown_name!r} takes no keyword argument {next(iter(kwargs))!r}")
        if catch_varargs:
            local["varargs"] = tuple(args[count:])
        elif given > count:
            raise TypeError(
                f"macro {shown_name!r} takes not more than {count} argument(s)")
        return scope

    return bind


# ---- the parts of a for loop's closures (Compiler.s_for) ---------------------------------------
def _loop_hot_parts(env: Any, node: n.Node, body: Stmt, simple_name: Optional[str],
                    uses_loop: bool, iteration_cost: int, facts: int, body_binds: Any,
                    fresh: Tuple[str, ...], hot_after: float, renders: List[Any]
                    ) -> Tuple[Any, ...]:
    """A loop's hot switching: (is_hot(count), hot_body(), hot_loop(scope),
    hot_charging_loop(scope), the list holding the generated loop once made). The body, or
    the whole simple loop, is compiled to Python once it has run many times (over all renders
    of this template): a cold start does not pay for compile()."""
    generated: List[Stmt] = []
    # the generated loop: hot_loop's or hot_charging_loop's (a loop takes run_simple or
    # not by its shape, the same every render, so only one of them ever fills it)
    generated_loop: List[Any] = []
    iterations = [0]

    def is_hot(count: int) -> bool:
        iterations[0] += count
        return _hot_enough(iterations[0], hot_after, renders)

    def hot_body() -> Stmt:
        if not generated:
            generated.append(generate_body(body))
        return generated[0]

    def hot_loop(scope: Scope) -> Any:
        if not generated_loop:
            generated_loop.append(generate_loop(
                body, simple_name, uses_loop, iteration_cost,
                _items_stability(env, node.body, facts, body_binds, scope)))
        return generated_loop[0]

    # (the generated loop only reads the dict: the shared one, not a copy)
    starting_variables = (lambda ctx: starting_undefined(fresh, ctx.undefined)) \
        if fresh else None

    def hot_charging_loop(scope: Scope) -> Any:
        if not generated_loop:
            generated_loop.append(generate_charging_loop(
                body, simple_name, uses_loop, iteration_cost, starting_variables,
                _items_stability(env, node.body, facts, body_binds, scope), body_binds))
        return generated_loop[0]

    return is_hot, hot_body, hot_loop, hot_charging_loop, generated_loop


def _loop_for_stmt(node: n.Node, iterable: Expr, else_: Optional[Stmt], generated_loop: List[Any],
                   charged_list: Any, recurse_in: Any, run: Any, uses_loop: bool) -> Stmt:
    """The statement of a loop that takes the general path (``run``)."""
    recursive = node.recursive

    def for_stmt(scope: Scope, out: list) -> Any:
        value = iterable(scope)
        if type(value) is list and not value and else_ is None:
            return None  # `message.tool_calls | default([])`: nothing to do or charge
        looped = generated_loop[0] if generated_loop else None
        if looped is not None:
            # `run` written out once the generated loop is made (only hot_charging_loop
            # fills it for a loop taking this path): the same checks and charges, fewer
            # calls (an inner loop is entered for every message)
            items = charged_list(scope, value, 0)
            if items is not None:
                if not items:
                    return None
                ctx = scope.ctx
                loop = LoopContext(items, 0, recurse_in(scope) if recursive else None,
                                   ctx.undefined) if uses_loop else None
                if looped(Scope({}, scope, ctx), out, items, loop) is not None:
                    try:
                        ctx.step(0)
                    except TemplateError as exc:
                        raise _locate(exc, node) from None
                return None
        return run(scope, out, value, 0)

    return for_stmt


def _loop_for_simple(node: n.Node, iterable: Expr, generated_loop: List[Any], charged_list: Any,
                     items_of: Any, recurse_in: Any, run_simple: Any, stop_over_limit: Any,
                     uses_loop: bool, iteration_cost: int) -> Stmt:
    """The statement of the common loop (``run_simple``)."""
    recursive = node.recursive

    def for_simple(scope: Scope, out: list) -> Any:
        """``for_stmt`` and ``run`` in one call, for the common loop (one name, no
        `else`, nothing bound in the body): an inner loop is entered for every message."""
        value = iterable(scope)
        if type(value) is list and not value:
            return None  # (as for_stmt)
        looped = generated_loop[0] if generated_loop else None
        if looped is not None:
            # items_of and run_simple written out once the generated loop is made: the
            # same checks and charges, in one (the general path raises)
            items = charged_list(scope, value, iteration_cost)
            if items is not None:
                if not items:
                    return None
                ctx = scope.ctx
                if uses_loop:
                    loop = LoopContext(items, 0, recurse_in(scope) if recursive else None,
                                       ctx.undefined)
                    inner = Scope({"loop": loop}, scope, ctx)
                else:
                    loop = None
                    inner = Scope({}, scope, ctx)
                stopped = looped(inner, out, items, loop)
                while stopped is not None:  # as run_simple
                    stop_over_limit(ctx, stopped)
                    stopped = looped(inner, out, stopped, loop)
                return None
        items = items_of(scope, value)
        if not items:
            return None
        ctx = scope.ctx
        loop = LoopContext(items, 0, recurse_in(scope) if recursive else None,
                           ctx.undefined) if uses_loop else None
        return run_simple(scope, out, items, loop, ctx)

    return for_simple


def _loop_items_of(node: n.Node, assign: Callable[[Scope, Any], None], loop_filter: Any,
                   filter_cost: int) -> Callable[[Scope, Any], List[Any]]:
    """``items_of(scope, value)``: the items a loop runs over, materialised, charged and
    filtered by its ``if``."""
    def items_of(scope: Scope, value: Any) -> List[Any]:
        kind = type(value)
        if (kind is list or kind is tuple) and loop_filter is None:
            # materialise() written out for the common case (an inner loop runs per
            # message); anything over a limit takes the general path below, which raises
            ctx = scope.ctx
            size = len(value)
            if size <= ctx.limits.max_collection_size and \
                    ctx.steps + (size >> 1) <= ctx.max_steps:
                ctx.steps += size >> 1  # budget.ITEMS_SHIFT, as materialise charges
                return list(value)
        if isinstance(value, Undefined):
            try:
                iter(value)  # StrictUndefined raises here
            except TemplateError as exc:
                exc._locate(node.iter.lineno, node.iter.column)
                raise
            return []
        try:
            items = list(value.keys()) if type(value) is dict else materialise(value)
        except TemplateError as exc:
            exc._locate(node.iter.lineno, node.iter.column)
            raise
        except Exception as exc:
            raise _locate(exc, node.iter) from exc
        if loop_filter is not None:
            try:
                scope.ctx.charge(len(items) * filter_cost)
            except TemplateError as exc:
                raise _locate(exc, node) from None
            kept = []
            for item in items:
                inner = Scope({}, scope, scope.ctx)
                assign(inner, item)
                if loop_filter(inner):
                    kept.append(item)
            items = kept
        return items

    return items_of


def _loop_charged_list(loop_filter: Any) -> Callable[[Scope, Any, int], Optional[List[Any]]]:
    def charged_list(scope: Scope, value: Any, per_item: int) -> Optional[List[Any]]:
        """For a loop whose generated function is made: ``value`` (a list or tuple)
        copied and charged as items_of charges it, plus ``per_item`` steps an item; None
        when the general path must decide (another type, a filter, a limit to raise)."""
        kind = type(value)
        if (kind is list or kind is tuple) and loop_filter is None:
            ctx = scope.ctx
            size = len(value)
            charged = (size >> 1) + size * per_item
            if size <= ctx.limits.max_collection_size and \
                    ctx.steps + charged <= ctx.max_steps:
                ctx.steps += charged
                return list(value)
        return None

    return charged_list


def _loop_stop_over_limit(node: n.Node, iteration_cost: int) -> Callable[[RenderContext, Any],
                                                                         None]:
    def stop_over_limit(ctx: RenderContext, remaining: Any) -> None:
        """Output or work seems over its limit mid-loop, the iterations not yet run being
        charged already: without their steps, raise the limit's error here if it still
        is; else the loop goes on, their steps charged again (never given away)."""
        not_run = operator.length_hint(remaining) * iteration_cost
        ctx.steps -= not_run
        try:
            ctx.step(0)
        except TemplateError as exc:
            raise _locate(exc, node) from None
        ctx.steps += not_run

    return stop_over_limit


def _items_stability(env: Any, statements: List[n.Node], facts: int, binds: FrozenSet[str],
                     scope: Scope) -> Union[bool, FrozenSet[str]]:
    """_stable_items as the generated loop is made: names called that do not hold pure
    functions now (a macro, the user's function) most likely never will, and the loop then
    reads each key where it is used, not once per iteration with a test of the callees."""
    stable = _stable_items(env, statements, facts, binds)
    if type(stable) is frozenset:
        from .codegen import pure_callees

        if not pure_callees(scope, tuple(stable)):
            return False
    return stable


def _called_names(statements: List[n.Node], binds: FrozenSet[str]) -> FrozenSet[str]:
    """The names called in ``statements`` when every call there is of a name (``f(...)``)
    that nothing inside binds (``binds``, the frame's stores, an inner loop's target or
    ``loop``, a `set` or `with` in an inner frame), and nothing else there calls or binds
    names of its own (a call or filter block, a macro defined there); else the empty set."""
    names = set()
    bound = set(binds) | _SPECIAL_NAMES
    for statement in statements:
        for node in itertools.chain((statement,), statement.find_all(
                (n.Call, n.NameTarget) + _CALLING_BLOCKS)):
            kind = type(node)
            if kind is n.Call:
                callee = node.node
                if type(callee) is not n.Name:
                    return frozenset()
                names.add(callee.name)
            elif kind is n.NameTarget:
                bound.add(node.name)
            elif kind in _CALLING_BLOCKS:
                return frozenset()
    return frozenset(names) if names.isdisjoint(bound) else frozenset()


#: Names bound by the engine itself inside a loop body (an inner loop, a macro's specials).
_SPECIAL_NAMES = frozenset({"loop", "caller", "varargs", "kwargs"})
#: Blocks that call (a call block's callee, a filter block's filter) or bind names of their
#: own (a macro defined in the loop): a loop holding one is not stable for _called_names.
_CALLING_BLOCKS = (n.CallBlock, n.FilterBlock, n.Macro)


def _subtree_facts(root: n.Node, filters: Any = None, tests: Any = None) -> Dict[int, int]:
    """For every node under ``root`` (by id), the facts of its whole subtree: the nodes in
    pre-order, then summed up in the reverse order, where every node comes after all of its
    descendants (asking each loop about its body separately was quadratic in the nesting of
    loops; a recursive walk would fail on deep expressions)."""
    order: List[Tuple[n.Node, List[n.Node]]] = []
    stack = [root]
    pop, extend, visit = stack.pop, stack.extend, order.append
    while stack:
        node = pop()
        children = node.child_nodes()
        visit((node, children))
        extend(children)
    facts: Dict[int, int] = {}
    fixed = _FIXED_FACTS.get
    for node, children in reversed(order):
        kind = type(node)
        found = _own_facts(node, filters, tests) if kind in _NODE_DEPENDENT_FACTS \
            else fixed(kind, 0)
        for child in children:
            found |= facts[id(child)]
        facts[id(node)] = found
    return facts
#: Filters that compare the items of their input with one another (True) or with their
#: arguments (False). Comparing two containers visits at most the smaller one, so bounding
#: one side of every comparison is enough.
_COMPARING_FILTERS = {"sort": True, "unique": True, "min": True, "max": True, "dictsort": True,
                      "groupby": True, "select": False, "reject": False, "selectattr": False,
                      "rejectattr": False}


def _check_compared(value: Any, arguments: Any, items_too: bool = True,
                    once: bool = False) -> None:
    """Containers of containers about to be compared: bounded first (see
    limits.check_comparable). Flat values cost nothing here. A filter sorting ``value``
    compares each item about log2(n) times, a filter selecting its items compares each
    argument with every one of them; a test compares ``value`` with its arguments ``once``."""
    size = len(value) if isinstance(value, _NESTING) else 1
    if items_too and isinstance(value, _NESTING):
        check_comparable(value, 1 if once else max(size.bit_length(), 1))
    for item in arguments:
        if isinstance(item, _NESTING):
            check_comparable(item, 1 if once else max(size, 1))


def _price_comparison(left: Any, right: Any, scope: Scope) -> None:
    """Charge a comparison for what it reads; containers of containers are walked first, since
    comparing them recurses in C with no bound on time (see limits.check_comparable)."""
    scope.ctx.charge(size_cost(left) + size_cost(right))
    check_compared(left, right)


def _local_loader(name: str) -> Expr:
    """``scope.vars[name]`` for a name bound in the current scope (codegen reads the spec)."""
    def load_local(scope: Scope) -> Any:
        return scope.vars[name]

    attach(load_local, kinds.Local(name))
    return load_local


def _slow_getattr(sandbox: Any, name: str, node: n.Node) -> Callable[[Any, Scope], Any]:
    """The path of an attribute lookup closure (``obj.name``) for anything but a dict holding
    ``name``: one of the engine's namespaces holding it answers as a dict does (``ns.found``
    in a loop: an O(1) read, charged nothing beyond the node, like a dict hit); anything else
    takes the sandbox, charged SLOW_LOOKUP_STEPS (codegen.py inlines both reads)."""
    through_sandbox = _slow_lookup(sandbox.getattr, name, node)
    reads_namespaces = _reads_namespaces(name)
    # a dict's item or Undefined, as the sandbox answers for a dict (a method's name or a
    # private one takes its full path)
    item_or_undefined = dict_item_only(name)

    def slow(obj: Any, scope: Scope) -> Any:
        if item_or_undefined and type(obj) is dict:  # `message.tool_calls`, mostly absent
            value = obj.get(name, MISSING)
            if value is not MISSING:
                return value
            return undefined_item(scope.ctx, obj, name)
        if reads_namespaces and type(obj) in NAMESPACE_TYPES:
            value = obj._template_getattr(name)  # as the sandbox reads it
            if value is not MISSING:
                return value
        return through_sandbox(obj, scope)

    return slow


def _reads_namespaces(name: str) -> bool:
    """Whether the attribute ``name`` of one of the engine's namespaces is read as a dict's
    item is (any but a private one), by _slow_getattr and by generated code (the Lookup
    spec's ``reads_namespaces``)."""
    return name[:1] != "_"


def _macro_maker(signature: tuple, invoke: Callable[..., Any]) -> Callable[[Scope], Macro]:
    """``make(scope)``: the macro of ``signature`` defined in that scope (codegen.py writes
    the same ``Macro(signature, partial(invoke, scope))`` out from the Define spec)."""

    def make(defining_scope: Scope) -> Macro:
        return Macro(signature, partial(invoke, defining_scope))

    return make


def undefined_item(ctx: RenderContext, obj: dict, key: str) -> Any:
    """A dict lacks ``key`` (one :func:`sandbox.dict_item_only` allows): the undefined value
    the sandbox gives for it, charged what a lookup's sandbox path charges (generated code
    calls it too)."""
    ctx.steps += SLOW_LOOKUP_STEPS
    return ctx.sandbox.undefined(obj=obj, name=key)


def _slow_lookup(lookup: Callable[[Any, Any], Any], key: Any, node: n.Node
                 ) -> Callable[[Any, Scope], Any]:
    """The sandbox path of a lookup closure, for an object that is not a dict holding ``key``
    (codegen.py inlines the dict hit and calls this otherwise)."""
    def slow(obj: Any, scope: Scope) -> Any:
        try:
            scope.ctx.steps += SLOW_LOOKUP_STEPS
            return lookup(obj, key)
        except Exception as exc:
            raise _locate(exc, node) from exc

    return slow


#: str methods generated code may call itself (see method_call): they return a str, a bool or
#: an int, and cannot fail on a str with (at most two) str arguments.
_INLINE_STR_METHODS = frozenset({"strip", "lstrip", "rstrip", "startswith", "endswith", "upper",
                                 "lower", "find", "rfind"})


def _small_int(value: Any) -> bool:
    """An int key codegen can write as a literal (`messages[-1]`, `content[0]`)."""
    return type(value) is int and -(1 << 62) < value < (1 << 62)


def _step_charger(node: n.Node) -> Callable[[Scope, int], bool]:
    """``charge(scope, steps)``: ctx.charge written out, a limit error located at ``node``,
    True to sit inside a generated expression (which calls it for nearly every sum and
    inline filter)."""
    def charge(scope: Scope, steps: int) -> bool:
        ctx = scope.ctx
        ctx.steps += steps
        if ctx.steps > ctx.max_steps:
            raise _locate(ctx.too_much_work(), node) from None
        return True

    return charge


def _charge(scope: Scope, steps: int, node: n.Node) -> None:
    """Charge work done at ``node`` (a limit error is located there)."""
    try:
        scope.ctx.charge(steps)
    except TemplateError as exc:
        raise _locate(exc, node) from None


def _join_checked(pieces: List[str]) -> str:
    total = sum(map(len, pieces))
    if total > 1_000_000:
        check_string_size(total)
    return "".join(pieces)


def _literal_value(node: n.Node) -> Any:
    """The value of a list/dict/tuple literal made only of constants, or MISSING."""
    try:
        if isinstance(node, n.Const):
            return node.value
        if isinstance(node, n.TupleLit):
            items = tuple(_literal_value(item) for item in node.items)
            return MISSING if MISSING in items else items
        if isinstance(node, n.ListLit):
            items = [_literal_value(item) for item in node.items]
            return MISSING if any(item is MISSING for item in items) else items
        if isinstance(node, n.DictLit):
            pairs = [(_literal_value(k), _literal_value(v)) for k, v in node.pairs]
            if any(k is MISSING or v is MISSING for k, v in pairs):
                return MISSING
            if not literal_allowed([k for k, _ in pairs]):  # refused when it is evaluated
                return MISSING
            return dict(pairs)  # an unhashable key raises here: built at render time instead
    except TypeError:
        return MISSING
    return MISSING


def _aimed_key(key: Any) -> bool:
    """Whether a template may aim ``key`` at a dict's slots: its lookups are then charged
    (collisions.lookup_steps)."""
    return not (isinstance(key, str) and STR_HASH_SECRET)


def _key_never_aimed(node: n.Node) -> bool:
    """Whether a dict literal's key is a constant str no template can aim at a slot (see
    collisions.py): such keys are not counted."""
    return isinstance(node, n.Const) and not _aimed_key(node.value)


def _plain_literal(value: Any) -> bool:
    """Whether ``repr(value)`` is Python source rebuilding an equal value."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return True
    if kind is float:
        return math.isfinite(value)
    if kind is list or kind is tuple:
        return all(_plain_literal(item) for item in value)
    if kind is dict:
        return all(_plain_literal(key) and _plain_literal(item) for key, item in value.items())
    return False


def _fresh_copier(value: Any) -> Expr:
    """Each evaluation gets its own copy: templates may mutate a list or dict they built.
    Copying hashes the keys of the dicts inside again: keys a template may aim are charged
    what that may cost (collisions.literal_steps), each time."""
    copier = _plain_copier(value)
    built: List[Expr] = []
    rehashing = literal_steps(value)

    def copy_literal(scope: Scope) -> Any:
        # Python's own literal code builds the copy fastest (keys and strings shared); it is
        # compiled on first use, not at a cold start
        if not built:
            try:
                built.append(eval("lambda scope: " + repr(value), {})  # noqa: S307 - plain data
                             if _plain_literal(value) else copier)
            except (SyntaxError, RecursionError, ValueError, MemoryError):  # too deep or long
                built.append(copier)
        return built[0](scope)

    if rehashing:
        def copy_charged_literal(scope: Scope) -> Any:
            scope.ctx.charge(rehashing)
            return copy_literal(scope)

        return copy_charged_literal
    return copy_literal


def _plain_copier(value: Any) -> Expr:
    """A copier walking the value (for literals Python's parser cannot take)."""
    if isinstance(value, list) and not any(isinstance(item, (list, dict)) for item in value):
        return lambda scope: list(value)
    if isinstance(value, dict) and not any(isinstance(item, (list, dict))
                                           for item in value.values()):
        return lambda scope: dict(value)

    def copy(item: Any) -> Any:
        if type(item) is list:
            return [copy(element) for element in item]
        if type(item) is dict:
            return {key: copy(element) for key, element in item.items()}
        if type(item) is tuple:
            return tuple(copy(element) for element in item)
        return item

    return lambda scope: copy(value)


def _constant(node: n.Node) -> Any:
    """The value of a constant node, or MISSING: lets closures skip calling a constant."""
    return node.value if isinstance(node, n.Const) else MISSING


def _negative_constant(node: n.Node) -> Optional[n.Node]:
    """``-<number>`` as one Const node (Jinja2 folds it while compiling), else None."""
    if type(node) is n.Neg and type(node.node) is n.Const and \
            type(node.node.value) in (int, float):
        return n.Const(-node.node.value, lineno=node.lineno, column=node.column)
    return None


#: The engine's undefined classes: their values never change once made, so a frame's
#: starting undefined values are made once per class and names and shared (see _fresh).
_IMMUTABLE_UNDEFINED = (Undefined, ChainableUndefined, StrictUndefined)
_FRESH_VALUES: Dict[Tuple[Any, Tuple[str, ...]], Dict[str, Any]] = {}


def starting_undefined(names: Tuple[str, ...], undefined: Any) -> Dict[str, Any]:
    """``names`` -> an ``undefined`` value each: made once per class and names when the values
    never change (then shared: callers must not modify the dict)."""
    if undefined not in _IMMUTABLE_UNDEFINED:
        return {name: undefined(name=name) for name in names}
    key = (undefined, names)
    values = _FRESH_VALUES.get(key)
    if values is None:
        if len(_FRESH_VALUES) >= 4096:  # templates come and go: keep it bounded
            _FRESH_VALUES.clear()
        values = _FRESH_VALUES[key] = {name: undefined(name=name) for name in names}
    return values


def _constant_value(default: Any) -> Any:
    """The value of a macro parameter's default when it is a constant of an immutable type
    (``none``, ``False``, a string): the same every call, taken without calling its
    closure; else MISSING."""
    described = _spec_described(default)
    if described is not None and described.kind == "Const":
        value, = described.fields
        if type(value) in _IMMUTABLE_CONSTANTS:
            return value
    return MISSING


_IMMUTABLE_CONSTANTS = frozenset({str, int, float, bool, type(None)})


def fresh_variables(names: Tuple[str, ...], ctx: RenderContext) -> Dict[str, Any]:
    """A frame's starting variables: its store-first names are undefined (see symbols.py).
    A new dict every time (callers add to it)."""
    if not names:
        return {}
    return dict(starting_undefined(names, ctx.undefined))


def _sequence(compiled: List[Stmt]) -> Stmt:
    """The statements ``compiled`` run in order; a signal (`break`, `continue`) ends them."""
    def run_body(scope: Scope, out: list) -> Any:
        for statement in compiled:
            signal = statement(scope, out)
            if signal is not None:
                return signal
        return None

    attach(run_body, kinds.Body(compiled))
    return run_body


def _bound_names(target: n.Node) -> FrozenSet[str]:
    """The names a `set` of ``target`` binds in its scope (none for ``ns.attr``): the
    statement's ``rebinds``, which codegen.py reads."""
    return frozenset(name.name for name in _target_names(target))


def _target_names(target: n.Node) -> List[n.Node]:
    if isinstance(target, n.TupleTarget):
        result: List[n.Node] = []
        for item in target.items:
            result.extend(_target_names(item))
        return result
    return [target] if isinstance(target, n.NameTarget) else []


def _referenced_names(body: List[n.Node]) -> set:
    """Which of ``caller``, ``kwargs`` and ``varargs`` a macro body reads, as Jinja2 decides
    it: anywhere inside, nested macros and call blocks included, but not inside a
    ``{% block %}``, and a name assigned before it is read is the body's own variable."""
    candidates = {"caller", "kwargs", "varargs"}
    names = set()
    stack: List[Any] = list(reversed(body))  # in source order, as Jinja2's visitor goes
    while stack and candidates:
        node = stack.pop()
        if isinstance(node, n.Scope):  # a {% block %}
            continue
        if isinstance(node, n.Name):
            if node.name in candidates:
                names.add(node.name)
                candidates.discard(node.name)
        elif isinstance(node, n.NameTarget):
            candidates.discard(node.name)
        children = node.child_nodes()
        children.reverse()
        stack.extend(children)
    return names


_EXPRESSIONS: Dict[type, Callable[[Compiler, Any], Expr]] = {
    n.Const: Compiler.e_const,
    n.Name: Compiler.e_name,
    n.TupleLit: Compiler.e_tuple,
    n.ListLit: Compiler.e_list,
    n.DictLit: Compiler.e_dict,
    n.Getattr: Compiler.e_getattr,
    n.Getitem: Compiler.e_getitem,
    n.Call: Compiler.e_call,
    n.Filter: Compiler.e_filter,
    n.Test: Compiler.e_test,
    n.CondExpr: Compiler.e_condexpr,
    n.BinOp: Compiler.e_binop,
    n.Concat: Compiler.e_concat,
    n.Compare: Compiler.e_compare,
    n.And: Compiler.e_and,
    n.Or: Compiler.e_or,
    n.Not: Compiler.e_not,
    n.Neg: Compiler.e_neg,
    n.Pos: Compiler.e_pos,
    n.Slice: Compiler.e_slice,
}

_STATEMENTS: Dict[type, Callable[[Compiler, Any], Stmt]] = {
    n.Output: Compiler.s_output,
    n.If: Compiler.s_if,
    n.For: Compiler.s_for,
    n.Assign: Compiler.s_assign,
    n.AssignBlock: Compiler.s_assign_block,
    n.FilterBlock: Compiler.s_filter_block,
    n.Macro: Compiler.s_macro,
    n.CallBlock: Compiler.s_call_block,
    n.With: Compiler.s_with,
    n.Scope: Compiler.s_scope,
    n.ExprStmt: Compiler.s_expr_stmt,
    n.AutoEscape: Compiler.s_autoescape,
    n.Break: Compiler.s_break,
    n.Continue: Compiler.s_continue,
    n.Generation: Compiler.s_generation,
    n.NoLoader: Compiler.s_no_loader,
}

# dispatch tables of this class (a subclass compiling differently brings its own)
Compiler.expressions = _EXPRESSIONS
Compiler.statements = _STATEMENTS

__all__ = ["Compiler", "Scope", "RenderContext", "BREAK", "CONTINUE", "to_output",
           "LimitExceededError", "BoundMethod", "unsafe_undefined"]
