"""Cancelling a job, one job at a time, and nothing of a job left running after it."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest
from executor_testkit import Recorder, executor, gone, process_alive, script, spec

from tunefleet.agent import executor as executor_module
from tunefleet.agent.executor import ExecutorBusy
from tunefleet.errors import TunefleetError

# Ignores SIGTERM, starts a grandchild in its group, says where it is, then waits.
STUBBORN = """
    import signal, subprocess, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    print(f"ready {child.pid}", flush=True)
    time.sleep(60)
"""

POLITE = """
    import signal, sys, time
    def stop(signum, frame):
        print("got SIGTERM, saving", flush=True)
        sys.exit(143)
    signal.signal(signal.SIGTERM, stop)
    print("ready", flush=True)
    time.sleep(60)
"""


def ready_pid(rec: Recorder) -> int:
    return int(next(t for t in rec.texts() if t.startswith("ready ")).split()[1])


async def test_cancel_escalates_to_sigkill_for_the_whole_group(tmp_path: Path) -> None:
    rec = Recorder()
    ex = executor(tmp_path, grace_s=0.3)
    run = asyncio.create_task(ex.run(spec(script(STUBBORN)), rec))
    await rec.wait_until(lambda: any(t.startswith("ready ") for t in rec.texts()))
    grandchild = ready_pid(rec)
    assert process_alive(grandchild)
    await asyncio.wait_for(ex.cancel("cancelled by admin"), timeout=1)  # returns at once
    outcome = await asyncio.wait_for(run, timeout=10)
    assert outcome.status == "cancelled"
    assert outcome.error == "cancelled by admin"
    assert outcome.exit_code == -signal.SIGKILL
    assert await gone(rec.started[0].pid)
    assert await gone(grandchild)
    assert not ex.busy


async def test_cancel_lets_a_trainer_stop_gracefully_within_the_grace_period(
    tmp_path: Path,
) -> None:
    rec = Recorder()
    ex = executor(tmp_path, grace_s=30)
    run = asyncio.create_task(ex.run(spec(script(POLITE)), rec))
    await rec.wait_until(lambda: "ready" in rec.texts())
    await ex.cancel("user asked")
    outcome = await asyncio.wait_for(run, timeout=10)  # far less than the 30 s grace
    assert outcome.status == "cancelled"
    assert outcome.exit_code == 143
    assert "got SIGTERM, saving" in outcome.tail


async def test_cancelled_even_if_the_trainer_exits_zero_on_sigterm(tmp_path: Path) -> None:
    rec = Recorder()
    ex = executor(tmp_path)
    run = asyncio.create_task(ex.run(spec(script(POLITE.replace("exit(143)", "exit(0)"))), rec))
    await rec.wait_until(lambda: "ready" in rec.texts())
    await ex.cancel("stop")
    outcome = await asyncio.wait_for(run, timeout=10)
    assert (outcome.status, outcome.exit_code) == ("cancelled", 0)


async def test_cancel_twice_is_harmless(tmp_path: Path) -> None:
    rec = Recorder()
    ex = executor(tmp_path)
    run = asyncio.create_task(ex.run(spec(script(POLITE)), rec))
    await rec.wait_until(lambda: "ready" in rec.texts())
    await ex.cancel("first")
    await ex.cancel("second")
    outcome = await asyncio.wait_for(run, timeout=10)
    assert (outcome.status, outcome.error) == ("cancelled", "first")


async def test_cancel_with_nothing_running_does_nothing(tmp_path: Path) -> None:
    ex = executor(tmp_path)
    await ex.cancel("nothing to cancel")
    assert not ex.busy
    assert (await ex.run(spec(["true"]), Recorder())).status == "completed"


async def test_cancel_while_the_process_is_starting_still_stops_it(tmp_path: Path) -> None:
    rec = Recorder()
    ex = executor(tmp_path, grace_s=0.3)
    run = asyncio.create_task(ex.run(spec(script(STUBBORN)), rec))
    await asyncio.sleep(0)  # run() is inside the spawn: there is no process to signal yet
    assert ex.busy
    await ex.cancel("changed my mind")
    outcome = await asyncio.wait_for(run, timeout=10)
    assert (outcome.status, outcome.error) == ("cancelled", "changed my mind")
    assert outcome.exit_code is not None
    assert outcome.exit_code < 0  # SIGTERM before it could ignore it, or SIGKILL after
    assert await gone(rec.started[0].pid)


async def test_a_second_job_is_refused_while_one_runs(tmp_path: Path) -> None:
    rec = Recorder()
    ex = executor(tmp_path)
    run = asyncio.create_task(ex.run(spec(script(POLITE), job_id="j_a"), rec))
    await rec.wait_until(lambda: "ready" in rec.texts())
    assert ex.busy
    assert ex.current_job_id == "j_a"
    with pytest.raises(ExecutorBusy, match="already running job j_a") as raised:
        await ex.run(spec(["true"], job_id="j_b"), Recorder())
    assert isinstance(raised.value, TunefleetError)
    with pytest.raises(ExecutorBusy):  # the same job again is refused too
        await ex.run(spec(["true"], job_id="j_a"), Recorder())
    assert not (tmp_path / "jobs" / "j_b").exists()
    await ex.cancel("done testing")
    assert (await asyncio.wait_for(run, timeout=10)).status == "cancelled"
    assert not ex.busy
    assert ex.current_job_id is None
    assert (await ex.run(spec(["true"], job_id="j_b"), Recorder())).status == "completed"


async def test_leftover_processes_are_killed_when_the_main_process_exits(tmp_path: Path) -> None:
    body = """
        import subprocess, sys
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        print(f"ready {child.pid}", flush=True)
    """
    rec = Recorder()
    outcome = await asyncio.wait_for(executor(tmp_path).run(spec(script(body)), rec), timeout=10)
    assert outcome.status == "completed"
    assert await gone(ready_pid(rec))  # it held our stdout, and a GPU perhaps


async def test_cancelling_the_run_task_kills_the_job_at_once(tmp_path: Path) -> None:
    rec = Recorder()
    ex = executor(tmp_path, grace_s=30)
    run = asyncio.create_task(ex.run(spec(script(STUBBORN)), rec))
    await rec.wait_until(lambda: any(t.startswith("ready ") for t in rec.texts()))
    grandchild = ready_pid(rec)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(run, timeout=10)
    assert await gone(rec.started[0].pid)
    assert await gone(grandchild)
    assert not ex.busy


ESCAPED = """
    import subprocess, sys
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True
    )
    print(f"ready {child.pid}", flush=True)
"""


async def test_an_escaped_child_holding_the_pipes_cannot_hang_the_run_and_a_late_cancel_is_moot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(executor_module, "_DRAIN_TIMEOUT_S", 1.0)
    rec = Recorder()
    ex = executor(tmp_path)
    run = asyncio.create_task(ex.run(spec(script(ESCAPED)), rec))
    await rec.wait_until(lambda: any(t.startswith("ready ") for t in rec.texts()))
    escaped = ready_pid(rec)
    try:
        assert await gone(rec.started[0].pid)
        attempt = ex._attempt  # white box: wait until asyncio has seen the exit
        for _ in range(500):
            if attempt is None or attempt._proc is None or attempt._proc.returncode is not None:
                break
            await asyncio.sleep(0.01)
        assert not run.done()  # still waiting for the pipes the escaped child holds
        await ex.cancel("too late")
        outcome = await asyncio.wait_for(run, timeout=10)
        assert outcome.status == "completed"
        assert process_alive(escaped)  # out of the group, out of reach: documented
    finally:
        os.kill(escaped, signal.SIGKILL)
        # Once it is gone its pipes close and asyncio finishes the process transport,
        # which must happen before this test's event loop closes.
        assert await gone(escaped)
        await asyncio.sleep(0.1)


# --- preemption: the trainer's grace is the orchestrator's, and exit 0 completes ----------


async def test_a_preemption_gives_the_trainer_its_own_grace_before_sigkill(
    tmp_path: Path,
) -> None:
    rec = Recorder()
    ex = executor(tmp_path, grace_s=30)  # the executor's own grace would wait 30 s
    run = asyncio.create_task(ex.run(spec(script(STUBBORN)), rec))
    await rec.wait_until(lambda: any(t.startswith("ready ") for t in rec.texts()))
    await ex.cancel("preempted by alice", preempt_grace_s=0.3)
    outcome = await asyncio.wait_for(run, timeout=10)
    assert (outcome.status, outcome.error) == ("cancelled", "preempted by alice")
    assert outcome.exit_code == -signal.SIGKILL


async def test_a_preempted_trainer_that_checkpoints_and_exits_is_cancelled(
    tmp_path: Path,
) -> None:
    rec = Recorder()
    ex = executor(tmp_path, grace_s=0.1)  # a preemption's grace applies, not this one
    run = asyncio.create_task(
        ex.run(spec(script(POLITE.replace("sys.exit", "time.sleep(0.5); sys.exit"))), rec)
    )
    await rec.wait_until(lambda: "ready" in rec.texts())
    await ex.cancel("reclaim", preempt_grace_s=30)
    outcome = await asyncio.wait_for(run, timeout=10)
    assert (outcome.status, outcome.exit_code) == ("cancelled", 143)
    assert "got SIGTERM, saving" in outcome.tail


async def test_a_trainer_that_finishes_within_its_preemption_grace_completed(
    tmp_path: Path,
) -> None:
    rec = Recorder()
    ex = executor(tmp_path)
    run = asyncio.create_task(ex.run(spec(script(POLITE.replace("exit(143)", "exit(0)"))), rec))
    await rec.wait_until(lambda: "ready" in rec.texts())
    await ex.cancel("reclaim", preempt_grace_s=30)
    outcome = await asyncio.wait_for(run, timeout=10)
    assert (outcome.status, outcome.exit_code, outcome.error) == ("completed", 0, None)
