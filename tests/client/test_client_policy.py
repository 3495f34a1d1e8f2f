"""The client's pure parts: the wait backoff, waiting through an outage and up to a
timeout (a fake clock), and a followed log stream that reconnects where it broke."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tunefleet.client import operations as ops
from tunefleet.client.backoff import next_sleep, poll_delay
from tunefleet.client.errors import StreamFailed, Unavailable, Unreachable, WaitTimeout
from tunefleet.protocol.sse import SseEvent

positive = st.floats(min_value=0.01, max_value=100, allow_nan=False)


@given(
    polls=st.integers(min_value=-5, max_value=10_000),
    initial=positive,
    factor=st.floats(min_value=1.0, max_value=10.0),
    cap=positive,
)
def test_the_delay_starts_at_initial_grows_and_never_passes_the_cap(
    polls: int, initial: float, factor: float, cap: float
) -> None:
    delay = poll_delay(polls, initial_s=initial, factor=factor, max_s=cap)
    assert 0 < delay <= cap
    assert delay >= min(initial, cap)
    following = poll_delay(polls + 1, initial_s=initial, factor=factor, max_s=cap)
    assert following >= delay
    if polls <= 0:
        assert delay == min(initial, cap)


@given(polls=st.integers(min_value=0, max_value=100), remaining=st.floats(-10, 100))
def test_the_sleep_is_cut_to_what_is_left_of_the_timeout(polls: int, remaining: float) -> None:
    sleep = next_sleep(polls, remaining)
    assert 0 <= sleep <= max(0.0, remaining)
    assert next_sleep(polls, None) == poll_delay(polls)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


class Script:
    """GET answers from a list (an exception is raised); streams from a list of event
    lists (an exception there fails the stream after its events)."""

    def __init__(self, answers: list[Any], streams: list[list[Any]] | None = None) -> None:
        self.answers = answers
        self.streams = streams or []
        self.gets = 0
        self.opened: list[Any] = []

    async def get(self, path: str, params: Any = None) -> Any:
        answer = self.answers[min(self.gets, len(self.answers) - 1)]
        self.gets += 1
        if isinstance(answer, Exception):
            raise answer
        return answer

    @asynccontextmanager
    async def stream(self, path: str, params: Any = None, read_timeout_s: float = 0) -> Any:
        self.opened.append(dict(params or {}))
        script = self.streams.pop(0) if self.streams else [Unreachable("gone")]
        if script and isinstance(script[0], Exception) and len(script) == 1:
            raise script[0]

        async def replay() -> AsyncIterator[SseEvent]:
            for item in script:
                if isinstance(item, Exception):
                    raise item
                yield item

        yield replay()


def _job(status: str) -> dict[str, Any]:
    return {"job_id": "j_1", "status": status}


async def test_wait_backs_off_and_rides_out_an_outage() -> None:
    clock = Clock()
    lost = Unavailable(503, "starting")
    api = Script([_job("pending"), _job("running"), lost, Unreachable("refused"), _job("failed")])
    seen: list[str] = []
    job = await ops.wait(
        api,  # type: ignore[arg-type]
        "j_1",
        timeout_s=None,
        on_poll=lambda j: seen.append(j["status"]),
        clock=clock,
        sleep=clock.sleep,
    )
    assert job["status"] == "failed" and seen == ["pending", "running", "failed"]
    assert clock.slept == [poll_delay(n) for n in range(4)]


async def test_wait_gives_up_at_the_timeout_with_the_last_status() -> None:
    clock = Clock()
    api = Script([_job("running")])
    with pytest.raises(WaitTimeout) as late:
        await ops.wait(api, "j_1", timeout_s=10, clock=clock, sleep=clock.sleep)  # type: ignore[arg-type]
    assert late.value.job_status == "running" and late.value.timeout_s == 10
    assert clock.now == pytest.approx(10) and sum(clock.slept) == pytest.approx(10)


async def test_an_outage_past_the_timeout_raises_the_outage() -> None:
    clock = Clock()
    api = Script([_job("running"), Unreachable("refused")])
    with pytest.raises(Unreachable, match="refused"):
        await ops.wait(api, "j_1", timeout_s=5, clock=clock, sleep=clock.sleep)  # type: ignore[arg-type]


def _log(seq: int) -> SseEvent:
    return SseEvent(str(seq), "log", f'{{"seq": {seq}, "attempt": 1, "line": "l{seq}"}}')


async def test_a_followed_stream_reconnects_after_the_last_line_seen() -> None:
    clock = Clock()
    end = SseEvent(None, "end", '{"status": "completed"}')
    api = Script(
        [],
        [
            [_log(0), _log(1), StreamFailed("broke")],  # breaks after two lines
            [Unreachable("restarting")],  # cannot even open
            [_log(2)],  # ends without an `end`: early
            [_log(3), end],
        ],
    )
    follow = ops.follow_logs(api, "j_1", clock=clock, sleep=clock.sleep)  # type: ignore[arg-type]
    lines = [line async for line in follow]
    assert [line["seq"] for line in lines] == [0, 1, 2, 3]
    assert [opened["from_seq"] for opened in api.opened] == [0, 2, 2, 3]
    assert clock.slept == [1.0, 1.0, 1.0]  # one pause before each reconnect


async def test_a_stream_failing_past_the_window_raises() -> None:
    clock = Clock()
    api = Script([], [[Unreachable("gone")]] * 3)
    lines = ops.follow_logs(api, "j_1", reconnect_window_s=-1, clock=clock)  # type: ignore[arg-type]
    with pytest.raises(Unreachable, match="gone"):
        await lines.__anext__()


def test_the_client_room_needs_no_server_and_no_command_line() -> None:
    """A pipeline imports tunefleet.client alone: it reaches into the wire (protocol),
    tokens and errors, never the orchestrator's rooms or the CLI (click, rich)."""
    from tests.protocol.test_protocol_rooms import PACKAGE, imported_modules

    allowed = ("tunefleet.client", "tunefleet.protocol", "tunefleet.errors", "tunefleet.tokens")
    found = set()
    for path in (PACKAGE / "client").rglob("*.py"):
        for module in imported_modules(path):
            ours = module.startswith("tunefleet.") and module != "tunefleet.__version__"
            if ours and not module.startswith(allowed):
                found.add((path.name, module))
    assert found == set()
