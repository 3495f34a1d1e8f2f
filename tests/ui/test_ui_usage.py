"""The Usage page: a chart per team over time, a table and a CSV download, from the GPU
time of a job that ran on a (simulated) two-GPU worker (issue 24, item 6)."""

from __future__ import annotations

import asyncio
import csv
import io
import re
import threading
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.e2e.harness import Orchestrator
from tests.server.protocol import WorkerClient
from tests.ui.browser_support import INSTALL_HINT, PageProblems, sign_in

expect = pytest.importorskip("playwright.sync_api", reason=INSTALL_HINT).expect

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]


async def _run_one_job(url: str, token: str, name: str, labels: dict[str, str]) -> str:
    """Speak the worker protocol as SimpleTuner's agent does (two A100s): take one job,
    hold it for a second, report it completed."""
    async with aiohttp.ClientSession(base_url=url) as session:
        worker = WorkerClient(session, token)  # type: ignore[arg-type]
        await worker.connect(name, labels=labels)
        job = await worker.take_job()
        await worker.report(job["job_id"], "running")
        await asyncio.sleep(1.0)  # GPU time to account for
        await worker.report(job["job_id"], "completed")
        await worker.disconnect()
        return str(job["job_id"])


def test_the_usage_page_charts_each_teams_gpu_hours(
    page: Any, orchestrator: Orchestrator, problems: PageProblems, tmp_path: Path
) -> None:
    suite = f"usage-{uuid.uuid4().hex[:6]}"
    created = orchestrator.create_worker(suite, labels={"suite": suite})
    done: list[str] = []
    thread = threading.Thread(
        target=lambda: done.append(
            asyncio.run(_run_one_job(orchestrator.url, created["token"], suite, {"suite": suite}))
        )
    )
    thread.start()
    orchestrator.wait_worker(created["worker_id"], "idle")
    job_id = orchestrator.submit(
        config_name="tiny-quick", target="worker", worker_labels={"suite": suite}, gpu_count=2
    )["job_id"]
    thread.join(timeout=60)
    assert done == [job_id]
    orchestrator.wait_job(job_id, {"completed"})
    job = orchestrator.request("GET", f"/api/queue/{job_id}")
    assert job["attempt_history"][0]["gpu_seconds"] >= 2.0

    sign_in(page, orchestrator, route="#/usage")
    chart = page.locator('#usage-charts figure[data-name="default"] svg')
    expect(chart).to_have_attribute("aria-label", re.compile(r"^GPU-hours of default per day"))
    expect(chart.locator("rect.bar").first).to_be_visible()
    expect(page.locator("#usage-table tbody tr").first).to_contain_text("default")
    expect(page.get_by_role("link", name="Usage")).to_have_attribute("aria-current", "page")

    with page.expect_download() as download_info:
        page.get_by_role("button", name="Download CSV").click()
    saved = tmp_path / "usage.csv"
    download_info.value.save_as(saved)
    rows = list(csv.reader(io.StringIO(saved.read_text())))
    assert rows[0] == ["day", "team", "gpu_seconds", "gpu_hours", "attempts"]
    assert any(row[1] == "default" and float(row[2]) >= 2.0 for row in rows[1:])

    page.get_by_label("Sum per", exact=True).select_option("user")
    page.get_by_role("button", name="Apply").click()
    expect(page.locator('#usage-charts figure[data-name="admin"] svg')).to_be_visible()
    assert problems.unexpected() == []
