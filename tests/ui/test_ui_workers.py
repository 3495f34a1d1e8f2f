"""The admin's paths in the browser: sign in, create a worker and connect its agent, drain,
resume, quarantine, release, rotate the token, delete; and a page that notices a lost
orchestrator."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import ADMIN_TOKEN, Agent, Orchestrator
from tests.e2e.raw_stream import RawStreamWorker
from tests.ui.browser_support import INSTALL_HINT, PageProblems, sign_in

expect = pytest.importorskip("playwright.sync_api", reason=INSTALL_HINT).expect

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def test_a_wrong_token_is_refused_and_the_right_one_signs_in_for_this_tab_only(
    page: Any, orchestrator: Orchestrator, problems: PageProblems
) -> None:
    page.goto(orchestrator.url + "/")
    token = page.get_by_label("API token")
    token.fill("tf_not-a-real-token")
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("#signin-error")).to_contain_text("That token was not accepted")
    expect(token).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#app")).to_be_hidden()

    token.fill(f"  {ADMIN_TOKEN}\n")  # pasted with whitespace, as people do
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Workers")).to_be_visible()
    expect(page.locator("#conn-text")).to_have_text("Live")
    stored = page.evaluate("[sessionStorage.getItem('tunefleet.token'), localStorage.length]")
    assert stored == [ADMIN_TOKEN, 0]

    page.reload()  # the same tab keeps the session
    expect(page.get_by_role("heading", name="Workers")).to_be_visible()
    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_label("API token")).to_be_visible()
    assert page.evaluate("sessionStorage.getItem('tunefleet.token')") is None
    assert problems.unexpected() == []


def test_admin_creates_connects_drains_resumes_rotates_and_deletes_a_worker(
    page: Any,
    orchestrator: Orchestrator,
    start_agent: Callable[..., Agent],
    problems: PageProblems,
) -> None:
    name = unique("ui-worker")
    sign_in(page, orchestrator)

    page.get_by_role("button", name="+ Create worker", exact=True).click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_label("Name").fill(name)
    dialog.get_by_role("button", name="+ Add label").click()
    dialog.get_by_label("label 1 key").fill("gpu_type")
    dialog.get_by_label("label 1 value").fill("a100")
    dialog.get_by_role("button", name="Create worker").click()

    expect(dialog.get_by_text("it will not be shown again")).to_be_visible()
    token = dialog.get_by_label("Worker token", exact=True).input_value()
    assert token.startswith("wt_")
    command = dialog.locator("#worker-command").inner_text()
    assert command.startswith("tunefleet worker --orchestrator-url http://127.0.0.1:")
    assert f"--worker-token {token}" in command and f"--name {name}" in command
    environment = dialog.locator("#worker-env").inner_text()
    assert f"export SIMPLETUNER_WORKER_TOKEN={token}" in environment
    expect(dialog.get_by_role("button", name="Copy worker token")).to_be_visible()
    dialog.get_by_role("button", name="Done").click()
    expect(dialog).to_have_count(0)

    row = page.locator("#workers-table tbody tr", has_text=name)
    expect(row.locator(".badge")).to_have_text("connecting")
    expect(row).to_contain_text("gpu_type=a100")
    expect(row.get_by_role("button", name=f"Delete {name}")).to_have_count(0)

    agent = start_agent(token, name)
    try:
        expect(row.locator(".badge")).to_have_text("idle", timeout=30_000)
    except AssertionError as error:
        raise AssertionError(f"{error}\nagent log:\n{agent.log()[-3000:]}") from None
    expect(row).to_contain_text("just now")
    # Its agent agrees with the admin (same name, persistent): nothing to warn about.
    expect(row.locator(".worker-warnings")).to_have_count(0)
    expect(row.locator(".agent-name")).to_have_count(0)

    row.get_by_role("button", name=f"Drain {name}").click()
    page.get_by_role("dialog").get_by_role("button", name="Drain", exact=True).click()
    expect(row.locator(".badge")).to_have_text("draining")
    page.get_by_role("button", name="Draining: 1").wait_for()  # the counter follows

    row.get_by_role("button", name=f"Resume {name}").click()
    expect(row.locator(".badge")).to_have_text("idle")

    # A bad machine out of the pool by hand, and back (issue 26).
    row.get_by_role("button", name=f"Quarantine {name}").click()
    page.get_by_role("dialog").get_by_role("button", name="Quarantine", exact=True).click()
    expect(row.locator(".cell-note.quarantined")).to_contain_text("quarantined: quarantined by")
    expect(row.locator(".badge")).to_have_text("idle")  # connected, keeps its state
    row.get_by_role("button", name=f"Release {name}").click()
    expect(row.locator(".cell-note.quarantined")).to_have_count(0)
    expect(row.get_by_role("button", name=f"Quarantine {name}")).to_be_visible()

    row.get_by_role("button", name=f"Rotate token {name}").click()
    confirm = page.get_by_role("dialog")
    expect(confirm).to_contain_text("stops working at once")
    confirm.get_by_role("button", name="Rotate token").click()
    rotated = page.get_by_role("dialog")
    expect(rotated.get_by_role("heading", name=f"New token for {name}")).to_be_visible()
    new_token = rotated.get_by_label("Worker token", exact=True).input_value()
    assert new_token.startswith("wt_") and new_token != token
    rotated.get_by_role("button", name="Done").click()
    expect(row.locator(".badge")).to_have_text("offline")  # the agent's old token is dead

    row.get_by_role("button", name=f"Delete {name}").click()
    confirm = page.get_by_role("dialog")
    expect(confirm.get_by_role("button", name="Cancel")).to_be_focused()  # the safe default
    confirm.get_by_role("button", name="Delete worker").click()
    expect(row).to_have_count(0)
    names = [w["name"] for w in orchestrator.request("GET", "/api/admin/workers")["workers"]]
    assert name not in names
    assert problems.unexpected() == []


def test_an_invalid_worker_name_is_explained_in_the_dialog(
    page: Any, orchestrator: Orchestrator
) -> None:
    sign_in(page, orchestrator)
    page.get_by_role("button", name="+ Create worker", exact=True).click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_label("Name").fill("has spaces")
    dialog.get_by_role("button", name="Create worker").click()
    expect(dialog.get_by_role("alert")).to_contain_text("letters, digits")
    expect(dialog.get_by_label("Name")).to_be_focused()
    dialog.get_by_label("Name").press("Escape")
    expect(page.get_by_role("dialog")).to_have_count(0)


def test_the_page_shows_a_lost_orchestrator_and_reconnects_by_itself(
    page: Any, tmp_path: Path, ui_configs: Path
) -> None:
    first = Orchestrator(tmp_path / "data", ui_configs).start()
    second: Orchestrator | None = None
    try:
        sign_in(page, first)
        expect(page.locator("#banner")).to_be_hidden()
        first.kill()
        expect(page.locator("#banner")).to_be_visible()
        expect(page.locator("#conn-text")).to_have_text("Disconnected")
        expect(page.locator("#banner")).to_contain_text("Reconnecting")

        second = Orchestrator(tmp_path / "data", ui_configs, port=first.port).start()
        expect(page.locator("#conn-text")).to_have_text("Live", timeout=30_000)
        expect(page.locator("#banner")).to_be_hidden()
        expect(page.get_by_role("heading", name="Workers")).to_be_visible()
    finally:
        first.kill()
        if second is not None:
            second.kill()  # see the orchestrator fixture: a clean stop waits for the page


def test_a_token_without_admin_rights_sees_what_it_may_and_is_told_why_not_the_rest(
    page: Any, orchestrator: Orchestrator, problems: PageProblems
) -> None:
    created = orchestrator.request(
        "POST", "/api/admin/tokens", {"name": unique("researcher"), "permissions": ["queue.submit"]}
    )
    sign_in(page, orchestrator, token=created["token"])
    expect(page.get_by_role("note")).to_contain_text("admin.workers")
    expect(page.get_by_role("button", name="+ Create worker", exact=True)).to_be_hidden()
    total = len(orchestrator.request("GET", "/api/admin/workers")["workers"])
    expect(page.get_by_role("button", name=f"Total: {total}")).to_be_visible()

    page.get_by_role("link", name="Queue").click()
    page.get_by_role("button", name="+ Submit job").click()
    expect(page.locator("#sj-preview")).to_contain_text("admin.workers")
    page.get_by_role("link", name="Audit").click()
    expect(page.get_by_role("note")).to_contain_text("audit.read")
    # The page learnt at sign-in (GET /api/auth/whoami) what the token lacks, so it asks
    # for none of it, on no page: the audit log records no refusal at all.
    page.get_by_role("link", name="Workers").click()
    page.get_by_role("link", name="Audit").click()
    denied = orchestrator.request("GET", "/api/audit?outcome=denied&limit=500")["events"]
    prefix = f"token {created['id']} lacks "
    refused = [
        e["detail"]["reason"].removeprefix(prefix)
        for e in denied
        if e["detail"].get("reason", "").startswith(prefix)
    ]
    assert refused == []
    assert problems.unexpected() == []


def test_a_worker_whose_stream_closed_is_shown_not_connected(
    page: Any, tmp_path: Path, ui_configs: Path, problems: PageProblems
) -> None:
    # Its own orchestrator: the suite's times out a silent worker in 3 s, and this one
    # must stay idle (no heartbeats) long enough to be seen unconnected.
    orchestrator = Orchestrator(tmp_path / "data", ui_configs, heartbeat_timeout_s=120).start()
    try:
        _check_departed_worker_is_shown(page, orchestrator, problems)
    finally:
        orchestrator.kill()


def _check_departed_worker_is_shown(
    page: Any, orchestrator: Orchestrator, problems: PageProblems
) -> None:
    name = unique("ui-departed")
    created = orchestrator.create_worker(name)
    raw = RawStreamWorker(orchestrator.url, created["token"], created["worker_id"], name=name)
    raw.register()
    raw.open_stream()
    sign_in(page, orchestrator)
    row = page.locator("#workers-table tbody tr", has_text=name)
    expect(row.locator(".badge")).to_have_text("idle")
    expect(row.locator(".not-connected")).to_have_count(0)

    raw.close()  # its status stays idle until the heartbeat timeout, unconnected
    expect(row.locator(".not-connected")).to_have_text("not connected", timeout=10_000)
    expect(row.locator(".badge")).to_have_text("idle")
    assert problems.unexpected() == []


def test_an_agent_that_disagrees_with_the_admin_is_named_and_warned_about(
    page: Any, orchestrator: Orchestrator, problems: PageProblems
) -> None:
    name = unique("ui-typed")
    created = orchestrator.create_worker(name, worker_type="ephemeral")
    # Its agent calls itself otherwise and was started persistent.
    raw = RawStreamWorker(
        orchestrator.url, created["token"], created["worker_id"], name=f"{name}-laptop"
    )
    raw.register()
    sign_in(page, orchestrator)
    row = page.locator("#workers-table tbody tr", has_text=created["worker_id"])
    expect(row.locator(".cell-title")).to_have_text(name)  # the admin's name is in force
    expect(row.locator(".agent-name")).to_have_text(f"agent: {name}-laptop")
    warnings = row.get_by_role("list", name=f"Warnings about {name}").get_by_role("listitem")
    expect(warnings).to_have_count(2)
    expect(warnings.nth(0)).to_contain_text(
        "worker_type is ephemeral but its agent was started persistent"
    )
    expect(warnings.nth(1)).to_contain_text(f"the agent calls itself '{name}-laptop'")
    assert problems.unexpected() == []


def test_a_workers_gpu_health_is_shown_live_with_why(
    page: Any, tmp_path: Path, ui_configs: Path, problems: PageProblems
) -> None:
    # Its own orchestrator: the suite's times out a silent worker in 3 s.
    orchestrator = Orchestrator(tmp_path / "data", ui_configs, heartbeat_timeout_s=120).start()
    try:
        name = unique("ui-health")
        created = orchestrator.create_worker(name)
        raw = RawStreamWorker(orchestrator.url, created["token"], created["worker_id"], name=name)
        raw.register()
        raw.open_stream()

        def beat(**gpu1: Any) -> None:
            gpus = [{"index": 0, "xids": []}, {"index": 1, "xids": [], **gpu1}]
            body = {"worker_id": raw.worker_id, "status": "idle", "gpu_health": {"gpus": gpus}}
            raw._post("/api/workers/heartbeat", body)

        sign_in(page, orchestrator)
        row = page.locator("#workers-table tbody tr", has_text=name)
        expect(row.locator(".badge")).to_have_text("idle")
        expect(row.locator(".health")).to_have_count(0)  # no reading yet: nothing said
        beat()
        expect(row.locator(".health.healthy")).to_have_text("GPUs healthy")
        beat(temperature_c=88)
        expect(row.locator(".health.degraded")).to_have_text("degraded: GPU 1 at 88 °C")
        beat(temperature_c=88, xids=[79])
        note = row.locator(".health.unhealthy")
        expect(note).to_have_text("unhealthy: Xid 79 on GPU 1")
        expect(note).to_have_attribute("title", "Xid 79 on GPU 1\nGPU 1 at 88 °C")
        # The reading quarantined it: said above the health, in red, with the reason.
        quarantined = row.locator(".cell-note.quarantined")
        expect(quarantined).to_have_text("quarantined: GPU health: Xid 79 on GPU 1")
        raw.close()
        assert problems.unexpected() == []
    finally:
        orchestrator.kill()
