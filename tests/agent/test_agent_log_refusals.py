"""What tunefleet's agent does with the orchestrator's answers to its log batches
(issue 23): a batch for an attempt that has ended (409) is dropped, never sent again; a
quota reached (200, ``quota_reached``) is no error; batches fit the 1 MiB body limit, and
one refused as too large (413) goes again in halves."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from tunefleet.agent.backoff import Backoff
from tunefleet.agent.client import RequestRejected
from tunefleet.agent.executor import LogLine
from tunefleet.agent.outbox import MAX_BATCH_BYTES, Outbox, Report, ReportSender


class Answers:
    """A ReportClient whose answer to each log batch the test scripts, by first seq."""

    def __init__(self, refusals: dict[int, RequestRejected] | None = None) -> None:
        self.refusals = refusals or {}
        self.sent: list[tuple[str, Any]] = []
        self.done = asyncio.Event()

    async def report_status(self, job_id: str, body: dict[str, Any]) -> None:
        self.sent.append(("status", body["status"]))
        self.done.set()

    async def send_logs(self, job_id: str, body: dict[str, Any]) -> None:
        seqs = [line["seq"] for line in body["lines"]]
        self.sent.append(("logs", seqs))
        refusal = self.refusals.pop(seqs[0], None)
        if refusal is not None:
            raise refusal
        # What the orchestrator answers once the quota is reached: a 200 like any other.


async def _deliver(outbox: Outbox, client: Answers) -> list[tuple[str, str, int | None]]:
    abandoned: list[tuple[str, str, int | None]] = []
    settled: list[Report] = []

    async def no_sleep(_: float) -> None:
        return None

    online = asyncio.Event()
    online.set()
    sender = ReportSender(
        outbox,
        client,
        online=online,
        backoff=Backoff(),
        sleep=no_sleep,
        on_abandon=lambda job, detail, attempt: abandoned.append((job, detail, attempt)),
        on_settled=settled.append,
    )
    task = asyncio.create_task(sender.run())
    await asyncio.wait_for(client.done.wait(), 5)
    await asyncio.wait_for(outbox.wait_empty(), 5)
    task.cancel()
    return abandoned


def _lines(first: int, count: int, text: str = "line") -> list[LogLine]:
    return [LogLine(n, "stdout", text, 0.0) for n in range(first, first + count)]


async def test_a_batch_for_an_ended_attempt_is_dropped_not_sent_again() -> None:
    ended = "attempt 1 of job j has ended (the job is on attempt 2); stop sending its logs"
    client = Answers({0: RequestRejected(409, ended, "logs for job j")})
    outbox = Outbox(max_batch_lines=2)
    outbox.add_logs("j", 1, _lines(0, 4))  # two batches of attempt 1
    outbox.add_logs("j", 2, _lines(0, 1))  # and one of attempt 2
    outbox.add_status("j", "completed", attempt=2)
    abandoned = await _deliver(outbox, client)
    # Sent once; attempt 1's other batch dropped with it; attempt 2's go on.
    assert client.sent == [("logs", [0, 1]), ("logs", [0]), ("status", "completed")]
    assert abandoned == [("j", ended, 1)]


async def test_a_quota_reached_is_not_an_error_and_later_reports_go_on() -> None:
    client = Answers()
    outbox = Outbox(max_batch_lines=2)
    outbox.add_logs("j", 1, _lines(0, 4))
    outbox.add_status("j", "completed", attempt=1)
    abandoned = await _deliver(outbox, client)
    assert client.sent == [("logs", [0, 1]), ("logs", [2, 3]), ("status", "completed")]
    assert abandoned == []


def test_batches_stay_under_the_body_limit_whatever_the_lines() -> None:
    outbox = Outbox()
    # 8 KiB lines of control characters: six bytes each as JSON escapes.
    outbox.add_logs("j", 1, _lines(0, 300, "\x01" * 8192))
    batches = outbox.pending()
    assert len(batches) > 1
    for batch in batches:
        assert len(json.dumps(batch.body).encode()) <= MAX_BATCH_BYTES
    assert sum(b.line_count for b in batches) == 300


async def test_a_batch_refused_as_too_large_goes_again_in_halves() -> None:
    too_large = RequestRejected(413, "request body over 1 MiB; send less", "logs for job j")
    client = Answers({0: too_large})
    outbox = Outbox()
    outbox.add_logs("j", 1, _lines(0, 8))
    outbox.add_status("j", "completed", attempt=1)
    abandoned = await _deliver(outbox, client)
    assert client.sent == [
        ("logs", list(range(8))),
        ("logs", [0, 1, 2, 3]),
        ("logs", [4, 5, 6, 7]),
        ("status", "completed"),
    ]
    assert abandoned == []
    assert outbox.max_batch_bytes < MAX_BATCH_BYTES  # later batches are that small too
