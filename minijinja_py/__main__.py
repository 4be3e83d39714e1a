"""``python -m minijinja_py``: the ``minijinja-py`` command line (see :mod:`minijinja_py.cli`)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
