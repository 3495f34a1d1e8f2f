"""The orchestrator's role on PostgreSQL: active, standby, or stepped down.

On SQLite there is no election (one process per database, see storage/process_lock.py)
and the role is always "active". On PostgreSQL the process starts a LeaseKeeper
(storage/leadership.py): when it holds the lease the fleet is built from storage, as
after a restart, and served; until then every API and worker request is answered 503
with the active orchestrator's advertised URL, so a client or a load balancer moves on.
A process that loses its term (its lease was taken while it was paused or cut off from
the database) refuses all writes from then on and steps down: the real server exits
with code 3 so that its supervisor starts it again, as a standby.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, Final, Literal

import peewee as pw
import structlog
from aiohttp import web
from aiohttp.typedefs import Handler

from tunefleet.protocol.endpoints import StandbyRefusal
from tunefleet.storage.database import Database
from tunefleet.storage.leadership import (
    LeadershipLost,
    LeaseKeeper,
    LeaseView,
    fence,
    new_holder_id,
)

log = structlog.get_logger(__name__)

Role = Literal["active", "standby", "activating", "stepped_down"]
STEPPED_DOWN_EXIT_CODE: Final = 3
# Answered on any role: a load balancer's and an operator's view of the process.
OPEN_PATHS: Final = frozenset({"/healthz", "/readyz", "/metrics"})
FIRST_CLAIM_WAIT_S: Final = 2.0


class Leadership:
    """This process's role, and on PostgreSQL the lease that decides it."""

    def __init__(
        self,
        db: Database,
        *,
        advertise_url: str,
        lease_s: float,
        on_step_down: Callable[[str], None] | None = None,
    ) -> None:
        self.db = db
        self.advertise_url = advertise_url
        self.lease_s = lease_s
        self.elected = db.backend == "postgresql"
        self.role: Role = "standby" if self.elected else "active"
        self.term: int | None = None
        self.active_url: str | None = None if self.elected else advertise_url
        self.step_down_reason: str | None = None
        self._on_step_down = on_step_down
        self._keeper: LeaseKeeper | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._first_attempt = asyncio.Event()
        self._acquired = asyncio.Event()
        self._active = asyncio.Event()
        self._activation: asyncio.Task[None] | None = None

    def view(self) -> dict[str, Any]:
        """What /healthz says about the role."""
        return {
            "role": self.role,
            "term": self.term,
            "active_url": self.active_url,
            **({"reason": self.step_down_reason} if self.step_down_reason else {}),
        }

    async def start(self, activate: Callable[[], Awaitable[None]]) -> None:
        """Become active now (SQLite, or a free lease) or stand by and take over later."""
        if not self.elected:
            await activate()
            self._active.set()
            return
        self._loop = asyncio.get_running_loop()
        self._keeper = LeaseKeeper(
            self.db.config,
            holder=new_holder_id(),
            advertise_url=self.advertise_url,
            lease_s=self.lease_s,
            on_acquired=lambda term: self._from_thread(self._on_acquired, term),
            on_lost=lambda reason: self._from_thread(self.step_down, reason),
            on_observed=lambda view: self._from_thread(self._on_observed, view),
        )
        self._keeper.start()
        # The first claim decides whether the server starts active, as it always did.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._first_attempt.wait(), FIRST_CLAIM_WAIT_S)
        if self._acquired.is_set():
            await self._activate(activate)
        else:
            log.info("leadership.standby", active_url=self.active_url)
            self._activation = asyncio.create_task(self._take_over_later(activate))

    async def wait_active(self) -> None:
        await self._active.wait()

    async def close(self) -> None:
        """After the fleet has stopped: stop renewing and release the lease."""
        if self._activation is not None:
            self._activation.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._activation
        if self._keeper is not None:
            release = self.role == "active"
            await asyncio.to_thread(self._keeper.stop, release_lease=release)

    def step_down(self, reason: str) -> None:
        """Our term is over: refuse everything from now on, and let the process end."""
        if self.role == "stepped_down":
            return
        log.error("leadership.stepped_down", term=self.term, reason=reason)
        self.role = "stepped_down"
        self.step_down_reason = reason
        self.db.set_write_fence(_refuse_all)
        if self._on_step_down is not None:
            self._on_step_down(reason)

    # --- on the event loop --------------------------------------------------------------

    def _from_thread(self, fn: Callable[..., None], *args: Any) -> None:
        if self._loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody listens
                self._loop.call_soon_threadsafe(fn, *args)

    def _on_observed(self, view: LeaseView | None) -> None:
        self._first_attempt.set()
        if view is not None:
            self.active_url = view.advertise_url

    def _on_acquired(self, term: int) -> None:
        self.term = term
        self.active_url = self.advertise_url
        self.role = "activating"
        self.db.set_write_fence(self._fence_for(term))
        self._acquired.set()
        self._first_attempt.set()

    def _fence_for(self, term: int) -> Callable[[pw.Database], None]:
        lease_s = self.lease_s

        def check(database: pw.Database) -> None:  # on the DB thread
            try:
                fence(database, term, lease_s)
            except LeadershipLost as lost:
                self._from_thread(self.step_down, str(lost))
                raise

        return check

    async def _take_over_later(self, activate: Callable[[], Awaitable[None]]) -> None:
        await self._acquired.wait()
        try:
            await self._activate(activate)
        except Exception as error:  # holding the lease without serving would be an outage
            log.exception("leadership.take_over_failed")
            self.step_down(f"taking over failed: {type(error).__name__}: {error}")

    async def _activate(self, activate: Callable[[], Awaitable[None]]) -> None:
        log.info("leadership.taking_over", term=self.term)
        try:
            await activate()
        except LeadershipLost as lost:
            self.step_down(str(lost))
            return
        if self.role == "activating":
            self.role = "active"
            self._active.set()
            log.info("leadership.active", term=self.term, advertise_url=self.advertise_url)


def _refuse_all(database: pw.Database) -> None:
    raise LeadershipLost("this orchestrator stepped down: it no longer writes anything")


async def answer_inactive(
    request: web.Request, handler: Handler, current: Leadership
) -> web.StreamResponse:
    """A process that is not active answers 503 naming the active one; health, metrics and
    the UI's files are still served (``front_door`` calls this once the role is not
    "active")."""
    path = request.path
    if path in OPEN_PATHS or path.startswith("/static/"):
        return await handler(request)  # the UI's files are the same everywhere
    if path == "/" and request.method == "GET":
        elsewhere = current.active_url and current.active_url != current.advertise_url
        if elsewhere:  # a browser opening the UI here is sent to the active one's
            raise web.HTTPTemporaryRedirect(f"{current.active_url}{request.path_qs}")
        return await handler(request)  # its API calls then say why nothing answers
    refusal = StandbyRefusal(detail=refusal_detail(current), active_url=current.active_url)
    return web.json_response(
        refusal.model_dump(),
        status=503,
        headers={"Retry-After": "1"},
    )


def refusal_detail(leadership: Leadership) -> str:
    where = (
        f"the active orchestrator is at {leadership.active_url}"
        if leadership.active_url and leadership.active_url != leadership.advertise_url
        else "no active orchestrator is known yet"
    )
    if leadership.role == "activating":
        return "this orchestrator is taking over as the active one: retry in a moment"
    if leadership.role == "stepped_down":
        return f"this orchestrator stepped down (its leadership term ended); {where}"
    return f"this orchestrator is a standby; {where}: send requests there"
