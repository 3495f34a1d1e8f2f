"""Errors the actor runtime raises on purpose."""

from tunefleet.errors import TunefleetError


class ActorError(TunefleetError):
    """Base of the actor runtime's errors (misuse of the runtime lands here too)."""


class ActorStopped(ActorError):
    """The actor is stopping or stopped, so the message was not (and will not be) handled."""

    # Shutting down or a removed entity: the caller may retry once things settle.
    status = 503

    def __init__(self, actor: str, why: str = "it is stopped") -> None:
        self.actor = actor
        self.why = why
        super().__init__(f"actor {actor} accepts no messages: {why}")


class AskTimeout(ActorError):
    """The actor did not answer an ask in time; the message may still be handled later."""

    status = 504

    def __init__(self, actor: str, message_type: str, timeout_s: float) -> None:
        self.actor = actor
        self.message_type = message_type
        self.timeout_s = timeout_s
        super().__init__(f"actor {actor} did not answer {message_type} within {timeout_s:g} s")
