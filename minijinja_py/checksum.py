"""SHA-256 from CPython's own C module, without :mod:`hashlib` or :mod:`zlib`.

``hashlib`` loads OpenSSL and ``zlib`` is a shared library of its own: each costs a cold start
a fraction of a millisecond or more, and the parse cache needs a digest anyway (its entry
names), so the grammar check, the engine's identity and the cache entries' integrity all use
this one.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any

try:
    from _sha256 import sha256 as _new  # CPython <= 3.11
except ImportError:  # pragma: no cover - other versions and interpreters
    try:
        from _sha2 import sha256 as _new  # CPython 3.12+
    except ImportError:
        from hashlib import sha256 as _new


def sha256(data: bytes = b"") -> "Any":
    """A new SHA-256 hash object (``update``, ``digest``, ``hexdigest``) over ``data``."""
    return _new(data)
