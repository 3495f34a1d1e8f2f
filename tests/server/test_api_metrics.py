"""GET /api/queue/{job_id}/metrics: progress reports become a stored history."""

from __future__ import annotations

import csv
import io
from typing import Any

import pytest

from tests.server.test_api_attempt_fencing import _redispatched


async def _report(worker: Any, job_id: str, status: str = "running", **progress: Any) -> None:
    resp = await worker.report(job_id, status, progress=progress)
    assert resp.status == 200, await resp.text()


async def test_progress_reports_are_stored_per_attempt_and_step(server: Any) -> None:
    worker = await server.connected_worker()
    job_id = await server.running_job(worker)
    await _report(worker, job_id, step=1, total=3, loss=0.9, lr=1e-4)
    await _report(worker, job_id, step=2, total=3, loss=0.5, lr=1e-4, phase="train")
    await _report(worker, job_id, total=3)  # no step: the job's progress, not a point
    # The heartbeat repeats the last progress: no second point for step 2.
    beat = await worker.heartbeat(status="busy", current_job_id=job_id, job_progress={"step": 2})
    assert beat.status == 200
    await _report(worker, job_id, "completed", step=3, total=3, loss=0.25)
    await server.wait_job(job_id, "completed")

    data = await server.ok("GET", f"/api/queue/{job_id}/metrics")
    assert data["job_id"] == job_id
    points = data["points"]
    assert [(p["attempt"], p["step"], p["values"]) for p in points] == [
        (1, 1, {"loss": 0.9, "lr": 1e-4}),
        (1, 2, {"loss": 0.5, "lr": 1e-4}),
        (1, 3, {"loss": 0.25}),
    ]
    assert all(p["at"].endswith("Z") for p in points)
    assert data["next_since"] == points[-1]["seq"]
    worker.close()


async def test_since_and_limit_page_through_the_history(server: Any) -> None:
    worker = await server.connected_worker()
    job_id = await server.running_job(worker)
    for step in range(5):
        await _report(worker, job_id, step=step, loss=1.0 / (step + 1))
    first = await server.ok("GET", f"/api/queue/{job_id}/metrics?limit=2")
    assert [p["step"] for p in first["points"]] == [0, 1]
    rest = await server.ok("GET", f"/api/queue/{job_id}/metrics?since={first['next_since']}")
    assert [p["step"] for p in rest["points"]] == [2, 3, 4]
    done = await server.ok("GET", f"/api/queue/{job_id}/metrics?since={rest['next_since']}")
    assert done["points"] == [] and done["next_since"] == rest["next_since"]
    # A step reported again with new numbers comes again, after the cursor.
    await _report(worker, job_id, step=4, loss=0.1)
    again = await server.ok("GET", f"/api/queue/{job_id}/metrics?since={rest['next_since']}")
    assert [(p["step"], p["values"]) for p in again["points"]] == [(4, {"loss": 0.1})]
    assert (await server.ok("GET", f"/api/queue/{job_id}/metrics?attempt=2"))["points"] == []
    worker.close()


async def test_csv_has_a_column_per_metric_loss_first(server: Any) -> None:
    worker = await server.connected_worker()
    job_id = await server.running_job(worker)
    await _report(worker, job_id, step=1, lr=0.1, loss=0.9)
    await _report(worker, job_id, step=2, loss=0.5, val_loss=0.7, **{"=cmd": 1})
    resp = await server.get(f"/api/queue/{job_id}/metrics?format=csv")
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("text/csv")
    assert f"{job_id}-metrics.csv" in resp.headers["Content-Disposition"]
    rows = list(csv.reader(io.StringIO(await resp.text())))
    # A name a spreadsheet would run as a formula is quoted.
    assert rows[0] == ["attempt", "step", "at", "loss", "val_loss", "'=cmd", "lr"]
    assert [r[:2] + r[3:] for r in rows[1:]] == [
        ["1", "1", "0.9", "", "", "0.1"],
        ["1", "2", "0.5", "0.7", "1.0", ""],
    ]
    worker.close()


async def test_metrics_of_an_unknown_job_is_404(server: Any) -> None:
    resp = await server.get("/api/queue/j_nope/metrics")
    assert resp.status == 404
    assert (await resp.json())["detail"] == "Job not found: j_nope"


@pytest.mark.parametrize(
    ("query", "names"),
    [
        ("limit=0", "limit"),
        ("since=-1", "since"),
        ("format=xml", "format"),
        ("attempt=x", "attempt"),
    ],
)
async def test_metrics_with_a_bad_query_is_400(server: Any, query: str, names: str) -> None:
    job_id = (await server.submit())["job_id"]
    resp = await server.get(f"/api/queue/{job_id}/metrics?{query}")
    assert resp.status == 400
    detail = (await resp.json())["detail"]
    assert names in detail and "\n" not in detail


async def test_metrics_need_an_api_token(server: Any) -> None:
    job_id = (await server.submit())["job_id"]
    assert (await server.get(f"/api/queue/{job_id}/metrics", headers={})).status == 401
    token = await server.api_token("audit.read")  # any token reads the queue
    resp = await server.get(f"/api/queue/{job_id}/metrics", headers=server.bearer(token))
    assert resp.status == 200


async def test_a_retried_job_keeps_each_attempts_points_apart(server: Any) -> None:
    worker, job_id = await _redispatched(server)
    # SimpleTuner's agent names no attempt: its points belong to the current one.
    await _report(worker, job_id, "training", step=200, loss=0.3)
    resp = await worker.report(job_id, "running", attempt=1, progress={"step": 900, "loss": 9})
    assert resp.status == 409  # a late report on the earlier attempt stores nothing
    data = await server.ok("GET", f"/api/queue/{job_id}/metrics")
    assert [(p["attempt"], p["step"]) for p in data["points"]] == [(2, 200)]
    worker.close()


async def test_a_report_with_an_enormous_number_is_taken_without_that_number(server: Any) -> None:
    worker = await server.connected_worker()
    job_id = await server.running_job(worker)
    await _report(worker, job_id, step=3, loss=0.5, tokens=10**400)
    data = await server.ok("GET", f"/api/queue/{job_id}/metrics")
    assert [(p["step"], p["values"]) for p in data["points"]] == [(3, {"loss": 0.5})]
    worker.close()


async def test_csv_of_a_job_with_many_metric_names_is_bounded_and_says_so(
    server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Finding 3 at small scale: every report names a new metric; one column each made the
    # CSV as wide as the reports were many.
    monkeypatch.setattr("tunefleet.metric_table.MAX_CSV_METRICS", 5)
    monkeypatch.setattr("tunefleet.metric_table.CSV_LINES_PER_PIECE", 3)
    worker = await server.connected_worker()
    job_id = await server.running_job(worker)
    for step in range(12):
        await _report(worker, job_id, step=step, loss=1.0, **{f"m{step:02}": -0.5})
    resp = await server.get(f"/api/queue/{job_id}/metrics?format=csv")
    assert resp.status == 200
    assert resp.headers["X-Tunefleet-Omitted-Columns"] == "8"
    rows = list(csv.reader(io.StringIO(await resp.text())))
    assert rows[0] == ["attempt", "step", "at", "loss", "m00", "m01", "m02", "m03"]
    assert len(rows) == 13 and all(len(row) == 8 for row in rows)
    assert rows[1][3:] == ["1.0", "-0.5", "", "", ""]  # a negative number stays a number
    worker.close()
