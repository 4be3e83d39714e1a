"""What bounds a render: the limits and the render in progress (limits.py), the price of each
piece of work in steps (prices.py), the deadline's watchdog (deadline.py) and the pricing of
hash tables a template fills (collisions.py).

Empty on purpose (a package ``__init__`` is on every cold start): import the modules.
"""
