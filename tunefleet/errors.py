"""Errors tunefleet raises on purpose; anything else is a bug.

The domain errors carry the HTTP status they mean, so the HTTP adapter renders them
as ``{"detail": <message>}`` without the actors knowing about HTTP.
"""


class TunefleetError(Exception):
    """Base of every error tunefleet raises deliberately."""

    status = 500


class BadRequest(TunefleetError):
    """The request cannot be carried out as asked (the message says what to send)."""

    status = 400


class Forbidden(TunefleetError):
    status = 403


class NotFound(TunefleetError):
    status = 404


class Conflict(TunefleetError):
    """The entity is in a state that does not allow this (the message says what to do)."""

    status = 409


class Unavailable(TunefleetError):
    """The orchestrator is starting or stopping; try again shortly."""

    status = 503
