"""The researcher's paths in the browser: the qualifying-workers preview, submitting a job
and watching its progress and log live, cancelling a waiting job; and the audit page."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from tests.e2e.harness import Agent, Orchestrator
from tests.ui.browser_support import INSTALL_HINT, PageProblems, sign_in

expect = pytest.importorskip("playwright.sync_api", reason=INSTALL_HINT).expect

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def test_researcher_submits_a_job_and_watches_its_progress_and_log_live(
    page: Any,
    orchestrator: Orchestrator,
    start_agent: Callable[..., Agent],
    problems: PageProblems,
) -> None:
    suite = unique("suite")
    worker = unique("ui-trainer")
    job_name = unique("watch")
    created = orchestrator.create_worker(worker, labels={"suite": suite})
    start_agent(created["token"], worker)
    orchestrator.wait_worker(created["worker_id"], "idle")
    sign_in(page, orchestrator, route="#/queue")

    page.get_by_role("button", name="+ Submit job").click()
    form = page.get_by_role("form", name="Submit a job")
    form.get_by_label("Configuration").select_option("tiny-watch")
    form.get_by_label("Job name (optional)").fill(job_name)
    form.get_by_text("Remote worker", exact=True).click()
    form.get_by_role("button", name="+ Add label requirement").click()
    glob = form.get_by_label("label requirement 1 glob")
    form.get_by_label("label requirement 1 key").fill("suite")
    preview = page.locator("#sj-preview")

    glob.fill("elsewhere-*")
    expect(preview).to_contain_text("0 of")
    expect(preview).to_contain_text(f"label suite={suite} does not match elsewhere-*")
    glob.fill("suite-" + suite.removeprefix("suite-")[:3] + "*")
    expect(preview.get_by_role("list", name="Qualifying workers")).to_have_text(f"{worker}idle")
    expect(preview).to_contain_text(f"it would start at once on {worker}")

    form.get_by_role("button", name="Submit job").click()
    row = page.locator("#jobs-table tbody tr", has_text=job_name)
    expect(row).to_have_count(1)
    expect(page.locator(".toast.success")).to_contain_text(f"dispatched to {worker}")
    row.get_by_role("link", name=job_name).click()

    expect(page.get_by_role("heading", name=job_name)).to_be_visible()
    lines = page.locator("#job-log .ln")
    expect(lines.first).to_be_visible()
    expect(page.locator(".job-head .badge")).to_have_text("running")
    seen_while_running = lines.count()
    expect(page.locator("#job-percent")).to_have_text("100%", timeout=30_000)
    expect(page.locator(".job-head .badge")).to_have_text("completed")
    expect(page.locator("#job-log .end")).to_contain_text("job completed")
    assert lines.count() > seen_while_running, "the log tail did not grow while the job ran"
    expect(page.locator("#log-count")).to_have_text(f"{lines.count()} lines")
    # Drawn live from the progress events and the stored history, to the last step.
    loss_chart = page.locator('#job-charts figure[data-metric="loss"] svg')
    expect(loss_chart).to_have_attribute("aria-label", re.compile(r"^loss over steps 0 to 80:"))
    timeline = page.locator("#job-timeline")
    for step in ("Submitted", f"Dispatched to {worker}", f"Running on {worker}", "Completed"):
        expect(timeline).to_contain_text(step)

    page.get_by_role("link", name="← Queue").click()
    expect(row.get_by_role("progressbar")).to_have_attribute("aria-valuenow", "100")
    expect(row.locator(".badge")).to_have_text("completed")
    assert problems.unexpected() == []


def test_a_waiting_job_shows_why_and_can_be_cancelled(
    page: Any, orchestrator: Orchestrator, problems: PageProblems
) -> None:
    job_name = unique("never")
    submitted = orchestrator.submit(
        config_name="tiny-quick", name=job_name, target="worker", worker_labels={"team": "nobody"}
    )
    sign_in(page, orchestrator, route="#/queue?status=pending")
    row = page.locator("#jobs-table tbody tr", has_text=job_name)
    expect(row.locator(".badge")).to_have_text("pending")
    expect(row).to_contain_text("no worker")

    row.get_by_role("button", name=f"Cancel job {job_name}").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("leaves the queue")
    dialog.get_by_role("button", name="Cancel job").click()
    expect(page.locator(".toast.success")).to_contain_text("cancelled")
    expect(row).to_have_count(0)  # the filter shows pending jobs only
    assert orchestrator.job(submitted["job_id"])["status"] == "cancelled"
    assert problems.unexpected() == []


def test_the_job_page_of_an_unknown_job_says_so(page: Any, orchestrator: Orchestrator) -> None:
    sign_in(page, orchestrator, route="#/jobs/j_doesnotexist")
    expect(page.get_by_role("alert")).to_contain_text("There is no job j_doesnotexist")


def test_audit_page_verifies_the_chain_and_filters_events(
    page: Any, orchestrator: Orchestrator, problems: PageProblems
) -> None:
    orchestrator.create_worker(unique("audited"))
    sign_in(page, orchestrator, route="#/audit")
    expect(page.locator("#audit-verify")).to_contain_text("Hash chain intact")
    page.get_by_label("Kind").fill("worker.created")
    page.get_by_role("button", name="Apply").click()
    kinds = page.locator("#audit-table tbody tr td:nth-child(3)")
    expect(kinds.first).to_have_text("worker.created")
    assert set(kinds.all_inner_texts()) == {"worker.created"}
    assert "kind=worker.created" in page.url  # filters live in the address, for links
    late = orchestrator.create_worker(unique("late"))  # appears without a reload
    expect(page.locator("#audit-table tbody tr", has_text=late["worker_id"])).to_have_count(1)

    page.get_by_label("Kind").fill("no.such.kind")
    page.get_by_role("button", name="Apply").click()
    expect(page.get_by_text("No audit events match")).to_be_visible()
    assert problems.unexpected() == []


def test_the_timeline_shows_a_lost_worker_and_the_requeue_with_its_reason(
    page: Any,
    orchestrator: Orchestrator,
    start_agent: Callable[..., Agent],
    problems: PageProblems,
) -> None:
    suite = unique("suite")
    worker = unique("ui-doomed")
    created = orchestrator.create_worker(worker, labels={"suite": suite})
    agent = start_agent(created["token"], worker)
    orchestrator.wait_worker(created["worker_id"], "idle")
    job = orchestrator.submit(
        config_name="tiny-watch", target="worker", worker_labels={"suite": suite}
    )
    sign_in(page, orchestrator, route=f"#/jobs/{job['job_id']}")
    expect(page.locator(".job-head .badge")).to_have_text("running")

    agent.kill()  # the machine vanishes; its heartbeats stop
    timeline = page.locator("#job-timeline")
    expect(timeline).to_contain_text(f"Requeued from {worker}")
    expect(timeline).to_contain_text("heartbeat timeout")
    expect(timeline).to_contain_text("Waiting for a worker")
    expect(page.locator(".job-head .badge")).to_have_text("pending")
    orchestrator.request("POST", f"/api/queue/{job['job_id']}/cancel", {})
    expect(page.locator(".job-head .badge")).to_have_text("cancelled")
    assert problems.unexpected() == []


def test_an_admin_preempts_a_running_job_and_the_timeline_shows_its_resume(
    page: Any,
    orchestrator: Orchestrator,
    start_agent: Callable[..., Agent],
    problems: PageProblems,
) -> None:
    suite = unique("suite")
    worker = unique("ui-preempted")
    created = orchestrator.create_worker(worker, labels={"suite": suite})
    start_agent(created["token"], worker)
    orchestrator.wait_worker(created["worker_id"], "idle")
    job = orchestrator.submit(
        config_name="tiny-preempt", target="worker", worker_labels={"suite": suite}
    )
    sign_in(page, orchestrator, route=f"#/jobs/{job['job_id']}")
    expect(page.locator(".job-head .badge")).to_have_text("running")
    expect(page.locator("#job-percent")).not_to_have_text("0%")

    page.get_by_role("button", name="Preempt").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("resumes from that checkpoint")
    dialog.get_by_role("button", name="Preempt").click()
    expect(page.locator(".toast.success")).to_contain_text("to write a checkpoint")
    timeline = page.locator("#job-timeline")
    expect(timeline).to_contain_text("Preemption asked")
    expect(timeline).to_contain_text(f"Preempted on {worker}", timeout=30_000)
    expect(timeline).to_contain_text("attempt 1 spent no retry")
    expect(timeline).to_contain_text("resumed from checkpoint-", timeout=30_000)
    orchestrator.request("POST", f"/api/queue/{job['job_id']}/cancel", {})
    expect(page.locator(".job-head .badge")).to_have_text("cancelled")
    # Nothing left to preempt.
    expect(page.get_by_role("button", name="Preempt")).to_be_hidden()
    assert problems.unexpected() == []


# Where each row of a facts strip ends, against where the strip ends (px): an empty cell
# at the end of a row shows as a gap.
_ROW_GAPS = """(selector) => {
  const strip = document.querySelector(selector);
  const box = strip.getBoundingClientRect();
  const ends = new Map();
  for (const fact of strip.querySelectorAll('.fact')) {
    const r = fact.getBoundingClientRect();
    const top = Math.round(r.top);
    ends.set(top, Math.max(ends.get(top) ?? 0, r.right));
  }
  return { facts: strip.querySelectorAll('.fact').length,
           gaps: [...ends.values()].map((right) => Math.round(box.right - right)) };
}"""


def test_the_submit_toast_links_to_the_job_whose_summary_has_no_empty_cell(
    page: Any, orchestrator: Orchestrator, problems: PageProblems
) -> None:
    job_name = unique("linked")
    sign_in(page, orchestrator, route="#/queue")
    page.get_by_role("button", name="+ Submit job").click()
    form = page.get_by_role("form", name="Submit a job")
    form.get_by_label("Configuration").select_option("tiny-quick")
    form.get_by_label("Job name (optional)").fill(job_name)
    form.get_by_text("Remote worker", exact=True).click()
    form.get_by_role("button", name="+ Add label requirement").click()
    form.get_by_label("label requirement 1 key").fill("team")
    form.get_by_label("label requirement 1 glob").fill("nobody")  # it waits: no worker
    form.get_by_role("button", name="Submit job").click()

    toast = page.locator(".toast.success", has_text="submitted")
    link = toast.get_by_role("link")
    expect(link).to_have_text(re.compile(r"^j_\w+$"))
    job_id = link.inner_text()
    link.click()
    expect(page.get_by_role("heading", name=job_name)).to_be_visible()
    assert page.url.endswith(f"#/jobs/{job_id}")

    # Eight facts, and no row of the strip ends in an empty cell, whatever the width.
    expect(page.locator("section[aria-label='Summary'] .fact")).to_have_count(8)
    for width in (1920, 1440, 1280, 1024, 768, 390):
        page.set_viewport_size({"width": width, "height": 900})
        strip = page.evaluate(_ROW_GAPS, "section[aria-label='Summary'] .facts")
        assert strip["facts"] == 8
        assert all(gap <= 1 for gap in strip["gaps"]), (width, strip)
    orchestrator.request("POST", f"/api/queue/{job_id}/cancel", {})
    assert problems.unexpected() == []


def test_timeline_ages_advance_with_the_summary(
    page: Any, orchestrator: Orchestrator, problems: PageProblems
) -> None:
    job = orchestrator.submit(
        config_name="tiny-quick", target="worker", worker_labels={"team": "nobody"}
    )
    sign_in(page, orchestrator, route=f"#/jobs/{job['job_id']}")
    submitted = page.locator("section[aria-label='Summary'] .fact", has_text="Submitted")
    timeline_age = page.locator("#job-timeline li", has_text="Submitted").locator(".when")
    expect(timeline_age).to_contain_text("just now")
    # "just now" lasts 5 s; then the summary counts seconds, and so must the timeline.
    expect(submitted.locator("dd")).to_have_text(re.compile(r"^\d+ s ago$"), timeout=15_000)
    expect(timeline_age).to_have_text(re.compile(r" · \d+ s ago$"), timeout=2_000)
    orchestrator.request("POST", f"/api/queue/{job['job_id']}/cancel", {})
    assert problems.unexpected() == []


def test_a_token_without_queue_local_is_not_offered_the_orchestrators_machine(
    page: Any, orchestrator: Orchestrator
) -> None:
    body = {"name": unique("submit-only"), "permissions": ["queue.submit"]}
    token = orchestrator.request("POST", "/api/admin/tokens", body)["token"]
    sign_in(page, orchestrator, token=token, route="#/queue")
    page.get_by_role("button", name="+ Submit job").click()
    form = page.get_by_role("form", name="Submit a job")
    expect(form.get_by_text("Remote worker", exact=True)).to_be_visible()
    expect(form.get_by_text("Local", exact=True)).to_have_count(0)
    expect(form.locator("label", has_text="Auto")).to_have_attribute(
        "title", "remote workers only: this token lacks queue.local"
    )


def test_a_token_without_queue_admin_is_not_offered_preempt(
    page: Any, orchestrator: Orchestrator, start_agent: Callable[..., Agent]
) -> None:
    suite = unique("suite")
    worker = unique("ui-kept")
    created = orchestrator.create_worker(worker, labels={"suite": suite})
    start_agent(created["token"], worker)
    orchestrator.wait_worker(created["worker_id"], "idle")
    job = orchestrator.submit(
        config_name="tiny-preempt", target="worker", worker_labels={"suite": suite}
    )
    body = {"name": unique("submit-only"), "permissions": ["queue.submit"]}
    token = orchestrator.request("POST", "/api/admin/tokens", body)["token"]
    sign_in(page, orchestrator, token=token, route=f"#/jobs/{job['job_id']}")
    expect(page.locator(".job-head .badge")).to_have_text("running")
    expect(page.get_by_role("button", name="Cancel job")).to_be_visible()
    expect(page.get_by_role("button", name="Preempt")).to_be_hidden()
    orchestrator.request("POST", f"/api/queue/{job['job_id']}/cancel", {})


def test_the_job_list_and_page_name_whose_job_it_is(
    page: Any, orchestrator: Orchestrator, problems: PageProblems
) -> None:
    job = orchestrator.submit(
        config_name="tiny-quick", target="worker", worker_labels={"team": "nobody"}
    )
    sign_in(page, orchestrator, route="#/queue")
    row = page.locator("#jobs-table tbody tr", has_text=job["job_id"])
    expect(row.locator("td").nth(2)).to_have_text("admindefault")  # user, team beneath
    expect(page.locator("#jobs-table thead th").nth(2)).to_have_text("Owner")
    row.get_by_role("link").first.click()
    expect(page.locator("p.subtitle")).to_contain_text("by admin for team default")
    orchestrator.request("POST", f"/api/queue/{job['job_id']}/cancel", {})
    assert problems.unexpected() == []
