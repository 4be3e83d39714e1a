"""The contract between the closure compiler and the code generator stays closed.

Each fast path a closure offers generated code is one class of ``fastpath_specs``: the
compiler attaches it, codegen writes it through the emitter its tables give for that class.
A kind without an emitter would silently stay a closure call in generated code; an emitter
without a kind is dead code that still looks like a mirror of some closure.
"""

from __future__ import annotations

import ast
import inspect

from minijinja_py.compiler import codegen, closures as compiler, specs as fastpath_specs
from minijinja_py.compiler.specs import Arguments, Spec

#: Kinds that are parts of another kind, never a closure generated code evaluates by itself:
#: a call's arguments (read by Call's emitter and by the compiler's method and filter paths).
PARTS = {Arguments}


def _kinds() -> set:
    """Every concrete spec class: the subclasses of Spec that have none of their own."""
    found, stack = set(), [Spec]
    while stack:
        cls = stack.pop()
        subclasses = cls.__subclasses__()
        if not subclasses and cls is not Spec:
            found.add(cls)
        stack.extend(subclasses)
    return found


def _attached_by_compiler() -> set:
    """The spec classes compiler.py describes in an ``attach(closure, kinds.Kind(...))`` call
    (``attach(closure, _spec_described(other))`` passes one on)."""
    tree = ast.parse(inspect.getsource(compiler))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "attach":
            made = node.args[1]
            if isinstance(made, ast.Call) and isinstance(made.func, ast.Attribute) and \
                    getattr(made.func.value, "id", None) == "kinds":
                names.add(made.func.attr)
    made_classes = {getattr(fastpath_specs, name, None) for name in names}
    return {cls for cls in made_classes if isinstance(cls, type) and issubclass(cls, Spec)}


def test_every_kind_has_one_emitter_and_every_emitter_a_kind() -> None:
    expressions, statements = set(codegen._EXPRESSIONS), set(codegen._STATEMENTS)
    assert not expressions & statements, "a kind is both an expression and a statement"
    assert expressions | statements | PARTS == _kinds()
    assert not PARTS & (expressions | statements)


def test_every_kind_is_written_by_the_compiler() -> None:
    assert _attached_by_compiler() == _kinds()


def test_spec_classes_hold_only_their_fields() -> None:
    # __slots__ everywhere: a misspelt field fails where it is written, not when codegen
    # reads a default that is not there
    for kind in _kinds():
        assert all("__slots__" in vars(cls) for cls in kind.__mro__ if cls is not object), kind
        assert not hasattr(kind.__new__(kind), "__dict__"), kind



def test_a_described_spec_is_built_once_as_its_class() -> None:
    # at run time the compiler only records a kind and its fields (no spec class is defined
    # on a cold start, see test_cold_start); the first read builds the instance, a described
    # field too, and a description two closures share gives both the one spec
    arguments = compiler.kinds.Arguments([], [])
    closure = compiler.attach(lambda scope: None, compiler.kinds.Call(len, arguments, None))
    sharing = compiler.attach(lambda scope: None, compiler._spec_described(closure))
    built = fastpath_specs.spec_of(closure)
    assert type(built) is fastpath_specs.Call and type(built.arguments) is Arguments
    assert built.callee is len and built.arguments.positional == []
    assert fastpath_specs.spec_of(sharing) is built
