"""SHA-256 from CPython's own C module, without :mod:`hashlib` or :mod:`zlib`.

``hashlib`` loads OpenSSL and ``zlib`` is a shared library of its own: each costs a cold start
a fraction of a millisecond or more, and the parse cache needs a digest anyway (its entry
names), so the grammar check, the engine's identity and the cache entries' integrity all use
this one.
"""

from __future__ import annotations

# sha256(data=b"") -> a hash object (update, digest, hexdigest), as hashlib's
try:
    from _sha256 import sha256  # CPython <= 3.11
except ImportError:  # pragma: no cover - other versions and interpreters
    try:
        from _sha2 import sha256  # CPython 3.12+
    except ImportError:
        from hashlib import sha256

__all__ = ["sha256"]
