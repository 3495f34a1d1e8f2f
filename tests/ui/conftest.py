"""Browser tests of the web UI: headless Chromium (the system's, not a Playwright download)
driving a real orchestrator process and real agent processes (tests/e2e/harness.py).

Without Chromium or the playwright package the browser tests skip and say how to install
them. A failing test leaves a screenshot in tests/ui/screenshots/<test>.png.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import Agent, Orchestrator, write_tiny_config
from tests.ui.browser_support import (
    CHROMIUM_ARGS,
    INSTALL_HINT,
    SCREENSHOTS,
    UI_TIMEOUT_MS,
    PageProblems,
    chromium_path,
)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


# --- processes ----------------------------------------------------------------------------


@pytest.fixture(scope="session")
def ui_configs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    configs = tmp_path_factory.mktemp("ui") / "configs"
    # ~4 s of training: long enough to watch the log grow, short enough for the suite.
    write_tiny_config(configs, "tiny-watch", max_train_steps=80, step_seconds=0.05)
    write_tiny_config(configs, "tiny-quick", max_train_steps=20, step_seconds=0.02)
    write_tiny_config(
        configs, "tiny-checkpoints", max_train_steps=30, step_seconds=0.02, checkpointing_steps=10
    )
    # ~60 s: preempted while it runs (it checkpoints on SIGTERM), and still running when
    # its test cancels it after the resume, however loaded the machine (each test cancels
    # it, so the length costs nothing; at 10 s a full run once saw it complete first).
    write_tiny_config(
        configs, "tiny-preempt", max_train_steps=1200, step_seconds=0.05, checkpointing_steps=50
    )
    return configs


@pytest.fixture(scope="session")
def orchestrator(
    tmp_path_factory: pytest.TempPathFactory, ui_configs: Path
) -> Iterator[Orchestrator]:
    """One orchestrator for the browser suite; tests use their own uniquely named workers."""
    # Pages whose tokens are revoked or whose users are disabled keep failing to sign in
    # from 127.0.0.1; the per-address throttle (tested on its own) would then refuse the
    # next test's sign-in with a password, which no recently good token vouches for.
    orch = Orchestrator(
        tmp_path_factory.mktemp("ui-data"),
        ui_configs,
        # Its webhooks test's receiver is on 127.0.0.1.
        extra_args=["--auth-failures-per-window", "100000", "--webhooks-allow-private"],
    ).start()
    yield orch
    # Not stop(): a clean stop waits out the shutdown timeout (10 s) while a closed page's
    # /api/events handler is still waiting for its next ping; nothing here tests stopping.
    orch.kill()


@pytest.fixture
def agents() -> Iterator[list[Agent]]:
    started: list[Agent] = []
    yield started
    for agent in started:
        agent.stop()


@pytest.fixture
def start_agent(
    orchestrator: Orchestrator, agents: list[Agent], tmp_path: Path
) -> Callable[..., Agent]:
    def start(token: str, name: str, orch: Orchestrator | None = None) -> Agent:
        target = orch or orchestrator
        agent = Agent(target.url, token, tmp_path / f"work-{name}", name, persistent=True).start()
        agents.append(agent)
        return agent

    return start


# --- the browser ----------------------------------------------------------------------------


# Module scope, not session: Playwright's sync API keeps an event loop running in this
# thread while it is open, and asyncio tests (here and in other areas) cannot start
# their own loop meanwhile.
@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    executable = chromium_path()
    if executable is None:
        pytest.skip(f"no Chromium found for the browser tests: {INSTALL_HINT}")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip(f"the playwright package is missing for the browser tests: {INSTALL_HINT}")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def problems() -> PageProblems:
    return PageProblems()


def _page(
    browser: Any, request: pytest.FixtureRequest, problems: PageProblems, **context: Any
) -> Iterator[Any]:
    ctx = browser.new_context(**context)
    ctx.set_default_timeout(UI_TIMEOUT_MS)
    page = ctx.new_page()
    page.on("pageerror", lambda error: problems.errors.append(f"pageerror: {error}"))
    page.on(
        "console",
        lambda message: message.type == "error" and problems.errors.append(message.text),
    )
    yield page
    report = getattr(request.node, "report_call", None)
    if report is not None and report.failed:
        SCREENSHOTS.mkdir(exist_ok=True)
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)
        page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
    ctx.close()


@pytest.fixture
def page(browser: Any, request: pytest.FixtureRequest, problems: PageProblems) -> Iterator[Any]:
    yield from _page(browser, request, problems, viewport={"width": 1280, "height": 800})


@pytest.fixture
def phone_page(
    browser: Any, request: pytest.FixtureRequest, problems: PageProblems
) -> Iterator[Any]:
    yield from _page(
        browser,
        request,
        problems,
        viewport={"width": 390, "height": 844},
        is_mobile=True,
        has_touch=True,
    )
