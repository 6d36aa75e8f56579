"""``python -m fairagg``: the command line (the same as the ``fairagg`` script)."""

import sys

from .cli import main

sys.exit(main())
