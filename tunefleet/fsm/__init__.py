"""Lifecycles as data: states, transition tables, guards. No I/O."""
