"""Source text to AST: the scanner, the LALR driver and its shipped tables, the parser and the
node classes, the syntax errors Jinja2 would raise, and the parse cache.

Empty on purpose (a package ``__init__`` is on every cold start): import the modules.
"""
