"""Errors tunefleet raises on purpose; anything else is a bug."""


class TunefleetError(Exception):
    """Base of every error tunefleet raises deliberately."""
