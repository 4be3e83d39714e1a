"""What a running template touches: the objects it sees (objects.py: Undefined, loop, macro,
namespace...), markup, the sandbox, the methods and operators it may call under limits, the
tests and the filters (filters/).

Empty on purpose (a package ``__init__`` is on every cold start): import the modules.
"""
