"""`python -m app` is `engram`."""

from app.cli import main

main()
