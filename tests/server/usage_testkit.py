"""Attempts written straight to storage at chosen times, for the usage and budget tests."""

from __future__ import annotations

from tests.server.conftest import Server

T = 1_700_000_000.0  # the FakeClock's start: 2023-11-14 22:13:20 UTC
MIDNIGHT = 1_700_006_400.0  # 2023-11-15 00:00 UTC


async def record_attempt(
    server: Server,
    job_id: str,
    user: str,
    team: str,
    gpus: int,
    start: float,
    end: float | None,
    outcome: str = "failed",
) -> None:
    store = server.store
    if await store.get_job(job_id) is None:
        await store.create_job(job_id, config={}, user_name=user, team_name=team, gpu_count=gpus)
    number = len(await store.list_attempts(job_id)) + 1
    await store.start_attempt(job_id, number, worker_id="w", dispatched_at=start)
    if end is not None:
        await store.end_attempt(job_id, number, outcome=outcome, ended_at=end)
