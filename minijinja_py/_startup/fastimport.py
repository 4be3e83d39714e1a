"""Loading the package's own modules from their bytecode caches with less machinery.

A cold start (a fresh process rendering one template) imports about 25 of this package's
modules. Python's import system spends 100-150 microseconds on each before running a line of
it, most of it in looking: every finder on ``sys.meta_path`` is asked in turn, the path finder
consults its caches, stats the candidates and builds a spec through several layers. For
modules whose location is known (``minijinja_py.X``: the file ``X.py`` beside this one) that
search is wasted: a :class:`PackageFinder` answers at once, reads the ``__pycache__`` file
Python wrote, and hands its code over when it is valid as Python's own loader would check it
(the same magic number, a timestamp pyc whose recorded modification time and size are the
source file's). That halves the import system's share of a cold start.

Subpackages (``minijinja_py.syntax``, ``minijinja_py.compiler``...: the folders that show the
engine's layers) are found the same way, their ``__init__`` loaded from its cache with the
package's folder as its ``__path__``; each of them would otherwise cost a cold start 150-200
microseconds of searching. The folders every render goes through (:data:`FOLDERS`) are loaded
by :func:`install` directly, without the import system's bookkeeping (about 25 microseconds
each instead of 45). Anything else is left, untouched, to the normal machinery
(``find_spec`` returns None): names outside the package, no bytecode cache yet or a stale one
(Python then compiles and writes it as usual), hash-based pycs, ``-O``,
``PYTHONPYCACHEPREFIX``, and interpreters without CPython's import internals. The modules loaded this way are ordinary: ``__spec__``, ``__loader__`` (a
``SourceFileLoader``: ``inspect.getsource``, tracebacks and ``importlib.reload`` work as
usual), ``__file__`` and ``__cached__`` are what the normal path sets.
"""

from __future__ import annotations

import marshal
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any, Optional, Tuple

try:  # CPython's import internals (always loaded: they are the import system)
    import _imp
    import _io
    from _frozen_importlib import ModuleSpec
    from _frozen_importlib_external import MAGIC_NUMBER, SourceFileLoader
except ImportError:  # pragma: no cover - another implementation: the normal path only
    SourceFileLoader = object  # type: ignore[assignment,misc]
    MAGIC_NUMBER = None

from os import stat as _stat

_BYTECODE_HEADER = 16  # magic, flags, source modification time, source size


class _CachedBytecodeLoader(SourceFileLoader):  # type: ignore[misc,valid-type]
    """A ``SourceFileLoader`` that runs the bytecode its finder has already read and
    checked (and otherwise, e.g. on ``importlib.reload``, does what its base class does)."""

    def __init__(self, fullname: str, path: str, data: bytes) -> None:
        super().__init__(fullname, path)
        self._bytecode: Optional[bytes] = data

    def exec_module(self, module: Any) -> None:
        data, self._bytecode = self._bytecode, None
        if data is None:
            super().exec_module(module)
            return
        code = marshal.loads(memoryview(data)[_BYTECODE_HEADER:])
        _imp._fix_co_filename(code, self.path)  # as Python's loader: the file's path now
        exec(code, module.__dict__)


class PackageFinder:
    """A ``sys.meta_path`` finder for the modules and subpackages of one package (and of its
    subpackages), ``prefix`` being the package's name and a dot (see the module's doc)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def find_spec(self, fullname: str, path: Any = None, target: Any = None
                  ) -> Optional[ModuleSpec]:
        if not fullname.startswith(self.prefix):
            return None
        parent_name, _, base = fullname.rpartition(".")
        directories = getattr(sys.modules.get(parent_name), "__path__", None)
        if not directories:
            return None
        directory = directories[0]  # a module, else a subpackage
        return self.spec_from(fullname, ((directory, base), (f"{directory}/{base}", "__init__")))

    def spec_from(self, fullname: str, places: Tuple[Tuple[str, str], ...]
                  ) -> Optional[ModuleSpec]:
        """The spec of ``fullname`` loaded from the first of ``places`` (folder, file stem:
        ``__init__`` for a package) that has a source and a valid cache, or None."""
        tag = sys.implementation.cache_tag
        if tag is None or sys.flags.optimize or sys.pycache_prefix is not None:
            return None
        for folder, stem in places:
            source = f"{folder}/{stem}.py"
            cached = f"{folder}/__pycache__/{stem}.{tag}.pyc"
            try:
                stat = _stat(source)
                with _io.open_code(cached) as file:
                    data = file.read()
                break
            except (OSError, ValueError):
                continue
        else:
            return None  # neither here (a zip, a namespace package), or no cache yet
        if (data[:4] != MAGIC_NUMBER or data[4:8] != b"\0\0\0\0"  # a timestamp pyc
                or int.from_bytes(data[8:12], "little") != int(stat.st_mtime) & 0xFFFFFFFF
                or int.from_bytes(data[12:16], "little") != stat.st_size & 0xFFFFFFFF):
            return None  # stale or hash-based: Python's loader decides (and rewrites it)
        spec = ModuleSpec(fullname, _CachedBytecodeLoader(fullname, source, data),
                          origin=source, is_package=stem == "__init__")
        if stem == "__init__":  # a package's modules are found in its folder
            spec.submodule_search_locations = [folder]
        spec.cached = cached
        spec.has_location = True
        return spec

    def invalidate_caches(self) -> None:
        """Nothing is cached here (``importlib.invalidate_caches`` calls every finder)."""


#: The finder of this package's modules, which :func:`install` puts on ``sys.meta_path``.
FINDER = PackageFinder(__name__.partition(".")[0] + ".")  # minijinja_py. (this is in _startup/)


#: The engine's folders every render goes through, parents first. Their ``__init__``s hold a
#: docstring only; :func:`install` loads them at once (see _load_folder).
FOLDERS = ("syntax", "compiler", "runtime", "runtime.filters", "guard")


def install() -> None:
    """Put :data:`FINDER` first on ``sys.meta_path`` (once), and load :data:`FOLDERS`: the
    package does it when the engine is first used, so a bare ``import minijinja_py`` does not
    pay for this module."""
    if MAGIC_NUMBER is not None and FINDER not in sys.meta_path:
        sys.meta_path.insert(0, FINDER)
        for folder in FOLDERS:
            _load_folder(FINDER.prefix + folder)


def _load_folder(name: str) -> None:
    """Import the package ``name`` as the import system would with :data:`FINDER`'s spec,
    without its bookkeeping (module locks, the search of ``sys.meta_path``, the attributes set
    one by one through several layers): 35 of the 45 microseconds a package costs a cold
    start. The module is ordinary (``__spec__``, ``__path__``, ``__file__``...: what
    ``importlib.util.module_from_spec`` sets); without a valid cache it is left to the import
    system."""
    parent, _, child = name.rpartition(".")
    if name in sys.modules or parent not in sys.modules:
        return
    spec = FINDER.spec_from(name, ((f"{sys.modules[parent].__path__[0]}/{child}", "__init__"),))
    if spec is None:
        return
    module = type(sys)(name)
    module.__spec__ = spec
    module.__loader__ = spec.loader
    module.__package__ = name
    module.__path__ = spec.submodule_search_locations
    module.__file__ = spec.origin
    module.__cached__ = spec.cached
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    setattr(sys.modules[parent], child, module)
