"""The Approvals view: a job an approval rule held shows with its reason and the count in
the header; approving it queues it. The rule matches only this test's GPU model, so the
shared orchestrator's other tests are never held; it is deleted at the end."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.e2e.harness import Orchestrator
from tests.ui.browser_support import INSTALL_HINT, PageProblems, sign_in

expect = pytest.importorskip("playwright.sync_api", reason=INSTALL_HINT).expect

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]


def test_a_held_job_is_approved_from_the_approvals_view(
    page: Any, orchestrator: Orchestrator, problems: PageProblems
) -> None:
    model = f"ui-approval-{uuid.uuid4().hex[:6]}"
    rule = orchestrator.request(
        "POST", "/api/admin/approval-rules", {"condition": "hardware_type", "threshold": model}
    )
    try:
        name = f"held-{model}"
        job = orchestrator.submit(
            config={"model_type": "lora"},
            name=name,
            gpu_name=model,
            worker_labels={"pool": "nowhere"},
            target="worker",
        )
        assert job["status"] == "pending_approval"
        sign_in(page, orchestrator, route="#/approvals")
        count = page.locator("#approvals-count")
        expect(count).not_to_have_text("0")
        row = page.locator("#approvals-table tbody tr", has_text=name)
        expect(row).to_contain_text("awaiting approval by a lead of team")
        expect(row).to_contain_text(f"GPU model matches {model}")
        row.get_by_role("button", name="Approve").click()
        expect(page.locator(".toast.success")).to_contain_text(f"Approved {name}; it is pending.")
        expect(row).to_have_count(0)
        assert orchestrator.job(job["job_id"])["status"] == "pending"
    finally:
        orchestrator.request("DELETE", f"/api/admin/approval-rules/{rule['id']}")
