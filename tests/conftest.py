"""Test-wide settings: the persistent parse cache goes to a private temporary directory,
removed when the test run ends."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

_CACHE = tempfile.mkdtemp(prefix="minijinja_py-test-cache-")
atexit.register(shutil.rmtree, _CACHE, True)
os.environ.setdefault("MINIJINJA_PY_CACHE_DIR", _CACHE)
