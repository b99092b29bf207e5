"""``python -m tickwork.cli ...``: the same command line as ``tickwork ...``."""

from tickwork.cli import main

main()
