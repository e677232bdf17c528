"""``python -m aiojetstream``: the command line (see :mod:`aiojetstream.cli`)."""

import sys

from aiojetstream.cli import main

if __name__ == "__main__":
    sys.exit(main())
