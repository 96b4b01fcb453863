"""`python -m app.cli` is `engram`, as it was while the command was one module."""

import sys

from app.cli import main

main(sys.argv[1:])
