"""The actor runtime: actors with a mailbox handled one message at a time, and the
system that spawns them, restarts them after a crash and stops them.

An idle actor owns no task and no mailbox: both exist only while it has messages, so
ten thousand idle actors cost a few hundred bytes each. `tell` and `ask` must be
called on the event loop's thread.

An actor may answer some messages at once (`answer_at_once`): while it is idle, a
message whose handling needs no await is handled in the asker's (or teller's) task, still
one message at a time and in order (nothing is queued before it), without the task, the
reply future and the event-loop turns that a message through the mailbox costs. What
arrives while it is being handled (a message it sends itself, or one sent back to it by
an actor it told) waits in the mailbox, and a task handles it afterwards.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import deque
from typing import ClassVar, TypeVar

import structlog

from tunefleet.actors.ask_deadlines import AskDeadlines
from tunefleet.actors.clock import Clock
from tunefleet.actors.errors import ActorError, ActorStopped, AskTimeout
from tunefleet.actors.restart_policy import FailureCallback, RestartPolicy
from tunefleet.errors import TunefleetError

log = structlog.get_logger(__name__)

__all__ = [
    "LATER",
    "Actor",
    "ActorError",
    "ActorStopped",
    "ActorSystem",
    "AskTimeout",
    "check_message",
]

# Actor states. Accepting messages is `_RUNNING` only.
_NEW, _RUNNING, _STOPPING, _STOPPED = 0, 1, 2, 3

# After this many messages in a row the actor yields, so a long mailbox whose
# handler never awaits cannot starve the other actors and the HTTP server.
_FAIRNESS_BATCH = 32

_Reply = asyncio.Future[object]
_Envelope = tuple[object, _Reply | None]

# What `answer_at_once` returns for a message it leaves to the mailbox.
LATER: object = object()

# Types already proven to be frozen dataclasses: the check costs one set lookup.
_MESSAGE_TYPES: set[type] = set()


def check_message(message: object) -> None:
    """Raise TypeError unless `message` is an instance of a frozen dataclass."""
    cls = type(message)
    if cls in _MESSAGE_TYPES:
        return
    params = getattr(cls, "__dataclass_params__", None) if dataclasses.is_dataclass(cls) else None
    if params is None:
        raise TypeError(f"a message must be a frozen dataclass instance, not {cls.__qualname__}")
    if not params.frozen:
        raise TypeError(f"message type {cls.__qualname__} must be declared @dataclass(frozen=True)")
    _MESSAGE_TYPES.add(cls)


class Actor:
    """Base class: override `receive`; its return value is the reply to `ask`.

    Exceptions listed in `refusals` (by default every deliberate `TunefleetError`,
    e.g. a 409 Conflict) are answers, not crashes: they go to the asker (or are
    logged for a tell) and the actor carries on with no restart counted. Any other
    exception is a crash handled by the `ActorSystem`.
    """

    __slots__ = ("_crash_times", "_mailbox", "_state", "_system", "_task", "name")

    refusals: ClassVar[tuple[type[Exception], ...]] = (TunefleetError,)
    # Whether the class answers anything at once: a tell to one that does not (a job
    # actor) goes straight to its mailbox.
    _answers_at_once: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        cls._answers_at_once = cls.answer_at_once is not Actor.answer_at_once

    def __init__(self, name: str) -> None:
        if not name:
            raise ValueError("an actor needs a non-empty name")
        self.name = name
        self._mailbox: deque[_Envelope] | None = None
        self._task: asyncio.Task[None] | None = None
        self._system: ActorSystem | None = None
        self._state = _NEW
        self._crash_times: deque[float] | None = None

    # --- overridable behaviour ---------------------------------------------------------

    async def receive(self, message: object) -> object:
        raise NotImplementedError(f"{type(self).__qualname__} must override receive()")

    def answer_at_once(self, message: object) -> object:
        """The answer to an ask of `message` without an await, or `LATER` (the default)
        to have `receive` handle it from the mailbox. Called only while the actor is
        idle: running, no message queued or in hand; for a told message too, whose
        answer is dropped. A refusal it raises goes to the asker (a told one is logged,
        as from the mailbox); any other exception is a crash, recovered as one from
        `receive`."""
        return LATER

    async def on_start(self) -> None:
        """Runs once, after spawn and before the first message."""

    async def on_stop(self) -> None:
        """Runs once, after the last message (also when the actor failed)."""

    async def on_restart(self, error: Exception) -> None:
        """Runs after `receive` crashed, before the next message: reset what it broke."""

    # --- sending -------------------------------------------------------------------------

    @property
    def alive(self) -> bool:
        """True while the actor accepts messages (spawned, not stopping)."""
        return self._state == _RUNNING

    @property
    def mailbox_size(self) -> int:
        """Messages waiting, not counting the one being handled."""
        return len(self._mailbox) if self._mailbox else 0

    def tell(self, message: object) -> None:
        """Queue `message` (or handle it at once while idle, see `answer_at_once`);
        raises ActorStopped once the actor is stopping."""
        if (
            self._answers_at_once
            and self._mailbox is None
            and self._task is None
            and self._state == _RUNNING
            and self._told_at_once(message)
        ):
            return
        self._enqueue(message, None)

    def try_tell(self, message: object) -> bool:
        """Tell unless the actor is stopping or stopped; True if queued (or handled at
        once). For timers and other callbacks that may outlive the actor."""
        check_message(message)
        if self._state != _RUNNING:
            return False
        if (
            self._answers_at_once
            and self._mailbox is None
            and self._task is None
            and self._told_at_once(message)
        ):
            return True
        self._enqueue(message, None)
        return True

    async def ask(self, message: object, timeout_s: float = 5.0) -> object:
        """Queue `message` and wait for what `receive` returns (or raises).

        The timeout runs on the event loop's real clock: it guards against a stuck
        actor, it is not domain time. After a timeout the message is still handled
        later; only its answer is dropped.
        """
        if self._mailbox is None and self._task is None and self._state == _RUNNING:
            answer = self._answer_idle(message)
            if answer is not LATER:
                return answer
        loop = asyncio.get_running_loop()
        reply: _Reply = loop.create_future()
        self._enqueue(message, reply)
        self._owner().ask_deadlines.watch(loop, reply, self.name, message, timeout_s)
        return await reply

    async def stop(self, drain: bool = True) -> None:
        """Stop accepting messages, then wait until the actor has stopped.

        drain=True handles what is queued first; drain=False rejects it (asks get
        ActorStopped). The message being handled always finishes. Called from the
        actor's own receive it returns at once; the actor stops after that message.
        """
        dropped = self._begin_stop(drain)
        if dropped:
            log.info("actor stopped with queued messages", actor=self.name, dropped=dropped)
        task = self._task
        if task is not None and task is not asyncio.current_task():
            # wait() rather than await: a cancelled caller must not cancel the actor.
            await asyncio.wait((task,))

    def __repr__(self) -> str:
        state = ("new", "running", "stopping", "stopped")[self._state]
        return f"<{type(self).__qualname__} {self.name} {state} mailbox={self.mailbox_size}>"

    def _answer_idle(self, message: object) -> object:
        if type(message) not in _MESSAGE_TYPES:
            check_message(message)
        # A mailbox and no task: busy answering at once. What is sent meanwhile (to
        # itself, or back through an actor it tells) waits there, for a task made after.
        self._mailbox = deque()
        crashed: tuple[object, Exception] | None = None
        try:
            return self.answer_at_once(message)
        except Exception as error:
            if not isinstance(error, self.refusals):
                # Recovered on the actor's own task, as a crash in receive is; messages
                # sent meanwhile wait in the mailbox until it has run.
                crashed = (message, error)
            raise
        finally:
            if crashed is not None or self._mailbox or self._state != _RUNNING:
                self._task = asyncio.create_task(
                    self._run(starting=False, crashed=crashed), name=self.name
                )
            else:
                self._mailbox = None

    def _told_at_once(self, message: object) -> bool:
        """Whether a told `message` was handled at once (a refusal logged, a crash being
        recovered on the actor's task, as from the mailbox); False: it is for `receive`.
        A message that is no message is the teller's bug: its TypeError is raised."""
        if type(message) not in _MESSAGE_TYPES:
            check_message(message)
        try:
            return self._answer_idle(message) is not LATER
        except Exception as error:
            if isinstance(error, self.refusals):
                self._log_refused_tell(message, error)
            return True

    # --- the actor's one task ------------------------------------------------------------

    def _enqueue(self, message: object, reply: _Reply | None) -> None:
        if type(message) not in _MESSAGE_TYPES:
            check_message(message)
        if self._state != _RUNNING:
            raise self._not_accepting()
        mailbox = self._mailbox
        if mailbox is not None:
            # Busy; with no task, answering at once (`_answer_idle` makes the task after).
            mailbox.append((message, reply))
            return
        self._mailbox = deque(((message, reply),))
        if self._task is None:
            self._task = asyncio.create_task(self._run(starting=False), name=self.name)

    def _not_accepting(self) -> ActorError:
        if self._state == _NEW:
            return ActorError(f"actor {self.name} is not spawned; pass it to ActorSystem.spawn")
        return ActorStopped(self.name)

    async def _run(self, starting: bool, crashed: tuple[object, Exception] | None = None) -> None:
        try:
            failure = await self._start() if starting else None
            if failure is None and crashed is not None:
                failure = await self._recover(*crashed)
            if failure is None:
                failure = await self._handle_mailbox()
            if self._state == _RUNNING:
                # Idle again (no await since the mailbox emptied): hand both back.
                self._task = None
                self._mailbox = None
                return
            await self._finish()
        except asyncio.CancelledError:
            self._abandon()
            raise
        if failure is not None:
            await self._owner().restart_policy.actor_failed(self, *failure)

    async def _start(self) -> tuple[Exception, str] | None:
        try:
            await self.on_start()
        except Exception as error:
            self._close("it failed to start")
            return error, "on_start raised"
        return None

    async def _handle_mailbox(self) -> tuple[Exception, str] | None:
        handled = 0
        while mailbox := self._mailbox:
            message, reply = mailbox.popleft()
            try:
                result = await self.receive(message)
            except asyncio.CancelledError:
                if reply is not None and not reply.done():
                    reply.set_exception(ActorStopped(self.name, "its task was cancelled"))
                raise
            except Exception as error:
                if reply is not None and not reply.done():
                    reply.set_exception(error)
                if isinstance(error, self.refusals):
                    if reply is None:
                        self._log_refused_tell(message, error)
                else:
                    failure = await self._recover(message, error)
                    if failure is not None:
                        return failure
            else:
                if reply is not None and not reply.done():
                    reply.set_result(result)
            handled += 1
            if handled % _FAIRNESS_BATCH == 0:
                await asyncio.sleep(0)
        return None

    def _log_refused_tell(self, message: object, error: Exception) -> None:
        log.warning(
            "actor refused a message",
            actor=self.name,
            message_type=type(message).__name__,
            error=str(error),
        )

    async def _recover(self, message: object, error: Exception) -> tuple[Exception, str] | None:
        policy = self._owner().restart_policy
        if self._crash_times is None:
            self._crash_times = deque()
        may_restart = policy.record_crash(self._crash_times)
        log.error(
            "actor crashed",
            actor=self.name,
            message_type=type(message).__name__,
            error=repr(error),
            crashes_in_window=len(self._crash_times),
            exc_info=error,
        )
        if not may_restart:
            self._close("it failed: too many crashes")
            return error, "restart limit exceeded"
        try:
            await self.on_restart(error)
        except Exception as hook_error:
            self._close("it failed: on_restart raised")
            return hook_error, "on_restart raised"
        return None

    async def _finish(self) -> None:
        try:
            await self.on_stop()
        except Exception as error:
            log.error("actor on_stop failed", actor=self.name, error=repr(error), exc_info=error)
        self._mark_stopped()

    def _begin_stop(self, drain: bool) -> int:
        """Stop accepting; return how many queued messages were dropped (drain=False)."""
        if self._state in (_NEW, _STOPPED):
            self._state = _STOPPED
            return 0
        dropped = 0 if drain else self._reject_queued("it was stopped")
        if self._state == _STOPPING:
            return dropped
        self._state = _STOPPING
        if self._task is not None or self._mailbox is not None:
            # The running task (or the one made after an answer at once) finishes the
            # stop once the mailbox is empty.
            return dropped
        if type(self).on_stop is Actor.on_stop:
            self._mark_stopped()  # nothing to await: no task for an idle actor
        else:
            self._task = asyncio.create_task(self._finish(), name=self.name)
        return dropped

    def _close(self, why: str) -> None:
        self._state = _STOPPING
        dropped = self._reject_queued(why)
        if dropped:
            log.warning("actor dropped queued messages", actor=self.name, why=why, dropped=dropped)

    def _reject_queued(self, why: str) -> int:
        """Empty the mailbox, answering each waiting asker; return how many were dropped."""
        mailbox = self._mailbox
        if not mailbox:
            return 0
        dropped = len(mailbox)
        while mailbox:
            _, reply = mailbox.popleft()
            if reply is not None and not reply.done():
                reply.set_exception(ActorStopped(self.name, why))
        return dropped

    def _mark_stopped(self) -> None:
        self._state = _STOPPED
        self._task = None
        self._mailbox = None
        if self._system is not None:
            self._system._forget(self)

    def _abandon(self) -> None:
        """The task was cancelled (loop shutdown): nothing more can run, answer everyone."""
        dropped = self._reject_queued("its task was cancelled")
        log.warning("actor task cancelled", actor=self.name, dropped=dropped)
        self._mark_stopped()

    def _owner(self) -> ActorSystem:
        if self._system is None:  # unreachable: only spawned actors get a task
            raise ActorError(f"actor {self.name} is not spawned")
        return self._system


A = TypeVar("A", bound=Actor)


class ActorSystem:
    """Spawns actors by unique name, supervises crashes, and stops them all.

    A crash (an exception from `receive` that is not a refusal) is logged, the
    actor's `on_restart(error)` runs and the next message is handled. More than
    `max_restarts` crashes within `restart_window_s` (on the clock's monotonic time)
    and the actor is stopped instead: queued asks get ActorStopped, the failure is
    logged and `on_actor_failed(actor, error)` (sync or async) is called.
    """

    def __init__(
        self,
        clock: Clock,
        *,
        max_restarts: int = 5,
        restart_window_s: float = 60.0,
        on_actor_failed: FailureCallback | None = None,
    ) -> None:
        self.clock = clock
        self.restart_policy = RestartPolicy(clock, max_restarts, restart_window_s, on_actor_failed)
        self.ask_deadlines = AskDeadlines()
        self._actors: dict[str, Actor] = {}
        self._closing = False

    @property
    def actors(self) -> int:
        """How many actors are registered (running or still stopping)."""
        return len(self._actors)

    def spawn(self, actor: A) -> A:
        """Register `actor` and start it (its on_start runs before its first message)."""
        if self._closing:
            raise ActorStopped(actor.name, "the actor system is shutting down")
        if actor._state != _NEW:
            raise ActorError(f"actor {actor.name} was spawned or stopped before; create a new one")
        existing = self._actors.get(actor.name)
        if existing is not None and existing.alive:
            raise ActorError(f"an actor named {actor.name} is already running; stop it first")
        actor._system = self
        actor._state = _RUNNING
        self._actors[actor.name] = actor
        if type(actor).on_start is not Actor.on_start:
            actor._task = asyncio.create_task(actor._run(starting=True), name=actor.name)
        return actor

    def get(self, name: str) -> Actor | None:
        return self._actors.get(name)

    async def stop(self, actor: Actor, drain: bool = True) -> None:
        await actor.stop(drain)

    def stop_soon(self, actor: Actor, drain: bool = True) -> None:
        """Begin stopping `actor` without waiting (safe from inside its own receive)."""
        dropped = actor._begin_stop(drain)
        if dropped:
            log.info("actor stopped with queued messages", actor=actor.name, dropped=dropped)

    async def stop_all(self, drain: bool = True) -> None:
        """Stop every actor at once; no spawn is accepted from now on.

        Every actor stops accepting messages before any of them is awaited, so
        draining ones cannot refill each other's mailboxes: their tells to a
        stopping actor raise ActorStopped.
        """
        self._closing = True
        actors = list(self._actors.values())
        dropped = sum(actor._begin_stop(drain) for actor in actors)
        log.info("stopping all actors", actors=len(actors), drain=drain, dropped=dropped)
        tasks = [actor._task for actor in actors if actor._task is not None]
        if tasks:
            await asyncio.wait(tasks)

    # --- used by actors ------------------------------------------------------------------

    def _forget(self, actor: Actor) -> None:
        if self._actors.get(actor.name) is actor:
            del self._actors[actor.name]
