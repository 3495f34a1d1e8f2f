"""Logs and progress: batched, kept on disk, never stalled by a flood or a slow callback."""

from __future__ import annotations

import asyncio
from pathlib import Path

from executor_testkit import Recorder, executor, script, spec

from tunefleet.agent.executor import LogBatch, LogLine, ProgressReported
from tunefleet.agent.output import EventForwarder, LineSplitter
from tunefleet.agent.progress import ProgressTail, with_percent

WRITE_PROGRESS = """
    import json, os
    path = os.environ["TUNEFLEET_PROGRESS_FILE"]
    with open(path, "a") as f:
        f.write(json.dumps({"step": 1, "total": 4, "loss": 0.9}) + "\\n")
        f.write("not json\\n")
        f.write("[1, 2]\\n")
        f.write(json.dumps({"step": 2, "total": 4, "loss": 0.5, "grad_norm": 1.5}) + "\\n")
        f.write(json.dumps({"step": 3, "loss": 0.25}))  # last line without a newline
"""


async def test_progress_lines_are_merged_and_forwarded(tmp_path: Path) -> None:
    rec = Recorder()
    outcome = await executor(tmp_path).run(spec(script(WRITE_PROGRESS)), rec)
    assert outcome.status == "completed"
    assert rec.progress[-1] == {
        "step": 3,
        "total": 4,
        "loss": 0.25,
        "grad_norm": 1.5,
        "percent": 75.0,
    }
    # the two bad lines were counted and the trainer author is told in the job log
    assert "[tunefleet] 2 progress lines were not JSON objects and were ignored" in rec.texts()


async def test_progress_is_forwarded_while_the_job_runs(tmp_path: Path) -> None:
    go = tmp_path / "go"
    body = f"""
        import json, os, time
        with open(os.environ["TUNEFLEET_PROGRESS_FILE"], "a") as f:
            f.write(json.dumps({{"step": 1, "total": 10}}) + "\\n")
        for _ in range(1000):  # waits for the test, at most 10 s
            if os.path.exists({str(go)!r}):
                break
            time.sleep(0.01)
        else:
            raise SystemExit(5)
    """
    rec = Recorder()
    run = asyncio.create_task(executor(tmp_path).run(spec(script(body)), rec))
    await rec.wait_until(lambda: bool(rec.progress))
    assert rec.progress[0] == {"step": 1, "total": 10, "percent": 10.0}
    go.touch()
    assert (await run).status == "completed"


async def test_logs_are_batched_numbered_and_kept_on_disk(tmp_path: Path) -> None:
    body = """
        import sys
        for i in range(450):
            print(f"line {i}")
        print("warning: on stderr", file=sys.stderr)
        print("no newline at the end", end="")
    """
    rec = Recorder()
    outcome = await executor(tmp_path, log_batch_lines=100).run(spec(script(body)), rec)
    assert outcome.status == "completed"
    batches = [ev for ev in rec.events if isinstance(ev, LogBatch)]
    assert all(1 <= len(b.lines) <= 100 for b in batches)
    assert len(batches) >= 5
    lines = rec.log_lines
    assert [ln.seq for ln in lines] == list(range(1, 453))
    assert rec.texts("stdout") == [f"line {i}" for i in range(450)] + ["no newline at the end"]
    assert rec.texts("stderr") == ["warning: on stderr"]
    on_disk = (tmp_path / "jobs" / "j_1" / "attempt-1" / "output.log").read_text().splitlines()
    assert len(on_disk) == 452
    assert on_disk[0].endswith(" stdout: line 0")
    assert any(row.endswith(" stderr: warning: on stderr") for row in on_disk)


async def test_a_flood_with_a_slow_callback_neither_stalls_nor_loses_the_disk_copy(
    tmp_path: Path,
) -> None:
    body = """
        import sys
        out = sys.stdout
        for i in range(60000):
            out.write(f"flood line {i:06d} " + "x" * 40 + "\\n")
        out.write("y" * 100000 + "\\n")
        out.write("after the long line\\n")
    """
    rec = Recorder(delay_s=0.01)  # a slow orchestrator
    ex = executor(tmp_path, log_batch_lines=500, max_pending_lines=2000)
    outcome = await asyncio.wait_for(ex.run(spec(script(body)), rec), timeout=60)
    assert outcome.status == "completed"
    on_disk = (tmp_path / "jobs" / "j_1" / "attempt-1" / "output.log").read_text().splitlines()
    assert len(on_disk) == 60002
    assert on_disk[-1].endswith("stdout: after the long line")
    long_line = on_disk[-2].split("stdout: ", 1)[1]
    assert long_line == "y" * 8192 + " …[line truncated]"
    forwarded = rec.log_lines
    assert forwarded[-1].line == "after the long line"
    seqs = [ln.seq for ln in forwarded]
    assert seqs == sorted(seqs)
    assert len(set(seqs)) == len(seqs)
    notices = [ln.line for ln in forwarded if "not forwarded" in ln.line]
    assert notices, "lines were dropped from forwarding, and a notice says so"
    assert len(forwarded) < 60002


async def test_a_failing_callback_does_not_stop_the_job(tmp_path: Path) -> None:
    calls = 0

    async def broken(event: object) -> None:
        nonlocal calls
        calls += 1
        raise RuntimeError("orchestrator unreachable")

    outcome = await executor(tmp_path).run(spec(script("print('hello')")), broken)
    assert outcome.status == "completed"
    assert calls >= 2  # JobStarted and the log batch were both attempted
    assert "hello" in (tmp_path / "jobs/j_1/attempt-1/output.log").read_text()


def test_line_splitter_joins_chunks_and_strips_carriage_returns() -> None:
    splitter = LineSplitter(max_line_bytes=100)
    assert splitter.feed(b"hel") == []
    assert splitter.feed(b"lo\r\nwor") == ["hello"]
    assert splitter.feed(b"ld\n\n") == ["world", ""]
    assert splitter.feed(b"tail") == []
    assert splitter.finish() == ["tail"]
    assert splitter.finish() == []


def test_line_splitter_cuts_long_lines_and_skips_their_rest() -> None:
    splitter = LineSplitter(max_line_bytes=4)
    assert splitter.feed(b"abcdefgh") == ["abcd …[line truncated]"]
    assert splitter.feed(b"ijkl") == []
    assert splitter.feed(b"mn\nok\n") == ["ok"]
    assert splitter.feed(b"123456\nxy\n") == ["1234 …[line truncated]", "xy"]
    assert splitter.feed(b"toolong") == ["tool …[line truncated]"]
    assert splitter.finish() == []


def test_line_splitter_replaces_invalid_utf8() -> None:
    assert LineSplitter(100).feed(b"caf\xc3\xa9 \xff\n") == ["café \ufffd"]


def test_progress_tail_reads_increments_and_counts_malformed(tmp_path: Path) -> None:
    path = tmp_path / "progress.jsonl"
    tail = ProgressTail(path)
    assert tail.poll() is False  # no file yet
    path.write_text('{"step": 1, "tot')
    assert tail.poll() is False  # half a line waits for the rest
    with path.open("a") as f:
        f.write('al": 8}\n"string"\n{bad\n\n')
    assert tail.poll() is True
    assert tail.progress == {"step": 1, "total": 8, "percent": 12.5}
    assert tail.malformed == 2
    with path.open("a") as f:
        f.write('{"step": 1}\n')
    assert tail.poll() is False  # nothing changed
    with path.open("a") as f:
        f.write('{"loss": 0.3}')
    assert tail.poll() is False
    assert tail.poll(final=True) is True
    assert tail.progress["loss"] == 0.3


def test_progress_tail_survives_absurdly_deep_json(tmp_path: Path) -> None:
    path = tmp_path / "progress.jsonl"
    path.write_text("[" * 50_000 + "]" * 50_000 + '\n{"step": 2}\n')
    tail = ProgressTail(path)
    assert tail.poll() is True
    assert tail.malformed == 1
    assert tail.progress == {"step": 2}


def test_progress_tail_drops_an_endless_line(tmp_path: Path) -> None:
    path = tmp_path / "progress.jsonl"
    path.write_text("x" * 70_000)
    tail = ProgressTail(path)
    assert tail.poll() is False
    assert tail.malformed == 1


def test_percent_needs_numeric_step_and_positive_total() -> None:
    assert with_percent({"step": 5, "total": 20})["percent"] == 25.0
    assert with_percent({"step": 30, "total": 20})["percent"] == 100.0
    assert "percent" not in with_percent({"step": 5, "total": 0})
    assert "percent" not in with_percent({"step": True, "total": 2})
    assert "percent" not in with_percent({"step": "5", "total": 20})
    assert with_percent({"percent": 40}) == {"percent": 40}  # a trainer's own percent stays


async def test_forwarder_sends_events_in_order_and_notes_dropped_lines() -> None:
    rec = Recorder()
    fwd = EventForwarder(rec, batch_lines=2, interval_s=10.0, max_pending_lines=3)
    for seq in range(1, 6):
        fwd.add_line(LogLine(seq, "stdout", f"l{seq}", 0.0))
    fwd.set_progress({"step": 1})
    fwd.close()
    await asyncio.wait_for(fwd.run(), timeout=5)
    assert fwd.dropped_total == 2
    lines = rec.log_lines
    assert [ln.seq for ln in lines] == [2, 3, 4, 5]
    assert "2 lines not forwarded" in lines[0].line
    assert [ln.line for ln in lines[1:]] == ["l3", "l4", "l5"]
    assert isinstance(rec.events[-1], ProgressReported)
    assert [len(ev.lines) for ev in rec.events if isinstance(ev, LogBatch)] == [1, 2, 1]


async def test_forwarder_counts_callback_errors() -> None:
    async def broken(event: object) -> None:
        raise ValueError("nope")

    fwd = EventForwarder(broken, interval_s=10.0)
    fwd.set_progress({"step": 1})
    fwd.add_line(LogLine(1, "stdout", "x", 0.0))
    fwd.close()
    await asyncio.wait_for(fwd.run(), timeout=5)
    assert fwd.callback_errors == 2


async def test_forwarder_flushes_on_its_interval_while_running() -> None:
    rec = Recorder()
    fwd = EventForwarder(rec, batch_lines=100, interval_s=0.01)
    task = asyncio.create_task(fwd.run())
    fwd.add_line(LogLine(1, "stdout", "one", 0.0))  # far below a full batch
    await rec.wait_until(lambda: rec.texts() == ["one"])
    fwd.close()
    await asyncio.wait_for(task, timeout=5)
