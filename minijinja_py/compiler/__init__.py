"""AST to closures, and hot bodies to Python: the closure compiler (closures.py), the fast-path
specs it hands the code generator (specs.py), the code generator (codegen.py), frame analysis
(symbols.py) and constant folding (constfold.py).

Empty on purpose (a package ``__init__`` is on every cold start): import the modules.
"""
