"""``python -m minijinja_py``: the ``minijinja-py`` command line (see :mod:`minijinja_py.chat.cli`)."""

import sys

from .chat.cli import main

if __name__ == "__main__":
    sys.exit(main())
