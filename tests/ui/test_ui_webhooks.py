"""The Webhooks view: a subscription is added with its secret shown once, its secret
rotated (the new one shown once), a test event
to a receiver answering 410 disables it (said on the page, with the reason), the
delivery log shows the attempt, and it is removed. The receiver is on 127.0.0.1 (the
suite's orchestrator runs with --webhooks-allow-private)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.harness import Orchestrator, wait_until
from tests.e2e.webhook_receiver import Receiver
from tests.ui.browser_support import INSTALL_HINT, PageProblems, sign_in

expect = pytest.importorskip("playwright.sync_api", reason=INSTALL_HINT).expect

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]


@pytest.fixture
def gone_receiver() -> Iterator[Receiver]:
    found = Receiver()
    found.status = 410
    found.up()
    yield found
    found.close()


def test_a_webhook_is_added_disabled_by_a_410_and_removed(
    page: Any, orchestrator: Orchestrator, problems: PageProblems, gone_receiver: Receiver
) -> None:
    sign_in(page, orchestrator, route="#/webhooks")
    page.locator("#add-webhook").click()
    page.locator("#wh-url").fill(gone_receiver.url)
    page.get_by_role("button", name="Add webhook").last.click()
    secret = page.locator("#webhook-secret")
    expect(secret).to_be_visible()
    value = secret.input_value()
    assert value.startswith("whsec_")
    page.get_by_role("button", name="Done").click()
    row = page.locator("#webhooks-table tbody tr", has_text=gone_receiver.url)
    expect(row).to_contain_text("Enabled")
    assert value not in page.content()  # shown once, never again
    row.get_by_role("button", name="Rotate secret").click()
    page.locator("dialog").get_by_role("button", name="Rotate").click()
    rotated = page.locator("#webhook-secret")
    expect(rotated).to_be_visible()
    assert rotated.input_value().startswith("whsec_") and rotated.input_value() != value
    page.get_by_role("button", name="Done").click()
    [audit] = orchestrator.request("GET", "/api/audit?kind=webhook.secret_rotated")["events"]
    assert audit["actor"]
    row.get_by_role("button", name="Test").click()
    expect(page.locator(".toast.success")).to_contain_text("Sent a test event")

    def disabled() -> bool:
        hooks = orchestrator.request("GET", "/api/admin/webhooks")["webhooks"]
        return any(h["url"] == gone_receiver.url and not h["enabled"] for h in hooks)

    wait_until(disabled, 30, 0.2, "the 410 to disable the webhook")
    page.reload()
    expect(row).to_contain_text("Disabled")
    expect(row).to_contain_text("410 Gone")
    row.get_by_role("button", name="Deliveries").click()
    log = page.locator("#deliveries-table tbody tr", has_text="webhook.test")
    expect(log).to_contain_text("410")
    page.get_by_role("button", name="Close").last.click()
    row.get_by_role("button", name="Remove").click()
    page.locator("dialog").get_by_role("button", name="Remove").click()
    expect(row).to_have_count(0)
