"""The command line's pure parts: times, local configs, the follow panel and its state,
the fall-back to polling, and how HTTP statuses become messages and exit codes."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from tunefleet.cli import follow
from tunefleet.cli.exit_codes import ExitCode, exit_code_of
from tunefleet.cli.follow import JobWatch, RateMeter, follow_job, outcome_exit_code
from tunefleet.cli.follow_view import LineReporter, final_line, render, state_line
from tunefleet.cli.jobs import attempts_text
from tunefleet.cli.main import cli
from tunefleet.cli.output import STATUS_STYLES, duration, no_match, relative_time
from tunefleet.client.errors import (
    CLI_SPELLING,
    ApiError,
    Forbidden,
    NotFound,
    StreamFailed,
    Unavailable,
    Unreachable,
    status_error,
)
from tunefleet.client.local_config import LocalConfigError, resolve
from tunefleet.client.transport import query
from tunefleet.fsm import JobState, WorkerState
from tunefleet.protocol.sse import SseEvent

NOW = datetime(2024, 1, 15, 10, 30, tzinfo=UTC)


@pytest.mark.parametrize(
    ("ago", "text"),
    [
        (timedelta(seconds=2), "just now"),
        (timedelta(seconds=45), "45 s ago"),
        (timedelta(minutes=2, seconds=10), "2 min ago"),
        (timedelta(hours=3, minutes=5), "3 h ago"),
        (timedelta(days=4, hours=1), "4 d ago"),
        (timedelta(minutes=-2), "in 2 min"),
    ],
)
def test_relative_time(ago: timedelta, text: str) -> None:
    moment = (NOW - ago).isoformat().replace("+00:00", "Z")
    assert relative_time(moment, now=NOW) == text


def test_relative_time_of_nothing_or_garbage_is_a_dash() -> None:
    assert relative_time(None, now=NOW) == "-"
    assert relative_time("not a time", now=NOW) == "-"


def test_no_match_names_the_filters_and_keeps_the_hint_without_any() -> None:
    hint = "No jobs. Submit one with: tunefleet jobs submit CONFIG"
    assert no_match("job", {"--status": (), "--target": None}, hint) == hint
    filters = {"--status": ("running", "failed"), "--target": None, "--worker": "w_1"}
    assert (
        no_match("job", filters, hint)
        == "No job matches --status running --status failed --worker w_1."
    )


def test_duration() -> None:
    assert duration(3.25) == "3.2 s"
    assert duration(42) == "42 s"
    assert duration(185) == "3 min 5 s"
    assert duration(7_800) == "2 h 10 min"
    assert duration(7_800, coarse=True) == "2 h"
    assert duration(float("inf")) == "-"


# --- local configs --------------------------------------------------------------------


def test_a_name_that_is_no_local_path_is_sent_by_name(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.chdir(tmp_path)
    assert resolve("team/exp-1.2").body() == {"config_name": "team/exp-1.2"}


def test_local_config_errors(tmp_path: Path) -> None:
    with pytest.raises(LocalConfigError, match="no such file"):
        resolve(str(tmp_path / "missing.json"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(LocalConfigError, match=r"folder without config\.json"):
        resolve(str(tmp_path / "empty"))
    listing = tmp_path / "list.yaml"
    listing.write_text("- 1\n- 2\n")
    with pytest.raises(LocalConfigError, match="must be a mapping"):
        resolve(str(listing))
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(LocalConfigError, match="invalid JSON"):
        resolve(str(broken))


# --- the follow panel -----------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_rate_meter_rate_eta_and_restart() -> None:
    clock = FakeClock()
    meter = RateMeter(window_s=30.0, clock=clock)
    assert meter.rate() is None
    meter.add(10)
    clock.now += 2.0
    meter.add(20)
    assert meter.rate() == 5.0
    assert meter.eta_s(20, 120) == 20.0
    meter.add(3)  # a retry starts from an earlier step
    assert meter.rate() is None


def _running_watch() -> JobWatch:
    clock = FakeClock()
    watch = JobWatch("j_1", rate=RateMeter(clock=clock))
    watch.apply_detail(
        {"status": "running", "name": "tiny", "worker_id": "w_9", "attempts": 2, "max_retries": 3,
         "progress": {"step": 10, "total": 40, "loss": 0.5}}
    )  # fmt: skip
    clock.now += 2.0
    watch.apply_event("job_progress", {"job_id": "j_1", "progress": {"step": 14, "total": 40,
                                                                     "loss": 0.25}})  # fmt: skip
    watch.log_tail.extend(["step 13/40 loss 0.3", "step 14/40 loss 0.25"])
    return watch


def test_render_shows_state_worker_attempt_bar_rate_eta_and_log_tail() -> None:
    out = Console(record=True, width=120, force_terminal=True)
    out.print(render(_running_watch()))
    text = out.export_text()
    assert "j_1  tiny  running on w_9, attempt 2 of 4" in text
    assert "step 14/40 (35%), loss 0.25, 2 steps/s, ETA 13 s" in text
    assert "━" in text  # the bar
    assert text.rstrip().endswith("step 14/40 loss 0.25")


def test_the_attempt_counts_retries_spent_and_the_undelivered_apart() -> None:
    """A dispatch that never reached its worker spends no retry: its third dispatch after
    two undelivered ones is attempt 1 of 4, as `jobs list` says, from the detail and from
    the live events alike."""
    watch = JobWatch("j_1")
    watch.apply_detail(
        {"status": "running", "worker_id": "w_9", "attempts": 3, "undelivered": 2,
         "max_retries": 3}
    )  # fmt: skip
    assert state_line(watch) == "j_1 running on w_9, attempt 1 of 4 (2 not delivered)"
    # Live: requeued undelivered once more, then dispatched again.
    watch.apply_event("job", {"status": "pending", "attempt": 3, "undelivered": 3})
    watch.apply_event("job", {"status": "dispatched", "worker_id": "w_2", "attempt": 4,
                              "undelivered": 3})  # fmt: skip
    assert state_line(watch) == "j_1 dispatched to w_2, attempt 1 of 4 (3 not delivered)"
    # A retry after a lost worker: attempt 2.
    watch.apply_event("job", {"status": "running", "worker_id": "w_2", "attempt": 5,
                              "undelivered": 3})  # fmt: skip
    assert state_line(watch) == "j_1 running on w_2, attempt 2 of 4 (3 not delivered)"
    # Preempted, then dispatched again: still attempt 2.
    watch.apply_event("job", {"status": "running", "worker_id": "w_3", "attempt": 6,
                              "undelivered": 3, "preempted": 1})  # fmt: skip
    assert state_line(watch) == "j_1 running on w_3, attempt 2 of 4 (3 not delivered, 1 preempted)"
    # Its worker OOM-killed, then dispatched again: an infrastructure failure, still 2.
    watch.apply_event("job", {"status": "running", "worker_id": "w_4", "attempt": 7,
                              "undelivered": 3, "preempted": 1,
                              "infrastructure_failures": 1})  # fmt: skip
    assert state_line(watch) == (
        "j_1 running on w_4, attempt 2 of 4 (3 not delivered, 1 preempted, 1 infrastructure)"
    )


def test_render_pending_says_why_it_waits() -> None:
    watch = JobWatch("j_2")
    watch.apply_detail({"status": "pending", "queue_position": 3, "wait_reason": "no worker"})
    out = Console(record=True, width=120)
    out.print(render(watch))
    assert "j_2  pending, position 3: no worker" in out.export_text()


def test_line_reporter_prints_changes_and_progress_every_ten_percent() -> None:
    buffer = io.StringIO()
    reporter = LineReporter(Console(file=buffer, width=200), show_logs=True)
    watch = JobWatch("j_3")
    for step in (0, 1, 2, 2, 5, 5.5, 6, 10):  # 2 and 5.5 add no new tenth
        watch.apply_detail({"status": "running", "worker_id": "w_1", "attempts": 1,
                            "progress": {"step": step, "total": 10}})  # fmt: skip
        reporter.update(watch)
    reporter.log_line(watch, {"line": "hello [bold]x[/bold]"})
    lines = buffer.getvalue().splitlines()
    assert lines[0] == "j_3 running on w_1, attempt 1"
    assert [line.split()[2] for line in lines[1:-1]] == [
        "0/10",
        "1/10",
        "2/10",
        "5/10",
        "6/10",
        "10/10",
    ]
    assert lines[-1] == "hello [bold]x[/bold]"  # log lines are never read as markup


def test_final_lines() -> None:
    base = {"job_id": "j_4", "worker_id": "w_1", "started_at": "2024-01-15T10:30:00Z",
            "finished_at": "2024-01-15T10:31:05Z", "attempts": 2}  # fmt: skip
    done = final_line({**base, "status": "completed", "progress": {"step": 9, "total": 9,
                                                                  "loss": 0.01}})  # fmt: skip
    assert done == "j_4 completed on w_1 in 1 min 5 s: step 9/9, loss 0.01"
    failed = final_line({**base, "status": "failed", "error": "exit code 3"})
    assert failed == "j_4 failed on w_1 after 2 attempt(s): exit code 3"
    assert final_line({**base, "status": "cancelled", "error": None}) == (
        "j_4 cancelled on w_1: by request"
    )


def test_outcome_exit_codes() -> None:
    assert outcome_exit_code("completed") == ExitCode.OK == 0
    assert outcome_exit_code("failed") == ExitCode.FAILED == 1
    assert outcome_exit_code("cancelled") == ExitCode.CANCELLED == 3


# --- following without a live feed -----------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.states: list[str] = []
        self.notes: list[str] = []

    def update(self, watch: JobWatch) -> None:
        self.states.append(watch.status)
        if watch.note:
            self.notes.append(watch.note)

    def log_line(self, watch: JobWatch, line: dict[str, Any]) -> None:
        return None


class FakeApi:
    """GET answers from a script; the event stream fails to open, or replays events."""

    def __init__(self, details: list[Any], events: list[SseEvent] | None = None) -> None:
        self.details = details
        self.events = events
        self.gets = 0

    async def get(self, path: str, params: Any = None) -> Any:
        answer = self.details[min(self.gets, len(self.details) - 1)]
        self.gets += 1
        if isinstance(answer, Exception):
            raise answer
        return answer

    @asynccontextmanager
    async def stream(self, path: str, params: Any = None, read_timeout_s: float = 0) -> Any:
        if self.events is None:
            raise StreamFailed("no feed here")

        async def replay() -> AsyncIterator[SseEvent]:
            for event in self.events or []:
                yield event

        yield replay()


@pytest.fixture
def fast_polls(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(follow, "POLL_INTERVAL_S", 0.001)
    yield


def _job(status: str, **extra: Any) -> dict[str, Any]:
    return {"job_id": "j_5", "status": status, **extra}


async def test_without_the_event_feed_it_polls_until_the_end(fast_polls: None) -> None:
    api = FakeApi([_job("pending"), _job("running"), _job("running"), _job("completed")])
    recorder = Recorder()
    final = await follow_job(api, "j_5", recorder, logs=False)  # type: ignore[arg-type]
    assert final["status"] == "completed"
    assert recorder.states[-1] == "completed" and "running" in recorder.states
    assert "polling every" in recorder.notes[0] and "no feed here" in recorder.notes[0]


async def test_polling_rides_out_a_short_outage(fast_polls: None) -> None:
    lost = Unreachable("connection refused")
    api = FakeApi([_job("running"), lost, lost, _job("cancelled"), _job("cancelled")])
    recorder = Recorder()
    final = await follow_job(api, "j_5", recorder, logs=False)  # type: ignore[arg-type]
    assert final["status"] == "cancelled"
    assert any(note.startswith("retrying: connection refused") for note in recorder.notes)


async def test_polling_gives_up_after_the_reconnect_window(
    fast_polls: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(follow, "RECONNECT_WINDOW_S", 0.0)
    api = FakeApi([_job("running"), Unreachable("gone")])
    with pytest.raises(Unreachable, match="gone"):
        await follow_job(api, "j_5", Recorder(), logs=False)  # type: ignore[arg-type]


async def test_events_for_other_jobs_are_ignored() -> None:
    events = [
        SseEvent(None, "hello", '{"type": "hello"}'),
        SseEvent("1", "job", '{"job_id": "j_other", "status": "failed"}'),
        SseEvent("2", "job_progress", '{"job_id": "j_5", "progress": {"step": 3, "total": 9}}'),
        SseEvent("3", "worker", '{"worker": {}}'),
        SseEvent("4", "job", '{"job_id": "j_5", "status": "completed", "worker_id": "w_1"}'),
    ]
    api = FakeApi([_job("running"), _job("running"), _job("completed")], events)
    recorder = Recorder()
    final = await follow_job(api, "j_5", recorder, logs=False)  # type: ignore[arg-type]
    assert final["status"] == "completed"
    assert "failed" not in recorder.states
    assert recorder.notes == []  # the feed worked: no polling


async def test_a_feed_that_closes_early_falls_back_to_polling(fast_polls: None) -> None:
    events = [SseEvent(None, "hello", "{}")]
    api = FakeApi([_job("running"), _job("running"), _job("completed")], events)
    recorder = Recorder()
    final = await follow_job(api, "j_5", recorder, logs=False)  # type: ignore[arg-type]
    assert final["status"] == "completed"
    assert "closed the event stream" in recorder.notes[0]


# --- statuses as messages ----------------------------------------------------------------


def test_status_errors_become_messages_and_exit_codes() -> None:
    def error(token: str | None, status: int, detail: str) -> ApiError:
        return status_error("http://o:8001", token, status, detail, CLI_SPELLING)

    assert "No API token: pass --token" in str(error(None, 401, "Missing"))
    assert "rejected the API token (HTTP 401)" in str(error("tf_x", 401, "Missing"))
    denied = error("tf_x", 403, "Permission denied: queue.admin (another's job)")
    assert isinstance(denied, Forbidden) and exit_code_of(denied) == ExitCode.CONNECTION
    assert "--permission queue.admin" in str(denied)
    starting = error("tf_x", 503, "starting")
    assert isinstance(starting, Unavailable) and isinstance(starting, Unreachable)
    assert exit_code_of(starting) == 4
    missing = error("tf_x", 404, "Job not found: j_1")
    assert isinstance(missing, NotFound) and exit_code_of(missing) == ExitCode.FAILED
    assert str(missing) == "Job not found: j_1 (HTTP 404)"


def test_query_drops_unset_values_and_repeats_lists() -> None:
    assert query({"a": None, "b": True, "c": [1, None, "x"], "d": 0}) == [
        ("b", "true"), ("c", "1"), ("c", "x"), ("d", "0"),
    ]  # fmt: skip
    assert query(None) is None


def test_the_status_choices_are_the_lifecycle_states() -> None:
    """`--status` offers exactly the states the orchestrator has, and each has a colour."""

    def choices(group: str) -> list[str]:
        command = cli.commands[group].commands["list"]
        option = next(p for p in command.params if p.name in ("status", "statuses"))
        return list(option.type.choices)

    assert choices("jobs") == [state.value for state in JobState]
    assert choices("workers") == [state.value for state in WorkerState]
    assert set(STATUS_STYLES) == {*JobState, *WorkerState}


@pytest.mark.parametrize(
    ("job", "text"),
    [
        ({"attempts": 1, "max_retries": 3}, "1 of 4"),
        ({"attempts": 0, "undelivered": 0, "max_retries": 0}, "0 of 1"),
        # Undelivered dispatches spend no retry: never "3 of 1".
        ({"attempts": 3, "undelivered": 2, "max_retries": 0}, "1 of 1 (2 not delivered)"),
        # Preempted attempts neither.
        ({"attempts": 3, "preempted": 2, "max_retries": 0}, "1 of 1 (2 preempted)"),
        (
            {"attempts": 4, "undelivered": 1, "preempted": 2, "max_retries": 0},
            "1 of 1 (1 not delivered, 2 preempted)",
        ),
        # Nor do attempts the infrastructure ended: they spend --infra-retries.
        (
            {"attempts": 4, "infrastructure_failures": 2, "max_retries": 1},
            "2 of 2 (2 infrastructure)",
        ),
        (
            {
                "attempts": 5,
                "undelivered": 1,
                "preempted": 1,
                "infrastructure_failures": 2,
                "max_retries": 0,
            },
            "1 of 1 (1 not delivered, 1 preempted, 2 infrastructure)",
        ),
    ],
)
def test_attempts_show_retries_spent_and_undelivered_dispatches_apart(
    job: dict[str, Any], text: str
) -> None:
    assert attempts_text(job) == text


def test_a_progress_event_is_a_change_merged_into_the_progress_held() -> None:
    watch = JobWatch("j_1")
    watch.apply_detail({"status": "running", "progress": {"step": 10, "total": 40, "loss": 0.5}})
    watch.apply_event("job_progress", {"job_id": "j_1", "progress": {"step": 11}})
    assert watch.progress == {"step": 11, "total": 40, "loss": 0.5}
    # A job event carries the whole object: it replaces.
    watch.apply_event("job", {"job_id": "j_1", "status": "running", "progress": {"step": 1}})
    assert watch.progress == {"step": 1}
