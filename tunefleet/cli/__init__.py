"""Command line: argument parsing only; each command calls into the rooms above."""
