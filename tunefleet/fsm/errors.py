"""The one error the lifecycles raise: an event the current state does not allow."""

from tunefleet.errors import TunefleetError


class IllegalTransition(TunefleetError):
    """An event was fired that the entity's current state (or its guards) does not allow.

    The message is one line a person can act on, e.g. ``job j_12 is completed; cannot
    cancel it``; the parts are kept as attributes for callers that map it to a reply.
    """

    # The entity exists but its state forbids the request: HTTP 409 Conflict.
    status = 409

    def __init__(self, entity: str, entity_id: str, state: str, event: str) -> None:
        self.entity = entity
        self.entity_id = entity_id
        self.state = state
        self.event = event
        super().__init__(f"{entity} {entity_id} is {state}; cannot {event} it")
