"""``python -m kdbench.report RESULTS_DIR [--out DIR] ...``: see :mod:`kdbench.report.cli`."""

import sys

from kdbench.report.cli import main

sys.exit(main())
