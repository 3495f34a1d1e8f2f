"""At submit: may this job run on the orchestrator's own machine, and as whom?

``target: local`` needs ``queue.local``; a submitter who controls the orchestrator
(``controls_orchestrator``) may then run as the orchestrator's own user, anyone else only
isolated, which this machine may not allow: that is a 400 saying why and what the
operator can do. ``auto`` falls back to local only where the job could run there, else it
waits for a remote worker. The decision is recorded on the job, so the local runner
applies it without the principal, after a restart too (tunefleet/actors/local_isolation.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from tunefleet.actors.context import FleetSettings
from tunefleet.actors.local_access import Blocked
from tunefleet.http.auth import QUEUE_LOCAL, require_api
from tunefleet.http.errors import ApiError
from tunefleet.http.orchestrator_control import controls_orchestrator
from tunefleet.http.route_table import principal_of


@dataclass(frozen=True, slots=True)
class LocalDecision:
    target: str  # as queued: auto becomes worker where it may not fall back to local
    local_unisolated: bool  # a local run may be as the orchestrator's own user


async def decide_local(request: web.Request, target: str, settings: FleetSettings) -> LocalDecision:
    principal = principal_of(request)
    controls = controls_orchestrator(principal)
    if target == "local":
        await require_api(request, QUEUE_LOCAL, needed_for="target local")
        if not settings.local_runner:
            off = settings.local_runner_off or "this orchestrator runs with --no-local-runner"
            raise ApiError(400, f"target local, but {off}; use target worker or auto")
        blocked = _refusal(settings, controls)
        if blocked is not None:
            raise ApiError(400, refusal_detail(blocked))
    elif target == "auto" and (
        not principal.has(QUEUE_LOCAL) or _refusal(settings, controls) is not None
    ):
        # auto's local fallback is running locally: without the right to, or where this
        # submitter's job could not run there, it waits for a remote worker.
        target = "worker"
    return LocalDecision(target, controls)


def refusal_detail(blocked: Blocked) -> str:
    return (
        "target local: a non-admin user's local job runs isolated, and here it cannot: "
        f"{blocked.why}. The operator can {blocked.fix}; else use target worker"
    )


def _refusal(settings: FleetSettings, controls: bool) -> Blocked | None:
    isolation = settings.local_isolation
    if not settings.local_runner or isolation is None:
        return None
    return isolation.refusal(controls)
