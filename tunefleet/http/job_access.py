"""Who may see and change a job: its user, its team's members, and admins see it; everyone
else is told it does not exist (404, never 403: no existence leak). A researcher cancels
their own jobs, a lead their teams' too, an admin (queue.admin) any.

Jobs stored before users existed belong to the user admin (migration 10); one with no
owner at all (made straight through storage) is an admin's to see.
"""

from __future__ import annotations

from aiohttp import web

from tunefleet.http import keys
from tunefleet.http.auth import QUEUE_ADMIN, ApiPrincipal, controls_orchestrator
from tunefleet.http.errors import ApiError
from tunefleet.http.route_table import principal_of
from tunefleet.storage.rows import JobRow
from tunefleet.storage.store_base import Viewer

LEAD_ROLE = "lead"


def viewer_of(principal: ApiPrincipal) -> Viewer | None:
    """The storage filter for what ``principal`` sees; None: everything (an admin)."""
    if controls_orchestrator(principal):
        return None
    return Viewer(principal.user, principal.teams)


def may_see(principal: ApiPrincipal, user_name: str | None, team_name: str | None) -> bool:
    if controls_orchestrator(principal):
        return True
    if user_name is not None and user_name == principal.user:
        return True
    return team_name is not None and team_name in principal.teams


def job_not_found(job_id: str) -> ApiError:
    return ApiError(404, f"Job not found: {job_id}")


async def visible_job(request: web.Request, job_id: str) -> JobRow:
    """The stored job, if the request's principal may see it; 404 the same way whether it
    does not exist or is someone else's."""
    row = await request.app[keys.STORE].get_job(job_id)
    if row is None or not may_see(principal_of(request), row.user_name, row.team_name):
        raise job_not_found(job_id)
    return row


def check_may_change(principal: ApiPrincipal, row: JobRow, action: str) -> None:
    """403 unless ``principal`` may cancel (or delete the outputs of) a job it can see."""
    if principal.has(QUEUE_ADMIN) or row.user_name == principal.user:
        return
    if principal.role == LEAD_ROLE and row.team_name in principal.teams:
        return
    owner = f"{row.user_name} (team {row.team_name})" if row.user_name else "another's"
    raise ApiError(
        403,
        f"Permission denied: job {row.id} is {owner}; a researcher may {action} only their "
        f"own jobs, a lead their team's, an admin (queue.admin) any",
    )


async def team_for_submit(request: web.Request, principal: ApiPrincipal, team: str | None) -> str:
    """The team a submission goes to: ``team`` when it is one of the submitter's (any
    existing team for an admin), else their default team."""
    if team is None:
        if principal.default_team is None:
            raise ApiError(
                403,
                f"user {principal.user} belongs to no team, and a job needs one; ask an "
                f"admin to add them (tunefleet teams add-member TEAM {principal.user})",
            )
        return principal.default_team
    if team in principal.teams:
        return team
    if await request.app[keys.STORE].users.team(team) is None:
        raise ApiError(404, f"unknown team: {team}; your teams: {_listed(principal.teams)}")
    if controls_orchestrator(principal):
        return team
    raise ApiError(
        403,
        f"Permission denied: user {principal.user} is not in team {team}; submit to one "
        f"of yours ({_listed(principal.teams)}) or ask an admin to add you",
    )


def _listed(teams: frozenset[str]) -> str:
    return ", ".join(sorted(teams)) or "none"


class SeenJobs:
    """For one event stream: whether each job its events name is the principal's to see.

    A job's owner never changes, so each job is looked up once per stream: in the live
    fleet first (no database read), else in storage."""

    _KEEP = 10_000  # answers kept per stream; a longer-lived one looks up again

    def __init__(self, request: web.Request, principal: ApiPrincipal) -> None:
        self._app = request.app
        self._principal = principal
        self._answers: dict[str, bool] = {}

    def known(self, job_id: str) -> bool | None:
        """The kept answer for ``job_id``, None when it is yet to be looked up: the feed
        asks this first, so an event of a job seen before costs no coroutine."""
        return self._answers.get(job_id)

    async def allows(self, job_id: str) -> bool:
        answer = self._answers.get(job_id)
        if answer is None:
            answer = await self._look_up(job_id)
            if len(self._answers) >= self._KEEP:
                self._answers.clear()
            self._answers[job_id] = answer
        return answer

    async def _look_up(self, job_id: str) -> bool:
        fleet = self._app.get(keys.FLEET)
        live = fleet.ctx.jobs.get(job_id) if fleet is not None else None
        if live is not None:
            return may_see(self._principal, live.rec.user_name, live.rec.team_name)
        row = await self._app[keys.STORE].get_job(job_id)
        return row is not None and may_see(self._principal, row.user_name, row.team_name)
