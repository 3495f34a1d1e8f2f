"""`python -m tunefleet` is the `tunefleet` command."""

from tunefleet.cli.main import main

main()
