"""The outbox: order, progress coalescing, log batching and its memory bound."""

from __future__ import annotations

import asyncio

from tunefleet.agent.executor import LogLine
from tunefleet.agent.outbox import Outbox


def lines(start: int, count: int) -> list[LogLine]:
    return [LogLine(n, "stdout", f"line {n}", 0.0) for n in range(start, start + count)]


def shape(outbox: Outbox) -> list[tuple[str, object]]:
    out: list[tuple[str, object]] = []
    for report in outbox.pending():
        if report.kind == "logs":
            out.append(("logs", [line["seq"] for line in report.body["lines"]]))
        else:
            out.append((report.body["status"], report.body["progress"]))
    return out


def test_progress_replaces_the_unsent_running_report_and_logs_join_the_tail() -> None:
    outbox = Outbox()
    outbox.add_status("j", "starting")
    outbox.add_status("j", "running")
    outbox.add_logs("j", 1, lines(1, 2))
    outbox.add_progress("j", {"step": 1})
    outbox.add_logs("j", 1, lines(3, 1))
    outbox.add_status("j", "failed", error="boom")
    outbox.add_progress("j", {"step": 2})  # after the final report: dropped
    outbox.add_logs("j", 1, lines(4, 1))  # the tail is a status now: a new batch
    assert shape(outbox) == [
        ("starting", None),
        ("running", {"step": 1}),
        ("logs", [1, 2, 3]),
        ("failed", None),
        ("logs", [4]),
    ]


def test_progress_after_a_delivered_running_report_gets_its_own() -> None:
    outbox = Outbox()
    outbox.add_status("j", "running")
    outbox.remove(outbox.pending()[0])  # delivered
    outbox.add_logs("j", 1, lines(1, 1))
    outbox.add_progress("j", {"step": 5})
    outbox.add_progress("j", {"step": 6})
    assert shape(outbox) == [("logs", [1]), ("running", {"step": 6})]


def test_a_report_in_flight_is_never_changed() -> None:
    outbox = Outbox()
    outbox.add_status("j", "running", progress={"step": 1})
    outbox.add_logs("j", 1, lines(1, 1))
    head = outbox.head()
    assert head is not None
    head.in_flight = True
    outbox.add_progress("j", {"step": 2})
    assert head.body["progress"] == {"step": 1}
    assert shape(outbox)[-1] == ("running", {"step": 2})


def test_log_batches_are_capped_and_the_oldest_lines_dropped_past_the_limit() -> None:
    outbox = Outbox(max_batch_lines=4, max_log_lines=10)
    outbox.add_status("j", "running")
    outbox.add_logs("j", 1, lines(1, 6))
    assert shape(outbox)[1:] == [("logs", [1, 2, 3, 4]), ("logs", [5, 6])]
    outbox.add_logs("j", 1, lines(7, 8))
    kept = [seq for kind, seqs in shape(outbox)[1:] for seq in seqs]  # type: ignore[attr-defined]
    assert kept == list(range(5, 15))  # lines 1-4 were dropped, the newest 10 kept
    assert outbox.dropped_log_lines == 4
    assert shape(outbox)[0] == ("running", None)  # status reports are never dropped


def test_drop_job_and_disable_logs() -> None:
    outbox = Outbox()
    outbox.add_status("a", "running")
    outbox.add_logs("a", 1, lines(1, 1))
    outbox.add_status("b", "starting")
    outbox.add_logs("b", 1, lines(1, 1))
    assert outbox.drop_job("a") == 2
    assert outbox.disable_logs() == 1
    outbox.add_logs("b", 1, lines(2, 1))
    assert shape(outbox) == [("starting", None)]
    assert outbox.holds_final("b") is False
    outbox.add_status("b", "failed", error="boom")
    assert outbox.holds_final("b") is True


async def test_waiters_wake_on_items_and_on_empty() -> None:
    outbox = Outbox()
    taker = asyncio.create_task(outbox.next())
    await asyncio.sleep(0)
    assert not taker.done()
    outbox.add_status("j", "starting")
    report = await asyncio.wait_for(taker, 1)
    emptied = asyncio.create_task(outbox.wait_empty())
    await asyncio.sleep(0)
    assert not emptied.done()
    outbox.remove(report)
    await asyncio.wait_for(emptied, 1)
    assert len(outbox) == 0
