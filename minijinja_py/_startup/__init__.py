"""Start-up machinery, not engine concerns: loading the package's modules from their bytecode
caches (fastimport.py), pausing the collector while a compile or an import makes objects that
all stay alive (gcpause.py), and SHA-256 without hashlib's import cost (sha256.py).

Empty on purpose (a package ``__init__`` is on every cold start): import the modules.
"""
