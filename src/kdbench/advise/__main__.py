"""`python -m kdbench.advise ...`: see `kdbench.advise.cli`."""

from kdbench.advise.cli import main

main()
