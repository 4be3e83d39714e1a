"""Provenance: which input, or which piece of template text, wrote each output character. The
values that carry origins, the tracers of the filters and methods that copy text, and the
results (origins.py); the compiler that makes a template's provenance render (compiler.py).

Empty on purpose: import the modules (the public names are ``minijinja_py.ProvenanceResult``,
``Run`` and ``Origin``).
"""
