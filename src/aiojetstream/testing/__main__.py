"""``python -m aiojetstream.testing``: run the command line (see :func:`main`)."""

import sys

from ._cli import main

if __name__ == "__main__":
    sys.exit(main())
