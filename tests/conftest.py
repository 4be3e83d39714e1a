"""Test-wide settings: the persistent parse cache goes to a private temporary directory."""

from __future__ import annotations

import os
import tempfile

_CACHE = tempfile.mkdtemp(prefix="minijinja_py-test-cache-")
os.environ.setdefault("MINIJINJA_PY_CACHE_DIR", _CACHE)
