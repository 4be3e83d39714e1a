"""Hot loop bodies compiled to Python source: the closures' fast paths, inlined.

The compiler turns every node into a closure; a loop body then costs a Python call per
statement and per operand. For bodies that run many times (a loop over a long conversation),
this module writes one Python function doing what those closures do, with their fast paths
(``message['role']`` read straight from a dict, string comparisons, ``if`` tests, printing)
written out inline, and every other node still calling its closure. Nothing here decides
semantics: each closure carries a ``spec`` describing its own fast path (one class per kind,
in compiler/specs.py, attached where the compiler creates it), and the emitter for its kind
below (``_EXPRESSIONS``, ``_STATEMENTS``) reproduces exactly that fast path and falls back to
the same slow path the closure takes. Closures without a spec are simply called.

The function is built once the loop has run its body ``compiler.HOT_ITERATIONS`` times, over all
renders of the compiled template: often enough to pay for ``compile()``, and never in a cold
start rendering a short conversation (the compiler imports this module only then).

Why one module of over a thousand lines: the writer (``_Writer``) and the code for each
kind of spec share one state while a body is written (temporaries, names bound, locals read
once, steps left pending in a statement), and each fast path here mirrors one closure of the
compiler; split up, every emitter would take that state as arguments and the mirror would
be harder to check against its closure.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any, Callable, Dict, FrozenSet, List, Optional, Tuple, Union

import re
import sys
from functools import partial

from ..guard.prices import CHARS_SHIFT, ITEMS_SHIFT, SLOW_LOOKUP_STEPS
from ..guard.collisions import lookup_steps
from .specs import (Add, And, Body, Break, Call, Concat, Cond, Const, Contains, Continue, Define,
                    DictGet, DirectAttribute, EqStr, Filter, If, Index, IntCompare, IntOp, Local,
                    Lookup, Name, Not, Or, Print, PrintParts, Set, SetNamespace, StrMethod,
                    Subscript, SumPrint, Test, Text, Truth, spec_of)
from .closures import undefined_item
from ..exceptions import TemplateError, wrap_python_error
from ..runtime.objects import MISSING, NAMESPACE_TYPES, GlobalFunction, Macro, Undefined, to_text
from ..runtime.sandbox import dict_item_only
from ..runtime.tests import (TYPE_TESTS, is_boolean, is_defined, is_false, is_none, is_string,
                             is_true, is_undefined)


#: Bodies with more statements than this (after inlining) stay closures: compiling huge
#: functions costs more than it saves.
MAX_LINES = 400
MAX_DEPTH = 12
# Lines of a generated loop around its body, at most (what MAX_LINES leaves for the body)
_LOOP_HEADER_LINES = 20


def _located(exc: BaseException, node: Any) -> TemplateError:
    err = wrap_python_error(exc)
    err._locate(node.lineno, node.column)
    return err


def _truthy(value: Any, node: Any) -> bool:
    """``bool(value)`` as a template test: errors (a StrictUndefined) are located."""
    try:
        return bool(value)
    except Exception as exc:
        raise _located(exc, node) from exc


def _text(value: Any, node: Any) -> str:
    """How a non-str value prints, errors located."""
    try:
        return to_text(value)
    except Exception as exc:
        raise _located(exc, node) from exc


def _output_overflow(ctx: Any, node: Any) -> None:
    raise _located(ctx.limits.exceeded("max_output_size", "rendered output too large"), node)


def _locate_statement(exc: BaseException, node: Any) -> TemplateError:
    if isinstance(exc, TemplateError):
        exc._locate(node.lineno, node.column)
        return exc
    return _located(exc, node)


def _flushed(ctx: Any, pending: int) -> int:
    """Charge the steps a statement left pending (see _Writer.charge); 0, the new pending."""
    ctx.steps += pending
    return 0


#: Calls in generated code that may read or charge ``ctx.steps``: closures and ``_text``.
_CALLEE = re.compile(r"_k[0-9]+|_text")


def _flush_before_calls(lines: List[str]) -> Optional[List[str]]:
    """``lines`` (a statement) with each call of a closure or ``_text`` made to charge the
    pending steps first, when there are any: ``_k3(...)`` becomes ``(_k3 if not _pending
    else ((_pending := _flushed(ctx, _pending)) or _k3))(...)``; or None when some steps
    are left pending inside a call's arguments (``g(x + y)``: the callee is evaluated before
    them), where they must be charged at once. Names are found as tokens, so text in string
    literals is left alone."""
    import tokenize

    calls = []  # edits (see _rewritten): each callee wrapped
    tokens = _tokens(lines)
    open_calls: List[bool] = []  # for each open parenthesis: does it hold a call's arguments
    previous = None
    for token, following in zip(tokens, tokens[1:] + [None]):
        if token.type == tokenize.OP and token.string == "(":
            call = previous is not None and previous.type == tokenize.NAME and \
                _CALLEE.fullmatch(previous.string) is not None and previous.end == token.start
            open_calls.append(call)
            if call:
                name = previous.string
                calls.append((previous.start, previous.end, f"({name} if not _pending else "
                              f"((_pending := _flushed(ctx, _pending)) or {name}))"))
        elif token.type == tokenize.OP and token.string == ")":
            open_calls.pop()
        elif token.string == "_pending" and following is not None and \
                following.string == ":=" and any(open_calls):
            return None
        previous = token
    return _rewritten(lines, calls)


def _tokens(lines: List[str]) -> List[Any]:
    """The Python tokens of generated ``lines`` (indented statements). A read placeholder
    (``\\x00N\\x00``, see _Writer.dict_read) is a name of its length here: Python 3.12's
    tokenizer refuses NUL characters (with a SystemError), the earlier one let them by."""
    import io
    import tokenize

    source = "\n".join(lines).replace("\x00", "_") + "\n"
    return list(tokenize.generate_tokens(io.StringIO(source).readline))


def _rewritten(lines: List[str], edits: List[Tuple[Tuple[int, int], Tuple[int, int], str]]
               ) -> List[str]:
    """``lines`` with each (start, end, text) of ``edits`` (token positions, on one line)
    put in place of what it spans."""
    lines = list(lines)
    for (row, start), (_, end), text in sorted(edits, reverse=True):
        line = lines[row - 1]
        lines[row - 1] = line[:start] + text + line[end:]
    return lines


def _bind_target_lazily(lines: List[str], target: str, item: str) -> List[str]:
    """A loop body whose own reads of its target use the local ``item``: each use of
    ``scope`` (what the closures it calls receive, and read the target from) made to store
    the item in the iteration's variables first, once per item, instead of a store as each
    iteration starts; most iterations of most loops call no closure. ``_b`` is the item
    stored last (``_M`` before any)."""
    import tokenize

    bound = f"(scope if _b is {item} else _bound(scope, {target!r}, (_b := {item})))"
    edits = []
    previous = None
    for token in _tokens(lines):
        if token.string == "scope" and token.type == tokenize.NAME and (
                previous is None or previous.string != "."):
            edits.append((token.start, token.end, bound))
        previous = token
    return _rewritten(lines, edits)


def _bound(scope: Any, name: str, value: Any) -> Any:
    """``scope`` with its variable ``name`` set to ``value`` (see _bind_target_lazily)."""
    scope.vars[name] = value
    return scope


def _sync_iteration_lazily(lines: List[str], sync_call: str) -> List[str]:
    """A loop body that assigns, made to write the iteration's variables (its starting ones,
    ``loop``, the target, the names set so far) into its scope only when something reads
    them: each use of ``scope`` (what the closures it calls receive) and of ``vars`` (a read
    of a name not forwarded to a local) writes them first, once per iteration (``_synced``;
    ``sync_call`` writes them, see _sync_function); from then on a `set` stores at once too
    (see _statement's "set"). Most iterations of most loops call no closure: the scope's
    dict was cleared and filled for nothing. Each name's local (``_v0``...) is ``_M`` as an
    iteration starts: set in it or not."""
    import tokenize

    synced = f"(_synced or (_synced := {sync_call}))"
    replacement = {"scope": f"({synced} and scope)", "vars": f"({synced} and vars)"}
    edits = []
    previous = None
    for token in _tokens(lines):
        if token.type == tokenize.NAME and token.string in replacement and (
                previous is None or previous.string != "."):
            edits.append((token.start, token.end, replacement[token.string]))
        previous = token
    return _rewritten(lines, edits)


def _sync_function(target: str, stored: Dict[str, str], fresh: bool, uses_loop: bool
                   ) -> Tuple[str, List[str]]:
    """(the call, the definition) of ``_sync_locals``, written with the loop: it writes an
    iteration's variables into its scope as a loop writing them eagerly has them by then
    (its starting variables, ``loop``, the target, each name set so far: its local is not
    ``_M``) and returns True. The call's two ``{}`` are the scope's and the item's code."""
    parameters = ", ".join(["scope", "fresh", "loop", "item"] + list(stored.values()))
    lines = [f"def _sync_locals({parameters}):", "    vars = scope.vars", "    vars.clear()"]
    if fresh:
        lines.append("    vars.update(fresh)")
    if uses_loop:
        lines.append("    vars['loop'] = loop")
    lines.append(f"    vars[{target!r}] = item")
    for name, local in stored.items():
        lines += [f"    if {local} is not _M:", f"        vars[{name!r}] = {local}"]
    lines.append("    return True")
    # (the starting variables are made when first written: most runs of a loop write none)
    starting = "(fresh if fresh is not _M else (fresh := _fresh_variables(ctx)))"
    arguments = ", ".join(["{}", starting if fresh else "None", "loop", "{}"]
                          + list(stored.values()))
    return f"_sync_locals({arguments})", lines


_TEMPORARY = re.compile(r"_t[0-9]+")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_EARLY_READ = re.compile(r"_r[0-9]+")


def _known_true(lines: List[str], flags: List[str]) -> List[str]:
    """``lines`` with each read of the variables ``flags`` (``_d0``: whether an item is a
    dict) made the constant True, in the copy of a body that only runs when they are:
    Python's compiler then drops the tests."""
    import tokenize

    return _rewritten(lines, [(token.start, token.end, "True") for token in _tokens(lines)
                              if token.type == tokenize.NAME and token.string in flags])


def _aliased(lines: List[str]) -> List[str]:
    """``lines`` with each temporary that only ever takes the value of an early read
    (``type(_t2 := _r0) is str``, see _Writer.resolve_reads) replaced by that read's own
    local: two instructions fewer per use."""
    import tokenize

    tokens = _tokens(lines)
    names = [token.string if token.type == tokenize.NAME else None for token in tokens]
    aliases: Dict[str, Tuple[int, str]] = {}  # temporary -> (its walrus' token index, read)
    # temporaries in f-strings (`f'{_t8}'`, see _joined_strs) keep their names: before
    # Python 3.12 an f-string is one token
    assigned = set(_TEMPORARY.findall(" ".join(
        token.string for token in tokens if token.type == tokenize.STRING and
        token.string[:2].lower() in ("f'", 'f"'))))
    depth = 0  # Python 3.12 and later: the tokens inside an f-string
    for index, token in enumerate(tokens):
        kind = tokenize.tok_name.get(token.type)
        depth += (kind == "FSTRING_START") - (kind == "FSTRING_END")
        if depth and names[index] is not None:
            assigned.add(names[index])
    for index, name in enumerate(names):
        if name is None or not _TEMPORARY.fullmatch(name) or index + 3 >= len(tokens):
            continue
        operator = tokens[index + 1].string
        if operator not in ("=", ":="):
            continue
        value = names[index + 2]
        if name in assigned or operator == "=" or value is None or \
                not _EARLY_READ.fullmatch(value) or tokens[index + 3].string not in (")", ","):
            aliases.pop(name, None)
            assigned.add(name)
            continue
        assigned.add(name)
        aliases[name] = (index, value)
    if not aliases:
        return lines
    edits = []
    walruses = {index: value for index, value in aliases.values()}
    skip_to = -1
    for index, token in enumerate(tokens):
        if index < skip_to:
            continue
        if index in walruses:  # `_t2 := _r0` -> `_r0`
            edits.append((token.start, tokens[index + 2].end, walruses[index]))
            skip_to = index + 3
        elif names[index] in aliases:
            edits.append((token.start, token.end, aliases[names[index]][1]))
    return _rewritten(lines, edits)


class _Writer:
    """Python source for one body, and the objects it refers to by name."""

    def __init__(self) -> None:
        self.lines: List[str] = []
        self.names: Dict[str, Any] = {"_M": MISSING, "_truthy": _truthy, "_text": _text,
                                      "_Undefined": Undefined,
                                      "_SIZED": (str, list, dict, tuple),
                                      "_overflow": _output_overflow,
                                      "_locate_statement": _locate_statement}
        self.ids: Dict[int, str] = {}
        self.temporaries = 0
        # Local variables read once at the top (those nothing in the body can rebind: see
        # hoists): name -> (value, "is a dict") names in the generated code.
        self.hoisting = False
        self.rebound: FrozenSet[str] = frozenset()  # names the body may bind again
        self.hoisted: Dict[str, tuple] = {}
        # Inside a generated loop (generate_loop), signals act on that loop directly.
        self.in_loop = False
        # In a generated loop that uses `loop`: the function's parameter is the LoopContext
        # (the body cannot rebind the name: the compiler refuses that)
        self.loop_parameter = False
        self.comments = showing_code()  # mark statements with their template lines
        self.loop_refund = ""  # steps given back per item left when the loop breaks
        # In a loop whose items nothing in the body can change (see generate_loop's
        # ``stable_items``): reads of a hoisted dict's constant keys, as placeholders until
        # the body is written (see dict_read and resolve_reads).
        self.caching_reads = False
        # ...and when that holds only if the functions the body calls are pure: the
        # generated code's test of it (a local set as the loop starts), else ""
        self.stable_test = ""
        self.reads: List[Tuple[str, str, str, str]] = []  # (obj, is_dict, key, fallback) code
        # (obj, key) code of keys the body tests for (`'tool_calls' in message`, `message.name
        # is defined`): most items lack them, so they are read where used, never early
        self.optional_keys: set = set()
        # In a generated loop whose body binds nothing: names of enclosing scopes, probed
        # once before the loop (see _expr's "name") -> their variable in the generated code
        self.invariant: Dict[str, str] = {}
        # In a generated loop whose body binds names: those names (None: not known)
        self.binds: Optional[FrozenSet[str]] = None
        # While a print or set statement is written: the code of each charge its expressions
        # leave pending in the local ``_pending`` and of the same charge made at once (see
        # charge and flush_charges); None elsewhere (each charge is then a call)
        self.deferred: Optional[List[Tuple[str, str]]] = None
        self.deferred_from = 0  # the statement's first line
        # Names a `set` of this body stored, as the code written so far leaves them: name ->
        # the local holding the value stored (reads of the name use it; see _statement).
        # One local per name (``_v0``...), whichever `set` stores it: after an `if` whose
        # every way through stored the name, it is still in that local.
        self.forwarded: Dict[str, str] = {}
        self.stored_locals: Dict[str, str] = {}
        # In a generated loop whose body assigns: a `set` stores into the iteration's
        # variables only once they are written (``_synced``, see _sync_iteration_lazily);
        # ``starts_fresh``: the iteration starts with undefined values (``fresh``)
        self.lazy_scope = False
        self.starts_fresh = False

    def unsynced_scope(self, name: Optional[str] = None) -> str:
        """What a call of a closure reading no variable of the iteration passes as its scope:
        in a loop writing those lazily (see _sync_iteration_lazily), the scope as it is
        (``_scope``: not written first) for the slow path of a lookup (``name`` None: it
        uses the scope's ``ctx`` only) and for a read of ``name``, a name the body never
        binds (the iteration's variables never hold it); else ``scope``."""
        if self.lazy_scope and (name is None or (self.binds is not None and
                                                 name not in self.binds)):
            return "_scope"
        return "scope"

    def signal(self, depth: int, signal: str) -> None:
        """Code for a body returning ``signal`` ('break', 'continue' or a variable)."""
        if not self.in_loop:
            self.line(depth, f"return {signal}")
            return
        if signal in ("'break'", "'continue'"):
            self._loop_signal(depth, signal)
            return
        self.line(depth, f"if {signal} == 'break':")
        self._loop_signal(depth + 1, "'break'")
        self._loop_signal(depth, "'continue'")

    def _loop_signal(self, depth: int, signal: str) -> None:
        if not self.loop_refund:  # each iteration is charged as it starts: nothing to give back
            self.line(depth, "break" if signal == "'break'" else "continue")
            return
        if signal == "'break'":
            self.line(depth, f"ctx.steps -= _length_hint(remaining) * {self.loop_refund}")
            self.line(depth, "break")
        else:  # the end-of-iteration check still happens, as in the closures' loop
            self.line(depth, "if ctx.output_size > max_output or ctx.steps > ctx.max_steps:")
            self.line(depth + 1, "return remaining")
            self.line(depth, "continue")

    def charge(self, charger: Any, steps: str) -> str:
        """Code charging ``steps`` (an int expression) with ``charger`` (compiler's
        _step_charger): a true value, or a limit error located at the charger's node.

        In a print or set statement (see defer_charges) the steps are added to the local
        ``_pending`` instead and checked there against what ``ctx.steps`` would be (a call
        per string built was an eighth of a simple template's time); over the limit the
        charger itself is called, which charges them and raises, as it would have."""
        at_once = f"{self.ref(charger)}(scope, {steps})"
        if self.deferred is None:
            return at_once
        deferred = (f"(ctx.steps + (_pending := _pending + ({steps})) <= ctx.max_steps or "
                    f"{self.ref(charger)}(scope, _pending))")
        self.deferred.append((deferred, at_once))
        return deferred

    def defer_charges(self) -> None:
        """A print or set statement starts: its expressions may leave steps pending."""
        self.deferred = []
        self.deferred_from = len(self.lines)

    def flush_charges(self, depth: int) -> bool:
        """The statement's expressions are written: the steps they leave pending are
        charged after them, and before any call they make that could read ``ctx.steps``
        (a closure, ``_text``), so that every check anywhere sees the same count as on
        the closures' path. True when steps may be pending until the lines it adds."""
        charges, self.deferred = self.deferred, None
        if not charges:
            return False
        statement = self.lines[self.deferred_from:]
        flushing = _flush_before_calls(statement)
        if flushing is None:  # each charge a call again
            for deferred, at_once in charges:
                statement = [line.replace(deferred, at_once) for line in statement]
            self.lines[self.deferred_from:] = statement
            return False
        self.names["_flushed"] = _flushed
        self.lines[self.deferred_from:] = flushing
        self.charge_pending(depth)
        return True

    def charge_pending(self, depth: int) -> None:
        """Lines charging the steps left pending."""
        self.line(depth, "ctx.steps += _pending")
        self.line(depth, "_pending = 0")

    def hoists(self, name: str) -> bool:
        """Whether local ``name`` is read once per iteration into a Python local: nothing
        in the body binds it again (a `set` of another name leaves it alone)."""
        return self.hoisting and name not in self.rebound

    def local(self, name: str) -> tuple:
        """Code for (the value of local ``name``, whether it is a dict), or None for the
        second when the variable is not hoisted."""
        if not self.hoists(name):
            return f"vars[{name!r}]", None
        found = self.hoisted.get(name)
        if found is None:
            index = len(self.hoisted)
            found = self.hoisted[name] = (f"_o{index}", f"_d{index}")
        return found

    def dict_read(self, obj: str, is_dict: str, key: Any, fallback: str) -> str:
        """Code for ``obj[key]`` when ``is_dict`` and the key is there, else ``fallback``.

        In a loop with stable items, a key read at least twice per iteration is read once,
        as the iteration starts (``_r`` names, see resolve_reads): with nothing in the body
        able to change the dict, each later read would give the same answer. Only str and
        int keys: reading them early cannot raise."""
        k = self.ref(key)
        direct = f"({obj}[{k}] if {is_dict} and {k} in {obj} else {fallback})"
        if not self.caching_reads or type(key) not in (str, int):
            return direct
        self.reads.append((obj, is_dict, k, fallback))
        return f"\x00{len(self.reads) - 1}\x00"

    def resolve_reads(self, end_of_iteration: List[str]) -> None:
        """Put the reads back into the lines written (placeholders of dict_read).

        Keys read more than once per iteration are read as it starts. When the items hold
        all of them (the common case), the body runs with those values as they are and the
        item known to be a dict, then ``end_of_iteration`` (lines of the loop's own that
        follow the body), then the next iteration; otherwise a second copy of the body
        runs, where each read of a missing key (or of an item that is not a dict) takes the
        sandbox path. Without such keys, one copy. The lines become the iteration's body."""
        uses: Dict[Tuple[str, str], int] = {}
        for obj, _, k, _ in self.reads:
            uses[(obj, k)] = uses.get((obj, k), 0) + 1
        early: Dict[Tuple[str, str], Tuple[str, str]] = {}  # (obj, key) -> (name, is_dict)
        for obj, is_dict, k, _ in self.reads:
            if uses[(obj, k)] > 1 and (obj, k) not in early and \
                    (obj, k) not in self.optional_keys:
                early[(obj, k)] = (f"_r{len(early)}", is_dict)
        if not self.reads:
            return
        import re

        placeholder = re.compile("\x00([0-9]+)\x00")
        depth = "    " * 2  # the lines are at the iteration's depth; each copy goes one deeper

        def resolve(all_present: bool) -> List[str]:
            def resolved(match: Any) -> str:
                obj, is_dict, k, fallback = self.reads[int(match.group(1))]
                found = early.get((obj, k))
                if found is None:
                    return f"({obj}[{k}] if {is_dict} and {k} in {obj} else {fallback})"
                name = found[0]
                if all_present:
                    return name
                if self.stable_test:  # (_M too when the callees are not pure: read it here)
                    fallback = f"({obj}[{k}] if {is_dict} and {k} in {obj} else {fallback})"
                return f"({name} if {name} is not _M else {fallback})"

            return [placeholder.sub(resolved, line) if "\x00" in line else line
                    for line in self.lines]

        # (when the items are stable only if the callees are pure, and they are not, the
        # keys read early are all "missing": each read is made where it is written)
        stable = f"{self.stable_test} and " if self.stable_test else ""
        if not early or 2 * len(self.lines) + _LOOP_HEADER_LINES + 8 > MAX_LINES:
            # no key read twice, or a body too long to write twice: one copy, each read of
            # a key read early checking that it was there
            self.lines = [f"{depth}{name} = {obj}.get({k}, _M) if {stable}{is_dict} else _M"
                          for (obj, k), (name, is_dict) in early.items()] + resolve(False)
            return
        is_dicts: List[str] = []
        for _, is_dict in early.values():
            if is_dict not in is_dicts:
                is_dicts.append(is_dict)
        # each key looked up once: an exact dict's item read with a str key fails only
        # with KeyError (a `key in obj` test before each read would look it up twice)
        # (the copy that has them all is written in the `else` of the `try`, outside its
        # handler, and goes on to the next iteration itself: no flag set and tested)
        fast = [f"{depth}if {stable}{' and '.join(is_dicts)}:", f"{depth}    try:"]
        fast += [f"{depth}        {name} = {obj}[{k}]" for (obj, k), (name, _) in early.items()]
        fast += [f"{depth}    except KeyError:", f"{depth}        pass", f"{depth}    else:"]
        fast += ["        " + line
                 for line in _known_true(_aliased(resolve(True)), is_dicts) + end_of_iteration]
        fast += [f"{depth}        continue"]
        fast += [f"{depth}{name} = {obj}.get({k}, _M) if {stable}{is_dict} else _M"
                 for (obj, k), (name, is_dict) in early.items()]
        fast += resolve(False)
        self.lines = fast

    def ref(self, obj: Any) -> str:
        """Code for ``obj`` in the generated code: a literal for a plain str or a small
        int (a constant is faster to load than a name), else a name bound to it."""
        kind = type(obj)
        if kind is str or (kind is int and -(1 << 62) < obj < (1 << 62)):
            return repr(obj)
        name = self.ids.get(id(obj))
        if name is None:
            name = self.ids[id(obj)] = f"_k{len(self.ids)}"
            self.names[name] = obj
        return name

    def temporary(self) -> str:
        self.temporaries += 1
        return f"_t{self.temporaries}"

    def line(self, depth: int, text: str) -> None:
        self.lines.append("    " * depth + text)

    def mark(self, depth: int, what: str, node: Any) -> None:
        """A comment naming the template line a statement comes from (when showing code)."""
        if self.comments and node is not None:
            self.line(depth, f"# {what}, line {getattr(node, 'lineno', '?')}")


# -- expressions ----------------------------------------------------------------------------
def _expr(w: _Writer, closure: Any) -> str:
    """A Python expression with the value of ``closure(scope)``: its spec's emitter (see
    :data:`_EXPRESSIONS`), or a call of the closure."""
    spec = spec_of(closure)
    emitter = _EXPRESSIONS.get(type(spec))
    if emitter is None:
        return f"{w.ref(closure)}(scope)"
    return emitter(w, closure, spec)


def _const(w: _Writer, closure: Any, spec: Const) -> str:
    value = spec.value
    return w.ref(value) if not isinstance(value, (bool, type(None))) else repr(value)


def _local(w: _Writer, closure: Any, spec: Local) -> str:
    forwarded = w.forwarded.get(spec.name)
    return forwarded if forwarded is not None else w.local(spec.name)[0]


def _name(w: _Writer, closure: Any, spec: Name) -> str:
    forwarded = w.forwarded.get(spec.name)
    if forwarded is not None:
        return forwarded
    # a name of an enclosing scope: this scope and its parent probed inline (loop bodies
    # read the template's variables there), the closure's walk beyond
    value, found = _probe_name(w, spec.name)
    return f"({value} if {found} else {w.ref(closure)}({w.unsynced_scope(spec.name)}))"


def _hoisted_local(w: _Writer, operand: Any) -> Optional[str]:
    """The variable ``operand`` reads when it is a local this body reads once, else None."""
    spec = spec_of(operand)
    if isinstance(spec, Local) and w.hoists(spec.name):
        return spec.name
    return None


def _lookup(w: _Writer, closure: Any, spec: Lookup) -> str:
    # obj = <operand>; a dict hit is the value, then (for `obj.name`) a namespace holding
    # the name, anything else the closure's slow path
    key = spec.key
    k = w.ref(key)
    variable = _hoisted_local(w, spec.operand)
    if variable is not None:
        obj, is_dict = w.local(variable)
        return w.dict_read(obj, is_dict, key, _slow_read(w, obj, spec, is_dict))
    obj = w.temporary()
    return (f"({obj}[{k}] if type({obj} := {_expr(w, spec.operand)}) is dict and {k} in {obj} "
            f"else {_slow_read(w, obj, spec, f'type({obj}) is dict')})")


def _index(w: _Writer, closure: Any, spec: Index) -> str:
    # `messages[-1]`: a list holding that index is read directly (as the closure reads
    # it, free), a dict holding that key too, charged what looking an int up may cost
    # (collisions.lookup_steps, as the closure charges); anything else is the slow path
    key = spec.key
    obj, steps = w.temporary(), w.temporary()
    within = f"len({obj}) > {key}" if key >= 0 else f"len({obj}) >= {-key}"
    return (f"({obj}[{key}] if (type({obj} := {_expr(w, spec.operand)}) is list and {within}) "
            f"or (type({obj}) is dict and (({steps} := {w.ref(lookup_steps)}({key}, {obj})) "
            f"== 0 or {w.charge(spec.charge, steps)}) and {key} in {obj}) "
            f"else {w.ref(spec.slow)}({obj}, scope))")


def _subscript(w: _Writer, closure: Any, spec: Subscript) -> str:
    # `messages[idx]`: a list's int index within it, or a dict's str key it holds, read
    # directly (as the closure reads them, free); anything else is the closure's path
    obj, k, obj_type, key_type = (w.temporary() for _ in range(4))
    return (f"({obj}[{k}] if (((({obj_type} := type({obj} := {_expr(w, spec.operand)})) is "
            f"list) & (({key_type} := type({k} := {_expr(w, spec.key)})) is int)) and "
            f"-len({obj}) <= {k} < len({obj})) or ({obj_type} is dict and {key_type} is str "
            f"and {k} in {obj}) else {w.ref(spec.item_of)}({obj}, {k}, scope))")


def _loaded_variable(loader: Any) -> str:
    """The name a closure with a :class:`Local` spec reads."""
    spec = spec_of(loader)
    assert isinstance(spec, Local)
    return spec.name


def _direct_attribute(w: _Writer, closure: Any, spec: DirectAttribute) -> str:
    # `loop.index0`: the sandbox's direct answer for that exact type (DIRECT_ATTRIBUTES)
    name = spec.name
    variable = _loaded_variable(spec.loader)
    if w.loop_parameter and variable == "loop":
        return f"loop.{name}"
    if w.hoists(variable):
        obj, _ = w.local(variable)
        read = obj
    else:
        obj = w.temporary()
        read = f"({obj} := {w.local(variable)[0]})"
    return (f"({obj}.{name} if type({read}) is {w.ref(spec.direct_type)} else "
            f"{w.ref(spec.other)}({obj}, scope))")


def _int_binary(w: _Writer, closure: Any, spec: Union[IntOp, IntCompare]) -> str:
    return _int_operation(w, spec)


def _call(w: _Writer, closure: Any, spec: Call) -> str:
    # callee, then the arguments left to right, then the sandbox's call (closure's own)
    arguments = spec.arguments
    args = ", ".join(_expr(w, argument) for argument in arguments.positional)
    kwargs = ", ".join(f"{name!r}: {_expr(w, value)}" for name, value in arguments.keywords)
    return f"{w.ref(spec.invoke)}({_expr(w, spec.callee)}, [{args}], {{{kwargs}}})"


def _constant_str(closure: Any) -> Optional[str]:
    """The str constant ``closure`` gives, or None."""
    spec = spec_of(closure)
    if isinstance(spec, Const) and type(spec.value) is str:
        return spec.value
    return None


def _dict_get(w: _Writer, closure: Any, spec: DictGet) -> str:
    # `owner.get(key[, default])`: the operands in order, then an exact dict's get() with
    # a str key, charged the result's size as the closure does (dict_get, which takes
    # everything else)
    obj, result, cost = (w.temporary() for _ in range(3))
    operands = [f"({obj} := {_expr(w, spec.owner)})"]
    constant_key = _constant_str(spec.key)
    if constant_key is not None:
        k, is_str = repr(constant_key), ""  # the usual `.get('content')`
    else:
        k = w.temporary()
        operands.append(f"({k} := {_expr(w, spec.key)})")
        is_str = f"type({k}) is str and "
    default_value = "None"
    if spec.default is not None:
        default_value = w.temporary()
        operands.append(f"({default_value} := {_expr(w, spec.default)})")
    return (f"({result} if ({', '.join(operands)},) and type({obj}) is dict and "
            f"{is_str}(({result} := {obj}.get({k}, {default_value})) is None "
            f"or (type({result}) is str and (({cost} := len({result}) >> {CHARS_SHIFT}) == 0 "
            f"or {w.charge(spec.charge, cost)}))) "
            f"else {w.ref(spec.dict_get)}(scope, {obj}, {k}, {default_value}))")


def _str_method(w: _Writer, closure: Any, spec: StrMethod) -> str:
    # an exact str's own method with constant str arguments: the owner's size times the
    # method's weight, plus a new result's size, charged together (method_call's
    # call_on charges the same); any other owner goes to call_on
    obj, result, cost = (w.temporary() for _ in range(3))
    evaluated = [f"type({obj} := {_expr(w, spec.owner)}) is str"]
    arguments = []
    for argument in spec.arguments:
        if _known_type(w, argument) is str:  # a constant
            arguments.append(repr(_constant_str(argument)))
            continue
        value = w.temporary()  # evaluated after the owner whatever its type, as call_on
        evaluated[0] = f"({evaluated[0]}) & (type({value} := {_expr(w, argument)}) is str)"
        arguments.append(value)
    listed = ", ".join(arguments)
    fallback_arguments = "".join(f", {argument}" for argument in arguments)
    weight = spec.weight
    owner_cost = f"(len({obj}) >> {CHARS_SHIFT}) * {int(weight)} + " if weight else ""
    return (f"({result} if {' and '.join(evaluated)} and "
            f"(({cost} := {owner_cost}(0 if ({result} := {obj}.{spec.name}({listed})) is {obj} "
            f"else len({result}) >> {CHARS_SHIFT} if type({result}) is str else 0)) == 0 "
            f"or {w.charge(spec.charge, cost)}) else "
            f"{w.ref(spec.on_other)}(scope, {obj}{fallback_arguments}))")


def _cond(w: _Writer, closure: Any, spec: Cond) -> str:
    # `a if test else b`: the test as an `if` tests it, then one side
    return (f"({_expr(w, spec.chosen)} if {_condition(w, spec.test, spec.test_node)} "
            f"else {_expr(w, spec.other)})")


def _concat_expression(w: _Writer, closure: Any, spec: Concat) -> str:
    return _concat(w, spec)


def _add_expression(w: _Writer, closure: Any, spec: Add) -> str:
    return _add_chain(w, closure, spec)


def _test(w: _Writer, closure: Any, spec: Test) -> str:
    operand, function, negated = spec.operand, spec.function, spec.negated
    if function not in TYPE_TESTS:
        return f"{w.ref(closure)}(scope)"
    operand_spec = spec_of(operand)
    asks_defined = function is is_defined or function is is_undefined
    if asks_defined and isinstance(operand_spec, Name):
        # `tools is defined`: a name missing everywhere is not defined, without making
        # the Undefined that reading it gives (templates ask this of optional variables)
        value, found = _probe_name(w, operand_spec.name)
        rest = w.temporary()
        defined = (f"(not isinstance({value}, _Undefined) if {found} else "
                   f"(not isinstance({rest}, _Undefined) if ({rest} := "
                   f"{w.ref(operand_spec.beyond)}({w.unsynced_scope(operand_spec.name)})) "
                   f"is not _M else False))")
        return defined if (function is is_defined) != negated else f"(not {defined})"
    if asks_defined and isinstance(operand_spec, Lookup):
        _optional_key(w, operand_spec)
        key_defined = _key_defined(w, operand_spec)
        if key_defined is not None:
            return key_defined if (function is is_defined) != negated else \
                f"(not {key_defined})"
    written = _INLINE_TESTS.get(function)
    if written is None:
        call = f"{w.ref(function)}({_expr(w, operand)})"
        return f"(not {call})" if negated else call
    value = w.temporary()  # the test written out: the value named where first read
    return "(" + written.format(f"({value} := {_expr(w, operand)})", value,
                                "not " if negated else "") + ")"


def _filter(w: _Writer, closure: Any, spec: Filter) -> str:
    apply, inline = spec.apply, spec.inline
    # (a filter given no arguments uses the scope for its ctx only: in a loop writing
    # its variables lazily, they need not be written for it)
    scope = w.unsynced_scope() if getattr(apply, "reads_no_variables", False) else "scope"
    if inline is None:
        return f"{w.ref(apply)}({scope}, {_expr(w, spec.operand)})"
    value = w.temporary()
    slow = f"{w.ref(apply)}({scope}, {value})"
    if inline[0] == "len":  # `length` of an exact str, list, tuple or dict: free
        return (f"(len({value}) if type({value} := {_expr(w, spec.operand)}) in _SIZED "
                f"else {slow})")
    if inline[0] == "same":  # `string` of a str: the str itself, free
        return f"({value} if type({value} := {_expr(w, spec.operand)}) is str else {slow})"
    # a str method: the str read and, when new, the result built, charged together;
    # none's text is 'None' (`message.content | trim` of a message making tool calls):
    # the method's result on it, a constant too short to charge
    _, method, charge = inline
    result, steps = w.temporary(), w.temporary()
    of_none = getattr(str(None), method)()
    return (f"({result} if type({value} := {_expr(w, spec.operand)}) is str and "
            f"(({steps} := (len({value}) >> {CHARS_SHIFT}) + (0 if ({result} := "
            f"{value}.{method}()) is {value} else len({result}) >> {CHARS_SHIFT})) == 0 or "
            f"{w.charge(charge, steps)}) else {of_none!r} if {value} is None else {slow})")


def _eq_str(w: _Writer, closure: Any, spec: EqStr) -> str:
    return f"({_expr(w, spec.operand)} {'!=' if spec.negate else '=='} {w.ref(spec.constant)})"


def _contains(w: _Writer, closure: Any, spec: Contains) -> str:
    left, right, check, members = spec.left, spec.right, spec.check, spec.members
    if isinstance(spec_of(left), Const):
        # `'tool_calls' in message`: a dict answers at once (nothing to charge); the
        # order of evaluation cannot matter with a constant on the left
        key = _expr(w, left)
        variable = _hoisted_local(w, right)
        if variable is not None:
            obj, is_dict = w.local(variable)
            w.optional_keys.add((obj, key))
        else:
            obj = w.temporary()
            is_dict = f"type({obj} := {_expr(w, right)}) is dict"
        found = f"({key} in {obj} if {is_dict} else {w.ref(check)}({key}, {obj}, scope))"
    elif members is not None:
        # `role in ('tool', 'ipython')`: a str among strs compares without user code;
        # scanning the literal is charged as check_contains charges it (anything else
        # goes there: the literal built as the closure builds it)
        value = w.temporary()
        steps = len(members) >> ITEMS_SHIFT
        charged = f" and {w.charge(spec.charge, str(steps))}" if steps else ""
        found = (f"({value} in {w.ref(members)} if type({value} := {_expr(w, left)}) is str"
                 f"{charged} else {w.ref(check)}({value}, {_expr(w, right)}, scope))")
    else:
        # `field in param`: a str key in a dict is looked up at once (nothing to charge,
        # no user code); both sides evaluated, left first, before either is tested
        key, obj = w.temporary(), w.temporary()
        found = (f"({key} in {obj} if (type({key} := {_expr(w, left)}) is str) & "
                 f"(type({obj} := {_expr(w, right)}) is dict) else "
                 f"{w.ref(check)}({key}, {obj}, scope))")
    return f"(not {found})" if spec.negate else found


def _left_truth(w: _Writer, value: str, spec: Union[And, Or]) -> str:
    """The truth of ``and``/``or``'s left operand, stored in ``value``."""
    return (f"({value} := {_expr(w, spec.left)}) is True or ({value} is not False and "
            f"{_known_falsy_excluded(value)}_truthy({value}, {w.ref(spec.node)}))")


def _and(w: _Writer, closure: Any, spec: And) -> str:
    value = w.temporary()
    truth = _left_truth(w, value, spec)  # (the left operand's code is written first)
    return f"({_expr(w, spec.right)} if {truth} else {value})"


def _or(w: _Writer, closure: Any, spec: Or) -> str:
    value = w.temporary()
    truth = _left_truth(w, value, spec)
    return f"({value} if {truth} else {_expr(w, spec.right)})"


def _not(w: _Writer, closure: Any, spec: Not) -> str:
    return f"(not {_expr(w, spec.operand)})"


def _truth(w: _Writer, closure: Any, spec: Truth) -> str:
    value = w.temporary()
    return (f"({value} if ({value} := {_expr(w, spec.operand)}) is True or {value} is False "
            f"else {_known_falsy_excluded(value)}"
            f"_truthy({value}, {w.ref(spec.node)}))")


#: The emitter of each kind of expression spec: ``emitter(writer, closure, spec)`` gives
#: Python code with the value of ``closure(scope)``.
_EXPRESSIONS: Dict[type, Callable[[_Writer, Any, Any], str]] = {
    Const: _const, Local: _local, Name: _name, Lookup: _lookup, Index: _index,
    Subscript: _subscript, DirectAttribute: _direct_attribute, IntOp: _int_binary,
    IntCompare: _int_binary, Add: _add_expression, Call: _call, DictGet: _dict_get,
    StrMethod: _str_method, Cond: _cond, Concat: _concat_expression, Test: _test,
    Filter: _filter, EqStr: _eq_str, Contains: _contains, And: _and, Or: _or, Not: _not,
    Truth: _truth,
}


#: Sums with more operands than this that are not constants stay a closure call (each one
#: nests a conditional expression).
MAX_SUM_OPERANDS = 12


def _key_defined(w: _Writer, lookup: Lookup) -> Optional[str]:
    """``message.reasoning_content is defined`` (or ``message['name']``) as a bool: a dict
    answers by holding the key, one without it charged what the sandbox's path charges for
    the Undefined it would make (which nothing else sees: as for a missing name, it is not
    made); anything else reads the value as the lookup does. None for a key the sandbox
    may answer otherwise for a dict (a method's name, a private one)."""
    operand, key = lookup.operand, lookup.key
    if type(key) is not str or not dict_item_only(key):
        return None
    k = w.ref(key)
    w.names["_missing_key"] = _missing_key
    variable = _hoisted_local(w, operand)
    if variable is not None:
        obj, is_dict = w.local(variable)
    else:
        obj = w.temporary()
        is_dict = f"type({obj} := {_expr(w, operand)}) is dict"
    return (f"((not isinstance({obj}[{k}], _Undefined) if {k} in {obj} else _missing_key(ctx))"
            f" if {is_dict} else not isinstance({_slow_read(w, obj, lookup)}, _Undefined))")


def _missing_key(ctx: Any) -> bool:
    """A dict lacks the key a test asks about: the lookup's sandbox path charged, False."""
    ctx.steps += SLOW_LOOKUP_STEPS
    return False


def _optional_key(w: _Writer, lookup: Lookup) -> None:
    """``message.name is defined``: the key (of a hoisted item) is one items may lack."""
    variable = _hoisted_local(w, lookup.operand)
    if variable is not None:
        w.optional_keys.add((w.local(variable)[0], w.ref(lookup.key)))


def _slow_read(w: _Writer, obj: str, lookup: Lookup, is_dict: Optional[str] = None) -> str:
    """What ``lookup`` does when ``obj`` is not a dict holding its key: with ``is_dict`` (the
    code telling whether it is a dict), a dict lacking it gives the sandbox's Undefined
    (unless the key is a method's name or private: the sandbox may find an attribute), an
    attribute of one of the engine's namespaces (``reads_namespaces``) is read as
    compiler._slow_getattr reads it, anything else takes the lookup's ``slow``."""
    key = lookup.key
    k = w.ref(key)
    fallback = f"{w.ref(lookup.slow)}({obj}, {w.unsynced_scope()})"
    if lookup.reads_namespaces:
        w.names["_NAMESPACE_TYPES"] = NAMESPACE_TYPES
        value = w.temporary()
        fallback = (f"({value} if type({obj}) in _NAMESPACE_TYPES and "
                    f"({value} := {obj}._attrs.get({k}, _M)) is not _M else {fallback})")
    if is_dict is not None and dict_item_only(key):
        # `message.tool_calls` of a message without them: most messages lack some key
        w.names["_undefined_item"] = undefined_item
        fallback = f"(_undefined_item(ctx, {obj}, {k}) if {is_dict} else {fallback})"
    return fallback


def _add_chain(w: _Writer, closure: Any, spec: Add) -> str:
    """``a + b + c``: each operand is evaluated in turn and, while all are str, the sum is
    Python's own concatenation; the first operand that is not a str hands the values so far
    to the closure's ``add_evaluated`` (Python's `+` link by link, with its limits). The
    strings built are charged as ``add_slowly`` charges them: every intermediate sum's
    length, ``len(a + b) + len(a + b + c) + ...``."""
    operands, add_evaluated, charge_built = spec.operands, spec.add_evaluated, spec.charge_built
    count = len(operands)
    if count == 2:  # `ns.count + 1` too: two ints or two strs
        return _add_two(w, operands, add_evaluated, charge_built)
    if any(constant is not MISSING and type(constant) is not str for constant, _ in operands) \
            or sum(constant is MISSING for constant, _ in operands) > MAX_SUM_OPERANDS:
        return f"{w.ref(closure)}(scope)"
    values: List[str] = []
    tests: List[str] = []  # (position, condition) of each evaluated operand, in order
    fixed_built = 0
    built_terms: List[str] = []
    for position, (constant, operand) in enumerate(operands):
        weight = count - max(position, 1)  # how many intermediate sums hold this operand
        if constant is not MISSING:
            values.append(w.ref(constant))  # a str: its literal
            fixed_built += weight * len(constant)
            continue
        value = w.temporary()
        values.append(value)
        tests.append((position, f"type({value} := {_expr(w, operand)}) is str"))
        built_terms.append(f"{weight} * len({value})" if weight != 1 else f"len({value})")
    total, built = w.temporary(), w.temporary()
    joined = [(constant is not MISSING, value) for (constant, _), value in zip(operands, values)]
    w.names["_CHARGED_FROM"] = 1 << CHARS_SHIFT
    built_sum = " + ".join(([str(fixed_built)] if fixed_built else []) + built_terms) or "0"
    evaluated = f"{w.ref(add_evaluated)}(({', '.join(values)},), scope)"
    # measured, checked and charged before the string is built, as add_slowly does
    fixed_length = sum(len(constant) for constant, _ in operands if constant is not MISSING)
    lengths = _sum_code(fixed_length, [f"len({values[position]})" for position, _ in tests])
    if fixed_built >= 1 << CHARS_SHIFT:  # always charged: no test of the size
        charged = w.charge(charge_built, f"({built_sum}) >> {CHARS_SHIFT}")
    else:
        charged = (f"(({built} := {built_sum}) < _CHARGED_FROM or "
                   f"{w.charge(charge_built, f'{built} >> {CHARS_SHIFT}')})")
    code = (f"({total} if {lengths} < 1000000 and {charged} and "
            f"(({total} := {_joined_strs(joined)}),) else {evaluated})")
    for position, test in reversed(tests):
        so_far = f"{w.ref(add_evaluated)}(({', '.join(values[:position + 1])},), scope)"
        code = f"({code} if {test} else {so_far})"
    return code


def _joined_strs(parts: List[Tuple[bool, str]]) -> str:
    """Code joining exact strs, given as (a literal, code) in order: adjacent string literals
    and f-string fields, which Python builds as one string (BUILD_STRING), where a chain of
    ``+`` builds and frees every intermediate sum. An exact str is its own format."""
    return " ".join(code if literal else f"f'{{{code}}}'" for literal, code in parts)


def _concat_parts(w: _Writer, parts: list, text_of: Any) -> List[Tuple[bool, str]]:
    """The parts of ``a ~ b ~ c`` in order: (True, the text) for a str constant, else (False,
    code making the part text: ``text_of`` for anything but a str)."""
    made: List[Tuple[bool, str]] = []
    for part in parts:
        if _known_type(w, part) is str:  # a constant: its length is known too
            made.append((True, _constant_str(part)))
            continue
        value = w.temporary()
        made.append((False, f"({value} if type({value} := {_expr(w, part)}) is str else "
                            f"{w.ref(text_of)}({value}))"))
    return made


def _join_charged(w: _Writer, total: str, charge: Any, charge_joined: Any) -> str:
    """Code charging the join of ``total`` characters (from _CHARGED_FROM) as the closure
    does: under the size limit only the steps (what charge_joined charges), else
    charge_joined, which checks the size too (and raises). A true value."""
    w.names["_CHARGED_FROM"] = 1 << CHARS_SHIFT
    return (f"({total} <= 1000000 and {w.charge(charge, f'{total} >> {CHARS_SHIFT}')}) or "
            f"{w.ref(charge_joined)}(scope, {total})")


def _concat(w: _Writer, spec: Concat) -> str:
    """``a ~ b ~ c``: each part evaluated and made text in turn, the total length charged (and
    size-checked) before the string is built, as the closure does."""
    parts, text_of, charge_joined, charge = (spec.parts, spec.text_of, spec.charge_joined,
                                             spec.charge)
    pieces: List[Tuple[bool, str]] = []  # (a literal, code)
    constant_length = 0
    lengths = []
    for is_text, code in _concat_parts(w, parts, text_of):
        if is_text:
            constant_length += len(code)
            pieces.append((True, repr(code)))
            continue
        piece = w.temporary()
        lengths.append(f"len({piece} := {code})")
        pieces.append((False, piece))
    total = w.temporary()
    return (f"({_joined_strs(pieces)} if ({total} := {_sum_code(constant_length, lengths)}) "
            f"< _CHARGED_FROM or {_join_charged(w, total, charge, charge_joined)} else '')")


def _concat_pieces(w: _Writer, spec: Concat, depth: int
                   ) -> Tuple[str, List[Tuple[bool, str]]]:
    """``{{ a ~ b ~ c }}``: the parts made text and charged as _concat does, as lines, then
    put in the output as they are (the print's pieces), never joined into a string first
    (a copy of each message's text). Returns (the name of their total length, the pieces)."""
    parts, text_of, charge_joined, charge = (spec.parts, spec.text_of, spec.charge_joined,
                                             spec.charge)
    pieces: List[Tuple[bool, str]] = []
    constant_length = 0
    lengths = []
    for is_text, code in _concat_parts(w, parts, text_of):
        if is_text:
            constant_length += len(code)
            pieces.append((True, code))
            continue
        piece = w.temporary()
        w.line(depth, f"{piece} = {code}")
        lengths.append(f"len({piece})")
        pieces.append((False, piece))
    total = w.temporary()
    w.line(depth, f"{total} = {_sum_code(constant_length, lengths)}")
    if constant_length >= 1 << CHARS_SHIFT:  # always charged
        w.line(depth, _join_charged(w, total, charge, charge_joined))
    else:
        w.line(depth, f"if {total} >= _CHARGED_FROM:")
        w.line(depth + 1, _join_charged(w, total, charge, charge_joined))
    return total, pieces


def _add_two(w: _Writer, operands: list, add_evaluated: Any, charge_built: Any) -> str:
    """``a + b`` (both operands are always evaluated, left first): two ints or two strs
    inline, anything else (and results past the limits) through ``add_evaluated``."""
    a, b, result, size = w.temporary(), w.temporary(), w.temporary(), w.temporary()
    (_, left), (_, right) = operands
    left_code, right_code = _expr(w, left), _expr(w, right)  # (a constant's code: its value)
    w.names["_BIG"] = 1 << 1000
    w.names["_CHARGED_FROM"] = 1 << CHARS_SHIFT
    return (f"({result} if (type({a} := {left_code}) is int) & "
            f"(type({b} := {right_code}) is int) and -_BIG < ({result} := {a} + {b}) < _BIG "
            f"else {result} if type({a}) is str and type({b}) is str and "
            f"(({size} := len({a}) + len({b})) < 1000000) and ({size} < _CHARGED_FROM or "
            f"{w.charge(charge_built, f'{size} >> {CHARS_SHIFT}')}) and "
            f"(({result} := {a} + {b}),) "
            f"else {w.ref(add_evaluated)}(({a}, {b}), scope))")


#: The template's operators written inline: Python's own, with the same result for two ints.
_INLINE_OPERATORS = frozenset({"-", "%", "//", "==", "!=", "<", "<=", ">", ">="})


_ORDERABLE = frozenset({int, float, bool})
_EQUATABLE = frozenset({int, float, bool, type(None)})


def _probe_name(w: _Writer, name: str) -> Tuple[str, str]:
    """(value, found): how generated code reads ``name`` from this scope and its parent, the
    value once ``found`` (a condition) holds; a miss goes on to the rest of the chain."""
    forwarded = w.forwarded.get(name)
    if forwarded is not None:
        return forwarded, "True"
    if (w.in_loop and w.hoisting and not w.rebound) or \
            (w.binds is not None and name not in w.binds):
        # a loop body that binds nothing, or a body that does not bind this name: what the
        # two scopes hold for the name cannot change while it runs (nothing else runs in
        # them meanwhile), so they are probed once, before it; a miss still walks on at
        # each use
        found = w.invariant.get(name)
        if found is None:
            found = w.invariant[name] = f"_n{len(w.invariant)}"
        return found, f"{found} is not _M"
    value, key = w.temporary(), w.ref(name)
    return value, (f"({value} := vars.get({key}, _M)) is not _M or "
                   f"({value} := parent_vars.get({key}, _M)) is not _M")


#: Type tests written out (tests.py's functions, the same expressions): {0} evaluates the
#: operand and names it {1}; {2} is "not " for `is not`.
_INLINE_TESTS = {
    is_none: "{2}{0} is None",
    is_defined: "{2}not isinstance({0}, _Undefined)",
    is_undefined: "{2}isinstance({0}, _Undefined)",
    is_string: "{2}isinstance({0}, str)",
    is_true: "{2}{0} is True",
    is_false: "{2}{0} is False",
    is_boolean: "{2}({0} is True or {1} is False)",
}


#: The generated loop's own ``loop`` (a LoopContext): these attributes are always ints, those
#: always bools.
_LOOP_INTS = frozenset({"index", "index0", "revindex", "revindex0", "length", "depth", "depth0"})
_LOOP_BOOLS = frozenset({"first", "last"})


def _known_type(w: _Writer, closure: Any) -> Any:
    """The type of every value ``closure`` can give, when the code says it: a constant's, a
    number attribute of the generated loop's own ``loop``, a comparison of such values,
    ``in``, ``not`` and the type tests (a bool); else None."""
    spec = spec_of(closure)
    if isinstance(spec, Const):
        return type(spec.value)
    if isinstance(spec, DirectAttribute):
        name = spec.name
        if w.loop_parameter and _loaded_variable(spec.loader) == "loop":
            return int if name in _LOOP_INTS else bool if name in _LOOP_BOOLS else None
        return None
    if isinstance(spec, IntCompare):
        free = _EQUATABLE if spec.op in ("==", "!=") else _ORDERABLE
        if _known_type(w, spec.left) in free and _known_type(w, spec.right) in free:
            return bool
    if isinstance(spec, (Contains, Not)):  # Python's `in` and `not` give a bool
        return bool
    if isinstance(spec, Test) and spec.function in TYPE_TESTS:  # `is defined`...: a bool
        return bool
    if isinstance(spec, IntOp):  # two ints make an int, or an error (a zero divisor...)
        if _known_type(w, spec.left) is int and _known_type(w, spec.right) is int:
            return int
    return None


def _int_operation(w: _Writer, spec: Union[IntOp, IntCompare], truth_of: Any = None) -> str:
    """``a - b``, ``a % b``, ``a < b``...: both operands are evaluated (left first), and two
    ints are combined inline; anything else goes to the closure's own ``apply(a, b, scope)``
    (limits, pricing, errors). An arithmetic result is range-checked as arith.apply checks it
    (past 1000 bits the slow path computes it again and measures it), and a zero divisor
    always takes the slow path, which raises the located error. With ``truth_of`` (a
    comparison that is an ``if``'s condition, that node), the truth of the comparison: the
    inline one is a bool, the closure's result is tested as _condition tests a value."""
    left, right, python_op, apply = spec.left, spec.right, spec.op, spec.apply
    if python_op not in _INLINE_OPERATORS:  # pragma: no cover - the compiler attaches specs
        raise ValueError(python_op)  # for these only
    a, b = w.temporary(), w.temporary()

    def slow_path(right_value: str) -> str:
        call = f"{w.ref(apply)}({a}, {right_value}, scope)"
        return call if truth_of is None else f"_truthy({call}, {w.ref(truth_of)})"

    slow = slow_path(b)
    if isinstance(spec, IntCompare):
        # numbers, booleans (and None for equality) compare free of charge and never raise
        equality = python_op in ("==", "!=")
        free = "_EQUATABLE" if equality else "_ORDERABLE"
        w.names[free] = free_types = _EQUATABLE if equality else _ORDERABLE
        left_known = _known_type(w, left) in free_types
        right_known = _known_type(w, right) in free_types
        if left_known and right_known:  # `loop.index0 == 0`: both types are known
            return f"({_expr(w, left)} {python_op} {_expr(w, right)})"
        if right_known and isinstance(spec_of(right), Const):
            # `m.n == 0`: the constant's type is known
            b = _expr(w, right)
            return (f"({a} {python_op} {b} if type({a} := {_expr(w, left)}) in {free} "
                    f"else {slow_path(b)})")
        both_free = (f"(type({a} := {_expr(w, left)}) in {free}) & "
                     f"(type({b} := {_expr(w, right)}) in {free})")
        return f"({a} {python_op} {b} if {both_free} else {slow})"
    w.names["_BIG"] = 1 << 1000
    result = w.temporary()
    right_spec = spec_of(right)
    if isinstance(right_spec, Const) and type(right_spec.value) is int and \
            right_spec.value and abs(right_spec.value) < 1 << 62:
        # `loop.index0 % 2`, `loop.index - 1`: a small nonzero int constant on the right; the
        # remainder of an int by it is smaller than it, no range check needed
        b = _expr(w, right)
        slow = f"{w.ref(apply)}({a}, {b}, scope)"
        if _known_type(w, left) is int and python_op == "%":
            return f"({_expr(w, left)} % {b})"  # `loop.index0 % 2`
        if python_op == "%":
            return f"({a} % {b} if type({a} := {_expr(w, left)}) is int else {slow})"
        return (f"({result} if type({a} := {_expr(w, left)}) is int and "
                f"-_BIG < ({result} := {a} {python_op} {b}) < _BIG else {slow})")
    both_ints = (f"(type({a} := {_expr(w, left)}) is int) & "
                 f"(type({b} := {_expr(w, right)}) is int)")
    nonzero = f"{b} and " if python_op in ("%", "//") else ""
    return (f"({result} if {both_ints} and {nonzero}"
            f"-_BIG < ({result} := {a} {python_op} {b}) < _BIG else {slow})")


def _condition(w: _Writer, closure: Any, node: Any) -> str:
    """A Python condition: the truth of ``closure(scope)`` as an ``if`` tests it, with
    errors of ``bool()`` located at ``node``.

    Only the truth matters here, so ``and``/``or``/``not`` become Python's own operators on
    the truth of their operands: the same operands are evaluated in the same order, and each
    ``bool()`` happens where the closures would call it (``or``'s left operand at the ``or``,
    the value it returns where the ``if`` tests it).
    """
    spec = spec_of(closure)
    if isinstance(spec, (And, Or)):
        keyword = "or" if isinstance(spec, Or) else "and"
        return (f"({_condition(w, spec.left, spec.node)} {keyword} "
                f"{_condition(w, spec.right, node)})")
    if isinstance(spec, Not):
        return f"(not {_condition(w, spec.operand, node)})"
    if isinstance(spec, Truth):
        return _condition(w, spec.operand, spec.node)
    if isinstance(spec, EqStr) or _known_type(w, closure) is bool:
        # `==` gives a bool for anything a template can hold (and `loop.first`, a comparison
        # of known numbers is one): Python's `if` tests it as is
        return _expr(w, closure)
    if isinstance(spec, IntCompare):
        # numbers compared inline give a bool; only what the closure's path gives is tested
        # (`(m.role == 'user') != (loop.index0 % 2 == 0)`: 41 of the corpus's templates)
        return _int_operation(w, spec, truth_of=node)
    value = w.temporary()
    # a str first (message contents, roles), then booleans, then bool() located at the node
    return (f"(({value} != '') if type({value} := {_expr(w, closure)}) is str else "
            f"({value} is True or ({value} is not False and {_known_falsy_excluded(value)}"
            f"_truthy({value}, {w.ref(node)}))))")


def _known_falsy_excluded(value: str) -> str:
    """The start of a condition that is False, without a call, for None and the plain
    Undefined (a missing key: ``message.tool_calls``), both always false; ``bool()`` of
    anything else follows it (Undefined subclasses may raise there: StrictUndefined)."""
    return f"{value} is not None and type({value}) is not _Undefined and "


# -- statements -----------------------------------------------------------------------------
def _statement(w: _Writer, closure: Any, depth: int) -> None:
    """Lines doing what ``closure(scope, out)`` does: its spec's emitter (see
    :data:`_STATEMENTS`), or a call of the closure passing on its signal."""
    spec = spec_of(closure)
    # Python allows 20 nested blocks; deeper statements stay calls
    emitter = _STATEMENTS.get(type(spec)) if depth < MAX_DEPTH else None
    if emitter is not None:
        emitter(w, closure, spec, depth)
        return
    signal = w.temporary()
    w.line(depth, f"{signal} = {w.ref(closure)}(scope, out)")
    w.forwarded.clear()  # (the statement may bind names: an import, a set of two names)
    w.line(depth, f"if {signal} is not None:")
    w.signal(depth + 1, signal)


def _body_statement(w: _Writer, closure: Any, spec: Body, depth: int) -> None:
    for statement in spec.statements:
        _statement(w, statement, depth)


def _text_statement(w: _Writer, closure: Any, spec: Text, depth: int) -> None:
    _text_output(w, depth, spec.text)


def _break_statement(w: _Writer, closure: Any, spec: Break, depth: int) -> None:
    w.signal(depth, "'break'")


def _continue_statement(w: _Writer, closure: Any, spec: Continue, depth: int) -> None:
    w.signal(depth, "'continue'")


def _print_statement(w: _Writer, closure: Any, spec: Print, depth: int) -> None:
    node = spec.node
    w.mark(depth, "output", node)
    w.defer_charges()
    w.line(depth, "try:")
    pieces = []
    static = 0
    sizes = []
    for is_text, item in spec.items:
        if is_text:
            pieces.append((True, item))
            static += len(item)
            continue
        expression, expression_node = item
        concat = spec_of(expression)
        if isinstance(concat, Concat):
            total, parts = _concat_pieces(w, concat, depth + 1)
            pieces += parts
            sizes.append(total)
            continue
        value = w.temporary()
        w.line(depth + 1, f"{value} = {_expr(w, expression)}")
        w.line(depth + 1, f"if type({value}) is not str:")
        # (an undefined value prints as nothing: a key a message lacks, printed)
        w.line(depth + 2, f"{value} = str({value}) if type({value}) is int else '' if "
                          f"type({value}) is _Undefined else "
                          f"_text({value}, {w.ref(expression_node)})")
        pieces.append((False, value))
        sizes.append(f"len({value})")
    # counted before the pieces are joined: the limit refuses what would not fit first
    size = w.temporary()
    w.line(depth + 1, f"{size} = {_sum_code(static, sizes)}")
    w.line(depth + 1, f"ctx.output_size += {size}")
    w.line(depth, "except Exception as exc:")
    w.line(depth + 1, f"raise _locate_statement(exc, {w.ref(node)})")
    w.line(depth, "if ctx.output_size > max_output:")
    w.line(depth + 1, f"_overflow(ctx, {w.ref(node)})")
    _emit(w, depth, pieces)
    w.flush_charges(depth)


def _sum_print_statement(w: _Writer, closure: Any, spec: SumPrint, depth: int) -> None:
    w.defer_charges()
    _sum_print(w, spec, depth)
    w.flush_charges(depth)


def _print_parts_statement(w: _Writer, closure: Any, spec: PrintParts, depth: int) -> None:
    _print_parts(w, spec, depth)


def _set_statement(w: _Writer, closure: Any, spec: Set, depth: int) -> None:
    name = spec.name
    w.mark(depth, f"set {name}", spec.node)
    w.defer_charges()
    w.line(depth, "try:")
    expression = _expr(w, spec.value)  # (before the name is forwarded: `set x = x + 1`)
    stored = w.stored_locals.setdefault(name, f"_v{len(w.stored_locals)}")
    if w.lazy_scope:
        w.line(depth + 1, f"{stored} = {expression}")
    else:
        w.line(depth + 1, f"vars[{name!r}] = {stored} = {expression}")
    w.line(depth, "except Exception as exc:")
    w.line(depth + 1, f"raise _locate_statement(exc, {w.ref(spec.node)})")
    if w.lazy_scope:
        w.line(depth, "if _synced:")
        w.line(depth + 1, f"_iteration_vars[{name!r}] = {stored}")
    w.flush_charges(depth)
    # until something may bind the name again, it holds what was stored: read from the
    # local (only statements of this body bind names of its scope; what its expressions
    # call runs in scopes of its own)
    w.forwarded[name] = stored


def _define_statement(w: _Writer, closure: Any, spec: Define, depth: int) -> None:
    # a macro: made for this scope (cannot fail)
    name = spec.name
    w.mark(depth, f"macro {name}", spec.node)
    signature, invoke = spec.signature, spec.invoke  # what the closure's make(scope) does
    w.names["_Macro"], w.names["_partial"] = Macro, partial
    w.line(depth, f"vars[{name!r}] = _Macro({w.ref(signature)}, _partial({w.ref(invoke)}, "
                  "scope))")
    w.forwarded.pop(name, None)


def _set_namespace_statement(w: _Writer, closure: Any, spec: SetNamespace, depth: int) -> None:
    # `set ns.flag = value`: the value, then the name's namespace; one of the engine's
    # with a value that is no tuple takes the attribute (the lookup charged as the
    # closure charges it); anything else goes to the closure's own assign_nsref
    ns_name, attr = spec.name, spec.attr
    w.names["_NAMESPACE_TYPES"] = NAMESPACE_TYPES
    assigned, namespace = w.temporary(), w.temporary()
    name = repr(ns_name)
    w.mark(depth, f"set {ns_name}.{attr}", spec.node)
    w.defer_charges()
    w.line(depth, "try:")
    w.line(depth + 1, f"{assigned} = {_expr(w, spec.value)}")
    w.flush_charges(depth + 1)  # before the lookup of the namespace charges its steps
    # (read as a name is: a local when a `set` of this body stored it, once per body when
    # nothing in it binds the name)
    found_value, found = _probe_name(w, ns_name)
    w.line(depth + 1, f"if type({namespace} := ({found_value} if {found} else "
                      f"{w.ref(spec.lookup)}({w.unsynced_scope(ns_name)}, {name}))) in "
                      "_NAMESPACE_TYPES and "
                      f"not isinstance({assigned}, tuple):")
    w.line(depth + 2, f"ctx.steps += {SLOW_LOOKUP_STEPS}")
    w.line(depth + 2, f"{namespace}._attrs[{attr!r}] = {assigned}")
    w.line(depth + 1, "else:")
    w.line(depth + 2, f"{w.ref(spec.assign)}(scope, {assigned})")
    w.line(depth, "except Exception as exc:")
    w.line(depth + 1, f"raise _locate_statement(exc, {w.ref(spec.node)})")


def _if_statement(w: _Writer, closure: Any, spec: If, depth: int) -> None:
    w.mark(depth, "if", spec.node)
    w.line(depth, "try:")
    # the conditions' charges are left pending as a print statement's are (a call per
    # `role in ('tool', 'ipython')` otherwise); whichever branch runs, or none, charges
    # what the conditions evaluated so far left pending before anything else
    pending = False
    # every condition and branch starts from the names stored before the `if`; after
    # it, a name is forwarded when every way through left it so (in its one local)
    before = dict(w.forwarded)
    ends = []
    for index, (test, body, test_node) in enumerate(spec.branches):
        keyword = "if" if index == 0 else "elif"
        w.forwarded = dict(before)
        w.defer_charges()
        w.line(depth + 1, f"{keyword} {_condition(w, test, test_node)}:")
        w.line(depth + 2, "pass")
        if w.flush_charges(depth + 2):
            pending = True
        elif pending:
            w.charge_pending(depth + 2)
        _statement(w, body, depth + 2)
        ends.append(w.forwarded)
    w.forwarded = dict(before)
    else_ = spec.else_
    if else_ is not None or pending:
        w.line(depth + 1, "else:")
        w.line(depth + 2, "pass")
        if pending:
            w.charge_pending(depth + 2)
        if else_ is not None:
            _statement(w, else_, depth + 2)
    ends.append(w.forwarded)
    w.forwarded = {name: stored for name, stored in ends[0].items()
                   if all(end.get(name) == stored for end in ends)}
    w.line(depth, "except Exception as exc:")
    w.line(depth + 1, f"raise _locate_statement(exc, {w.ref(spec.node)})")


#: The emitter of each kind of statement spec: ``emitter(writer, closure, spec, depth)``
#: writes lines at ``depth`` doing what ``closure(scope, out)`` does.
_STATEMENTS: Dict[type, Callable[[_Writer, Any, Any, int], None]] = {
    Body: _body_statement, Text: _text_statement, Break: _break_statement,
    Continue: _continue_statement, Print: _print_statement, SumPrint: _sum_print_statement,
    PrintParts: _print_parts_statement, Set: _set_statement, Define: _define_statement,
    SetNamespace: _set_namespace_statement, If: _if_statement,
}


#: Pieces of one output put in the output by an ``out.append`` each, at most: Python 3.11+
#: runs ``out.append(x)`` as a direct list append, faster than building a tuple and adding
#: it to the list up to about five pieces (3 pieces: 42 against 69 ns); Python 3.10 calls the
#: method, and a tuple is faster from two pieces on.
_APPENDED_PIECES = 5 if sys.version_info >= (3, 11) else 1


def _emit(w: _Writer, depth: int, pieces: List[Tuple[bool, str]]) -> None:
    """Put ``pieces``, each (True, text) or (False, the name of a str value), in the output:
    an ``out.append`` each (see :data:`_APPENDED_PIECES`), or a tuple added to the list
    (``out += (...)``: the list's extend without a method call). Unlike joining them first,
    no copy of long messages: output costs no more memory than the closures'."""
    if len(pieces) <= _APPENDED_PIECES:
        for is_text, piece in pieces:
            w.line(depth, f"out.append({repr(piece) if is_text else piece})")
    else:
        w.line(depth, f"out += {_pieces_tuple(pieces)}")


def _pieces_tuple(pieces: List[Tuple[bool, str]]) -> str:
    """A tuple display of ``pieces`` (see _emit)."""
    return "(" + "".join((repr(piece) if is_text else piece) + ", "
                         for is_text, piece in pieces) + ")"


def _sum_print(w: _Writer, spec: SumPrint, depth: int, before: str = "", after: str = ""
               ) -> None:
    """``{{ a + b + ... }}``: while the operands are str (evaluated strictly left to right),
    they go to the output together; the first operand that is not a str hands over to the
    closure's own ``finish`` (Python's `+`), after the str pieces before it are put in the
    output as the closure puts them (``finish`` folds them back into the sum).

    Written as ``if``/``elif`` on each operand in turn (evaluated in its condition), the
    output of the sum in the final ``else``. ``before`` and ``after`` are text printed by
    the same statement around the sum (``text {{ a + b }} text``): in the same ``extend``,
    never folded into the sum."""
    parts, finish, too_big = spec.parts, spec.finish, spec.too_big
    size = w.temporary()
    static = 0
    sizes = []
    around = len(before) + len(after)
    prefix: List[Tuple[bool, str]] = [(True, before)] if before else []
    pieces: List[Tuple[bool, str]] = []
    keyword = "if"
    for text, variable, key, operand, position in parts:
        if text is not None:
            pieces.append((True, text))
            static += len(text)
            continue
        value = w.temporary()
        if variable is not None:
            k = w.ref(key)
            obj, is_dict = w.local(variable)
            if is_dict is None:
                obj = w.temporary()
                is_dict = f"type({obj} := vars[{variable!r}]) is dict"
                read = f"({obj}[{k}] if {is_dict} and {k} in {obj} else {w.ref(operand)}(scope))"
            else:
                read = w.dict_read(obj, is_dict, key, w.ref(operand) + "(scope)")
        else:
            read = _expr(w, operand)
        w.line(depth, f"{keyword} type({value} := {read}) is not str:")
        keyword = "elif"
        if prefix or pieces:
            w.line(depth + 1, f"out += {_pieces_tuple(prefix + pieces)}")
        w.line(depth + 1, f"{w.ref(finish)}(scope, out, len(out) - {len(pieces)}, {position}, "
                          f"{value})")
        if after:
            w.line(depth + 1, f"out.append({after!r})")
        if around:
            w.line(depth + 1, f"ctx.output_size += {around}")
        pieces.append((False, value))
        sizes.append(f"len({value})")
    inner = depth
    if keyword == "elif":
        w.line(depth, "else:")
        inner = depth + 1
    w.line(inner, f"{size} = {_sum_code(static, sizes)}")
    w.line(inner, f"ctx.output_size += {size}" + (f" + {around}" if around else ""))
    w.line(inner, f"if {size} > 1000000:")
    if after:  # the sum is checked before the text after it is counted, as by the closures
        w.line(inner + 1, f"ctx.output_size -= {len(after)}")
    w.line(inner + 1, f"{w.ref(too_big)}(ctx, {size})")
    if after:
        w.line(inner + 1, f"ctx.output_size += {len(after)}")
    _emit(w, inner, prefix + pieces + ([(True, after)] if after else []))


def _print_parts(w: _Writer, spec: PrintParts, depth: int) -> None:
    """``text {{ a + b }} text {{ c }}``, compiled as its parts (Compiler.output_in_parts):
    a sum with the text around it in one ``extend``, the other parts as they are, then
    the output limit checked at the statement."""
    parts, node = spec.parts, spec.node
    before = ""
    index = 0
    while index < len(parts):
        part = parts[index]
        part_spec = spec_of(part)
        if isinstance(part_spec, Text):
            before += part_spec.text
            index += 1
            continue
        if isinstance(part_spec, SumPrint):
            following = spec_of(parts[index + 1]) if index + 1 < len(parts) else None
            after = following.text if isinstance(following, Text) else ""
            w.defer_charges()
            _sum_print(w, part_spec, depth, before, after)
            w.flush_charges(depth)
            before = ""
            index += 2 if after else 1
            continue
        if before:
            _text_output(w, depth, before)
            before = ""
        _statement(w, part, depth)
        index += 1
    if before:
        _text_output(w, depth, before)
    w.line(depth, "if ctx.output_size > max_output:")
    w.line(depth + 1, f"_overflow(ctx, {w.ref(node)})")


def _text_output(w: _Writer, depth: int, text: str) -> None:
    """Text printed as it is."""
    w.line(depth, f"out.append({w.ref(text)})")
    w.line(depth, f"ctx.output_size += {len(text)}")


def _rebound_names(closure: Any) -> FrozenSet[str]:
    """The variables of its own scope running the statement ``closure`` may bind again
    (`set`, a set block, a macro definition: their ``rebinds``): those are read where they
    are used, the others once per iteration."""
    rebinds = getattr(closure, "rebinds", None)
    if rebinds:
        return rebinds
    spec = spec_of(closure)
    if isinstance(spec, Body):
        return frozenset().union(*map(_rebound_names, spec.statements))
    if isinstance(spec, If):
        else_ = spec.else_
        bodies = [body for _, body, _ in spec.branches] + ([else_] if else_ is not None else [])
        return frozenset().union(*map(_rebound_names, bodies))
    return frozenset()


#: Set this environment variable (to anything but "" or "0") to have every generated function
#: printed to standard error as it is made, its names explained and each statement marked
#: with its template line.
SHOW_CODE_VARIABLE = "MINIJINJA_PY_SHOW_CODE"


def showing_code() -> bool:
    import os

    return os.environ.get(SHOW_CODE_VARIABLE, "") not in ("", "0")


def _describe(obj: Any) -> str:
    """What a name bound in generated code refers to, for people reading it."""
    if hasattr(obj, "lineno") and hasattr(obj, "column"):
        return f"{type(obj).__name__} node, line {obj.lineno} column {obj.column}"
    if isinstance(obj, type):
        return f"class {obj.__name__}"
    if callable(obj) and hasattr(obj, "__qualname__"):
        kind = "closure" if "<locals>" in obj.__qualname__ else "function"
        return f"{kind} {obj.__qualname__.rsplit('.', 1)[-1]}"
    text = repr(obj)
    return text if len(text) <= 60 else text[:57] + "..."


def _without_needless_pass(lines: List[str]) -> List[str]:
    """``lines`` without the ``pass`` that opens a block the writer then filled (each costs
    an instruction every time it runs)."""
    kept = []
    for index, line in enumerate(lines):
        if line.strip() == "pass":
            following = next((later for later in lines[index + 1:]
                              if later.strip() and not later.lstrip().startswith("#")), "")
            if _indentation(following) == _indentation(line):
                continue
        kept.append(line)
    return kept


def _indentation(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


#: The names generated code reads on its fast paths (builtins, constants of the type tests),
#: made locals of the generated function, as parameters with these defaults: a local is
#: cheaper to read than a global on every iteration. Each costs a copy per call, so the
#: names of closures and nodes (``_k0``...: slow paths, errors) stay globals.
_LOCAL_BUILTINS = ("type", "len", "str", "dict", "isinstance")
_LOCAL_HELPERS = ("_M", "_Undefined", "_EQUATABLE", "_ORDERABLE", "_SIZED", "_NAMESPACE_TYPES")


def _with_local_globals(w: _Writer, lines: List[str]) -> List[str]:
    """``lines`` (a function) with the fast paths' builtins and helpers it uses added to its
    parameters, their values as defaults. Positional defaults: filling them costs a copy
    per call (keyword-only ones are looked up in a dict each). A name found only inside a
    string literal is made a local too: unused, and no slower to find than tokenizing."""
    header, body = lines[0], lines[1:]
    used = set(_IDENTIFIER.findall("\n".join(body)))
    local = [name for name in _LOCAL_BUILTINS if name in used]
    local += [name for name in _LOCAL_HELPERS if name in used and name in w.names]
    if not local:
        return lines
    opening = header[:-len("):")] + ","
    continuation = " " * (header.index("(") + 1)
    parameters = [f"{name}={name}" for name in local]
    wrapped = [opening]
    for parameter in parameters:
        if len(wrapped[-1]) + len(parameter) + 2 > 100 and wrapped[-1] != continuation:
            wrapped.append(continuation)
        wrapped[-1] += ("" if wrapped[-1] == continuation else " ") + parameter + ","
    wrapped[-1] = wrapped[-1][:-1] + "):"
    return wrapped + body


def _compiled(w: _Writer, name: str) -> Any:
    lines = _without_needless_pass(w.lines)
    code_lines = [line for line in lines if not line.lstrip().startswith("#")]
    if len(code_lines) > MAX_LINES:
        return None
    source = "\n".join(_with_local_globals(w, lines))
    if w.comments:
        import sys

        legend = [f"# {key} = {_describe(value)}" for key, value in w.names.items()
                  if key.startswith("_k")]
        print("\n".join(["# ---- minijinja_py generated code ----"] + legend + [source]),
              file=sys.stderr)
    namespace = dict(w.names)
    try:
        code = compile(source, "<minijinja_py generated code>", "exec")
    except (SyntaxError, RecursionError, MemoryError, ValueError):  # pragma: no cover
        return None  # the closures work anyway
    exec(code, namespace)
    generated = namespace[name]
    generated.source = source  # type: ignore[attr-defined]  # for tests and debugging
    return generated


def generate_loop(body: Callable[..., Any], target: str, uses_loop: bool,
                  iteration_cost: int, stable_items: Any = False) -> Any:
    """The loop of a simple ``for`` (one target name, no ``else``, no assignments in the
    body) with its body inlined, or None. Called as ``f(inner, out, items, loop)`` after the
    steps of all iterations were charged; returns None, or the iterator of the items left
    when the output or step limit was passed (the caller refunds them and raises).
    ``stable_items``: whether nothing in the body can change the items (True), or the names
    of the functions it calls when that holds if they are pure (compiler._stable_items)."""
    if spec_of(body) is None:
        return None
    from operator import length_hint

    w = _Writer()
    w.names["_length_hint"] = length_hint
    w.in_loop = True
    w.loop_refund = str(int(iteration_cost))
    return _loop_function(w, body, target, uses_loop, [], [], stable_items)


def generate_charging_loop(body: Callable[..., Any], target: str, uses_loop: bool,
                           iteration_cost: int, fresh: Any, stable_items: Any = False,
                           binds: Optional[FrozenSet[str]] = None) -> Any:
    """The loop of a ``for`` with one target name and no ``else`` whose body may assign
    variables, with its body inlined, or None. Called as ``f(inner, out, items, loop)`` with
    ``inner`` the iteration scope it reuses (cleared each time, as the closures' loop does);
    each iteration is charged ``iteration_cost`` steps as it starts. Returns None, or True
    when the step or output limit was passed before an iteration (the caller raises the
    limit's error at the loop). ``fresh(ctx)``, when given, is the iteration's starting
    variables (names the body reads before it assigns them: undefined). ``binds``, when
    given, are the names the body can bind (its frame's stores, the target and ``loop``
    among them): any other name of an enclosing scope is probed once, before the loop."""
    if spec_of(body) is None:
        return None
    w = _Writer()
    w.in_loop = True
    w.binds = binds
    w.lazy_scope = True  # (the iteration's variables: see _loop_function)
    w.starts_fresh = fresh is not None
    prelude = [f"ctx.steps += {int(iteration_cost)}",
               "if ctx.steps > ctx.max_steps or ctx.output_size > max_output:",
               "    return True"]
    setup = []
    if fresh is not None:  # (made as _loop_function decides)
        w.names["_fresh_variables"] = fresh
    return _loop_function(w, body, target, uses_loop, prelude, setup, stable_items)


def _loop_function(w: _Writer, body: Callable[..., Any], target: str, uses_loop: bool,
                   prelude: List[str], setup: List[str], stable_items: Any) -> Any:
    w.hoisting = True
    w.rebound = _rebound_names(body)
    w.loop_parameter = uses_loop
    w.caching_reads = bool(stable_items)
    if type(stable_items) is frozenset:  # stable if the functions called are pure
        w.names["_pure_callees"] = pure_callees
        w.stable_test = "_stable"
        setup = setup + [f"_stable = _pure_callees(scope, {tuple(sorted(stable_items))!r})"]
    _statement(w, body, 2)
    # a body ending with a statement's output check (which raises) leaves only the steps to
    # check as the iteration ends; read before resolve_reads may write the body twice, one
    # level deeper (each copy ends with that check then)
    output_checked = len(w.lines) >= 2 and \
        w.lines[-2] == "        if ctx.output_size > max_output:" and \
        w.lines[-1].startswith("            _overflow(ctx, ")
    # what follows the body in each iteration: the limits looked at (see resolve_reads)
    end_of_iteration = [
        "        if ctx.steps > ctx.max_steps:" if output_checked else
        "        if ctx.output_size > max_output or ctx.steps > ctx.max_steps:",
        "            return remaining"] if w.loop_refund else []
    w.resolve_reads(end_of_iteration)
    lines = w.lines
    # the item is the hoisted target's own local when there is one
    item = w.hoisted[target][0] if target in w.hoisted else "item"
    # a simple loop's body that binds nothing stores the item for the closures it calls
    # only when it calls one (see _bind_target_lazily)
    lazy = bool(w.loop_refund) and not w.rebound
    if lazy:
        lines = _bind_target_lazily(lines, target, item)
        w.names["_bound"] = _bound
    # a loop whose body assigns writes the iteration's variables only when something reads
    # them (see _sync_iteration_lazily); when it cannot, they are written as each iteration
    # starts and every `set` stores at once
    synced_lazily = w.lazy_scope and all(
        name == target or (name == "loop" and w.loop_parameter) for name in w.hoisted)
    sync_lines: List[str] = []
    if synced_lazily:
        sync_call, sync_lines = _sync_function(target, w.stored_locals, w.starts_fresh,
                                               uses_loop)
        lines = _sync_iteration_lazily(lines, sync_call.format("scope", item))
        prelude = prelude + ["_synced = False"] + \
            [f"{stored} = _M" for stored in w.stored_locals.values()]
    elif w.lazy_scope:
        prelude = prelude + ["vars.clear()"] + \
            (["vars.update(fresh)"] if w.starts_fresh else []) + \
            (["vars['loop'] = loop"] if uses_loop else [])
    if w.starts_fresh:
        # the iteration's starting (undefined) values, immutable: made once per run of the
        # loop, when it first writes its variables if it writes them lazily (most runs
        # write none), else as it starts
        setup = setup + ["fresh = _M" if synced_lazily else "fresh = _fresh_variables(ctx)"]
    if w.lazy_scope:
        setup = setup + ["_iteration_vars = vars", "_scope = scope"] + \
            ([] if synced_lazily else ["_synced = True"])
    w.lines = ["def generated_loop(scope, out, items, loop):", "    vars = scope.vars",
               "    parent_vars = scope.parent.vars if scope.parent is not None else {}",
               "    ctx = scope.ctx",
               "    max_output = ctx.max_output"] + ["    " + line for line in setup] + \
        _invariant_reads(w) + ["    remaining = iter(items)", f"    for {item} in remaining:"]
    for line in prelude:
        w.line(2, line)
    if uses_loop:
        w.line(2, "loop.index0 += 1")
    body_text = "\n".join(lines)
    if not lazy and not synced_lazily:
        w.line(2, f"vars[{target!r}] = {item}")
    elif _mentions(body_text, "_b"):
        w.lines.insert(w.lines.index("    remaining = iter(items)"), "    _b = _M")
    if _mentions(body_text, "_pending"):
        w.lines.insert(w.lines.index("    remaining = iter(items)"), "    _pending = 0")
    for name, (value, is_dict) in w.hoisted.items():
        if name != target:
            w.line(2, f"{value} = loop" if synced_lazily else f"{value} = vars[{name!r}]")
        if _mentions(body_text, is_dict):
            w.line(2, f"{is_dict} = type({value}) is dict")
    w.lines.extend(lines)
    w.lines.extend(end_of_iteration)
    w.line(1, "return None")
    if sync_lines:
        w.lines += [""] + sync_lines
    return _compiled(w, "generated_loop")


def pure_callees(scope: Any, names: Tuple[str, ...]) -> bool:
    """Whether each of ``names`` holds one of the engine's pure functions in ``scope`` (see
    GlobalFunction): a loop calling only those cannot change the items it reads (the
    compiler's _stable_items), and its generated code reads each of their keys once per
    iteration."""
    for name in names:
        value = scope.lookup(name)
        if type(value) is not GlobalFunction or not value.pure:
            return False
    return True


def _invariant_reads(w: _Writer) -> List[str]:
    """The function's first lines reading each name probed once (``w.invariant``) from this
    scope, then its parent: ``_M`` when neither holds it."""
    return [f"    {variable} = vars.get({name!r}, _M)\n"
            f"    {variable} = parent_vars.get({name!r}, _M) if {variable} is _M else {variable}"
            for name, variable in w.invariant.items()]


def _sum_code(constant: int, terms: List[str]) -> str:
    """Code adding the int ``constant`` and the ``terms`` (no ``0 +`` when it is 0)."""
    return " + ".join(([str(constant)] if constant or not terms else []) + terms)


def _mentions(code: str, name: str) -> bool:
    """Whether generated ``code`` uses the variable ``name`` (``_d0``, not ``_d01``)."""
    import re

    return re.search(rf"\b{name}\b", code) is not None


def generate(body: Callable[..., Any], binds: Optional[FrozenSet[str]] = None
             ) -> Callable[..., Any]:
    """A Python function doing what the statement closure ``body`` does; ``body`` itself when
    it has nothing to inline or would be too big. ``binds``, when given, are the names its
    frame binds (the compiler's stores): the others are read from the scopes once, as it
    starts, and its locals among them once too."""
    if spec_of(body) is None:
        return body
    w = _Writer()
    if binds is None:
        w.hoisting = not _rebound_names(body)
    else:
        w.hoisting, w.rebound, w.binds = True, binds, binds
    _statement(w, body, 1)
    prologue = ["def generated_body(scope, out):", "    vars = scope.vars", "    ctx = scope.ctx",
                "    parent_vars = scope.parent.vars if scope.parent is not None else {}",
                "    max_output = ctx.max_output"]
    prologue += _invariant_reads(w)
    body_text = "\n".join(w.lines)
    if _mentions(body_text, "_pending"):
        prologue.append("    _pending = 0")
    for name, (value, is_dict) in w.hoisted.items():
        prologue.append(f"    {value} = vars[{name!r}]")
        if _mentions(body_text, is_dict):
            prologue.append(f"    {is_dict} = type({value}) is dict")
    w.lines[:0] = prologue
    w.line(1, "return None")
    generated = _compiled(w, "generated_body")
    return generated if generated is not None else body
