"""The job page shows what the orchestrator stores of a job: its metric history (one step
axis from step 0 for every chart, the same after a reload, a CSV download) and its
artifacts (checkpoints and files, each file downloadable with the token)."""

from __future__ import annotations

import csv
import hashlib
import io
import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import Agent, Orchestrator
from tests.ui.browser_support import INSTALL_HINT, PageProblems, sign_in

expect = pytest.importorskip("playwright.sync_api", reason=INSTALL_HINT).expect

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]


def _ran(
    orchestrator: Orchestrator, start_agent: Callable[..., Agent], config: str
) -> tuple[str, list[dict[str, Any]]]:
    """A job run to completion on its own agent; (its id, its stored points)."""
    suite = f"suite-{uuid.uuid4().hex[:6]}"
    created = orchestrator.create_worker(f"charts-{suite}", labels={"suite": suite})
    start_agent(created["token"], f"charts-{suite}")
    orchestrator.wait_worker(created["worker_id"], "idle")
    job_id = orchestrator.submit(
        config_name=config, target="worker", worker_labels={"suite": suite}
    )["job_id"]
    orchestrator.wait_job(job_id, {"completed"})
    points = orchestrator.request("GET", f"/api/queue/{job_id}/metrics")["points"]
    return str(job_id), points


def test_every_chart_shares_one_step_axis_from_0_and_survives_a_reload(
    page: Any,
    orchestrator: Orchestrator,
    start_agent: Callable[..., Agent],
    problems: PageProblems,
    tmp_path: Path,
) -> None:
    job_id, points = _ran(orchestrator, start_agent, "tiny-watch")
    last = max(p["step"] for p in points)
    assert last == 80 and len(points) >= 2
    sign_in(page, orchestrator, route=f"#/jobs/{job_id}")
    charts = page.locator("#job-charts figure")
    expect(charts.first.locator("svg")).to_be_visible()
    names = charts.evaluate_all("(els) => els.map((el) => el.dataset.metric)")
    assert names == ["loss", "epoch", "lr"]  # loss first, then by name
    for name in names:
        chart = page.locator(f'#job-charts figure[data-metric="{name}"] svg')
        # Every chart: the whole run, step 0 to the last, as many points as are stored.
        label = f"{name} over steps 0 to {last}: {len(points)} points"
        expect(chart).to_have_attribute("aria-label", re.compile(f"^{re.escape(label)}"))
    page.reload()
    expect(page.locator('#job-charts figure[data-metric="loss"] svg')).to_have_attribute(
        "aria-label", re.compile(f"^loss over steps 0 to {last}: {len(points)} points")
    )

    with page.expect_download() as download_info:
        page.get_by_role("button", name="Download CSV").click()
    download = download_info.value
    assert download.suggested_filename == f"{job_id}-metrics.csv"
    saved = tmp_path / "metrics.csv"
    download.save_as(saved)
    rows = list(csv.reader(io.StringIO(saved.read_text())))
    assert rows[0] == ["attempt", "step", "at", "loss", "epoch", "lr"]
    assert len(rows) == len(points) + 1
    assert problems.unexpected() == []


def test_the_job_page_lists_stored_outputs_and_checkpoints_and_downloads_one(
    page: Any,
    orchestrator: Orchestrator,
    start_agent: Callable[..., Agent],
    problems: PageProblems,
    tmp_path: Path,
) -> None:
    job_id, _ = _ran(orchestrator, start_agent, "tiny-checkpoints")
    listing = orchestrator.request("GET", f"/api/queue/{job_id}/artifacts")
    model = next(a for a in listing["artifacts"] if a["key"] == "model.json")
    sign_in(page, orchestrator, route=f"#/jobs/{job_id}")
    panel = page.locator("#job-artifacts")
    checkpoints = panel.get_by_role("list", name="Checkpoints").locator("li")
    expect(checkpoints).to_have_count(len(listing["checkpoints"]))
    newest = listing["checkpoints"][0]
    expect(checkpoints.first).to_contain_text(f"{newest['name']}step {newest['step']}")
    row = panel.locator('tr[data-key="model.json"]')
    expect(row).to_contain_text(f"{model['size']} B")
    expect(row.locator("td.key")).to_have_attribute("title", f"SHA-256 {model['sha256']}")
    rows = panel.get_by_role("table", name="Stored files").locator("tbody tr")
    expect(rows).to_have_count(len(listing["artifacts"]))

    with page.expect_download() as download_info:
        row.get_by_role("button", name="Download model.json").click()
    download = download_info.value
    assert download.suggested_filename == "model.json"
    saved = tmp_path / "model.json"
    download.save_as(saved)
    assert hashlib.sha256(saved.read_bytes()).hexdigest() == model["sha256"]
    # The timeline says what was stored.
    expect(page.locator("#job-timeline")).to_contain_text(f"{newest['name']} stored")
    assert problems.unexpected() == []
