"""fastimport: the package's modules load from their bytecode caches when those are valid, and
are left to Python's own import system otherwise; either way they are ordinary modules."""

import importlib
import importlib.util
import inspect
import os
import py_compile
import subprocess
import sys
import textwrap

import pytest

from minijinja_py._startup import fastimport

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A package ``fastpkg`` with a module ``mod`` in a temporary directory, imported, and a
    finder for it (not installed: the tests call it)."""
    root = tmp_path / "fastpkg"
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "mod.py").write_text("VALUE = 1\n\ndef where():\n    return __file__\n")
    (root / "sub").mkdir()
    (root / "sub" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [n for n in sys.modules if n == "fastpkg" or n.startswith("fastpkg.")]:
        monkeypatch.delitem(sys.modules, name)
    importlib.invalidate_caches()
    import fastpkg  # noqa: F401

    yield root, fastimport.PackageFinder("fastpkg.")
    for name in [n for n in sys.modules if n == "fastpkg" or n.startswith("fastpkg.")]:
        del sys.modules[name]


def _compile(path, **options):
    py_compile.compile(str(path), cfile=importlib.util.cache_from_source(str(path)),
                       doraise=True, **options)


def test_valid_cache_is_loaded_by_the_finder(package):
    root, finder = package
    _compile(root / "mod.py")
    spec = finder.find_spec("fastpkg.mod")
    assert spec is not None
    assert spec.origin == str(root / "mod.py")
    assert spec.cached == importlib.util.cache_from_source(str(root / "mod.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.VALUE == 1
    assert module.where() == str(root / "mod.py")
    assert module.where.__code__.co_filename == str(root / "mod.py")


@pytest.mark.parametrize("change", ["no cache", "source edited", "hash-based cache"])
def test_anything_but_a_valid_timestamp_cache_is_left_to_python(package, change):
    root, finder = package
    source = root / "mod.py"
    if change == "source edited":
        _compile(source)
        source.write_text("VALUE = 22\n")  # another size: the cache no longer matches
    elif change == "hash-based cache":
        _compile(source, invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
    assert finder.find_spec("fastpkg.mod") is None


def test_names_it_does_not_own_are_left_to_python(package):
    root, finder = package
    assert finder.find_spec("json") is None
    assert finder.find_spec("fastpkgx.mod") is None
    assert finder.find_spec("fastpkg.sub") is None  # a subpackage without a cache yet
    assert finder.find_spec("fastpkg.missing") is None


def test_a_subpackage_is_loaded_as_a_package(package):
    root, finder = package
    (root / "sub" / "__init__.py").write_text("NAME = 'sub'\n")
    (root / "sub" / "leaf.py").write_text("WHERE = __name__\n")
    _compile(root / "sub" / "__init__.py")
    _compile(root / "sub" / "leaf.py")
    spec = finder.find_spec("fastpkg.sub")
    assert spec is not None and spec.origin == str(root / "sub" / "__init__.py")
    assert spec.submodule_search_locations == [str(root / "sub")]
    sys.meta_path.insert(0, finder)
    try:
        import fastpkg.sub.leaf as leaf
    finally:
        sys.meta_path.remove(finder)
    sub = sys.modules["fastpkg.sub"]
    assert type(sub.__loader__).__name__ == "_CachedBytecodeLoader"
    assert (sub.NAME, sub.__path__, sub.__file__) == ("sub", [str(root / "sub")],
                                                      str(root / "sub" / "__init__.py"))
    assert leaf.WHERE == "fastpkg.sub.leaf" and type(leaf.__loader__).__name__ == \
        "_CachedBytecodeLoader"


def test_the_package_modules_are_ordinary_modules():
    import minijinja_py

    assert minijinja_py.Environment  # the engine's first use installs the finder
    from minijinja_py.syntax import scanner

    assert fastimport.FINDER in sys.meta_path
    assert isinstance(scanner.__loader__, importlib.machinery.SourceFileLoader)
    assert scanner.__spec__.origin == scanner.__file__
    assert scanner.__file__.endswith(os.path.join("minijinja_py", "syntax", "scanner.py"))
    assert scanner.Scanner.scan.__code__.co_filename == scanner.__file__
    assert "class Scanner" in inspect.getsource(scanner)
    reloaded = importlib.reload(scanner)
    assert reloaded is scanner and callable(scanner.scan)


def test_a_fresh_process_loads_the_engine_through_the_finder():
    """With the caches written (the first run), a second process renders with the engine's
    modules loaded by the finder; the output is the same."""
    code = textwrap.dedent("""
        import sys
        import minijinja_py as mj
        out = mj.chat_environment().from_string("{{ x|tojson }}{% for i in y %}{{ i }}{% endfor %}"
                                                ).render(x={"a": 1}, y=[1, 2])
        fast = sorted(name for name, module in sys.modules.items()
                      if name.startswith("minijinja_py.")
                      and type(getattr(module, "__loader__", None)).__name__
                      == "_CachedBytecodeLoader")
        print(out, len(fast), "minijinja_py.compiler.closures" in fast, sep="|")
    """)
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["MINIJINJA_PY_CACHE"] = "0"
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env=env, cwd=REPO, timeout=120) for _ in range(2)]
    for run in runs:
        assert run.returncode == 0, run.stderr
    text, count, compiler_fast = runs[1].stdout.strip().split("|")
    assert text == '{"a": 1}12'
    assert compiler_fast == "True" and int(count) >= 10


def test_install_loads_the_engine_folders_as_ordinary_packages():
    """install() loads fastimport.FOLDERS (empty package __init__s every render goes
    through) from their caches without the import system's bookkeeping; they are the packages
    the import system would have made."""
    code = textwrap.dedent("""
        import importlib.util, os, sys
        import minijinja_py
        from minijinja_py._startup import fastimport
        fastimport.install()
        for folder in fastimport.FOLDERS:
            name = "minijinja_py." + folder
            module = sys.modules[name]
            parent, _, child = name.rpartition(".")
            here = os.path.join(os.path.dirname(minijinja_py.__file__), *folder.split("."))
            print(folder, type(module.__loader__).__name__, module.__spec__.name == name,
                  module.__path__ == [here], module.__package__ == name,
                  module.__file__ == os.path.join(here, "__init__.py"),
                  module.__cached__ == importlib.util.cache_from_source(module.__file__),
                  getattr(sys.modules[parent], child) is module, bool(module.__doc__))
    """)
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env=env, cwd=REPO, timeout=120) for _ in range(2)]  # caches first
    assert runs[1].returncode == 0, runs[1].stderr
    lines = runs[1].stdout.split("\n")[:-1]
    assert [line.split()[0] for line in lines] == list(fastimport.FOLDERS)
    for line in lines:
        assert line.split()[1:] == ["_CachedBytecodeLoader"] + ["True"] * 7, line
