"""Provenance: which input, or which piece of template text, wrote each output character. The
values that carry origins, the tracers of the filters and methods that copy text, and the
results (origins.py); the compiler that makes a template's provenance render (compiler.py).

The results' classes are also found here, as they were when this was one module
(``minijinja_py.provenance.ProvenanceResult``); the public names are
``minijinja_py.ProvenanceResult``, ``Run`` and ``Origin``.
"""

_RESULTS = frozenset({"ProvenanceResult", "Run", "Origin"})


def __getattr__(name: str) -> object:
    if name not in _RESULTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from . import origins

    return getattr(origins, name)
