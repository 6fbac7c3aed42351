"""``python -m harness``: run the ``harness`` command line."""

import sys

from harness.cli import main

sys.exit(main())
