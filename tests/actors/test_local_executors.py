"""Which executor a local job gets: the one its submission recorded, under the flags the
orchestrator runs with now; a job that can have neither fails saying why, and a cancel
that comes while the choice is being made is not lost."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tunefleet.actors.local_access import Blocked
from tunefleet.actors.local_executors import LocalExecutors
from tunefleet.actors.local_isolation import LocalIsolation, LocalMode
from tunefleet.agent.job_events import JobOutcome, JobSpec
from tunefleet.agent.job_files import RunAs

NOBODY = RunAs("nobody", 65534, 65534)
NO_ROOT = Blocked("the orchestrator is not root", "start it as root")


class Recording:
    def __init__(self, name: str) -> None:
        self.name = name
        self.ran: list[str] = []
        self.allowed_commands = None

    async def run(self, spec: JobSpec, on_event: Any) -> JobOutcome:
        self.ran.append(spec.job_id)
        return JobOutcome("completed", 0, None, [])

    async def cancel(self, reason: str = "cancelled", preempt_grace_s: float | None = None) -> None:
        raise AssertionError("nothing of this executor's was running")


def isolation(mode: LocalMode, run_as: RunAs | None, blocked: Blocked | None) -> LocalIsolation:
    return LocalIsolation(mode, "root", run_as, blocked, Path("/w"), Path("/w/own-user"))


def executors(
    decided: LocalIsolation, recorded: dict[str, bool]
) -> tuple[LocalExecutors, Recording, Recording]:
    own, isolated = Recording("own"), Recording("isolated")

    async def recorded_unisolated(job_id: str) -> bool:
        return recorded[job_id]

    chooser = LocalExecutors(
        decided,
        own_user=own if decided.runs_unisolated_jobs else None,
        isolated=isolated if decided.run_as is not None else None,
        recorded_unisolated=recorded_unisolated,
        allowed_commands=("**",),
    )
    return chooser, own, isolated


def spec(job_id: str) -> JobSpec:
    return JobSpec(job_id=job_id, attempt=1, config={})


async def nothing(_event: object) -> None:
    return None


async def test_each_job_gets_the_executor_its_submission_recorded() -> None:
    chooser, own, isolated = executors(
        isolation(LocalMode.PER_SUBMITTER, NOBODY, None), {"j_admin": True, "j_other": False}
    )
    assert (await chooser.run(spec("j_admin"), nothing)).status == "completed"
    assert (await chooser.run(spec("j_other"), nothing)).status == "completed"
    assert (own.ran, isolated.ran) == (["j_admin"], ["j_other"])


async def test_isolated_only_isolates_a_job_recorded_unisolated() -> None:
    chooser, own, isolated = executors(
        isolation(LocalMode.ISOLATED_ONLY, NOBODY, None), {"j_admin": True}
    )
    await chooser.run(spec("j_admin"), nothing)
    assert (own.ran, isolated.ran) == ([], ["j_admin"])


async def test_a_job_that_must_run_isolated_where_it_cannot_fails_saying_why() -> None:
    chooser, own, _ = executors(
        isolation(LocalMode.PER_SUBMITTER, None, NO_ROOT), {"j_other": False}
    )
    outcome = await chooser.run(spec("j_other"), nothing)
    assert (outcome.status, outcome.exit_code) == ("failed", None)
    assert outcome.error == (
        "refused by this worker: this job must run isolated from the orchestrator, and the "
        "orchestrator is not root"
    )
    assert own.ran == []


async def test_a_cancel_while_the_choice_is_made_cancels_the_job_unstarted() -> None:
    looked_up = asyncio.Event()
    release = asyncio.Event()
    own = Recording("own")

    async def slow_lookup(_job_id: str) -> bool:
        looked_up.set()
        await release.wait()
        return True

    chooser = LocalExecutors(
        isolation(LocalMode.PER_SUBMITTER, None, NO_ROOT),
        own_user=own,
        isolated=None,
        recorded_unisolated=slow_lookup,
        allowed_commands=None,
    )
    running = asyncio.create_task(chooser.run(spec("j_1"), nothing))
    await looked_up.wait()
    await chooser.cancel("cancelled by alice")
    release.set()
    outcome = await running
    assert (outcome.status, outcome.error) == ("cancelled", "cancelled by alice")
    assert own.ran == []
