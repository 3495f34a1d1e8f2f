"""What the browser tests and the docs screenshot script share: finding Chromium, the
flags it runs with, signing in, and collecting what the page complained about."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.e2e.harness import ADMIN_TOKEN, Orchestrator

SCREENSHOTS = Path(__file__).parent / "screenshots"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
INSTALL_HINT = (
    "install it with `apt-get install chromium` (Debian/Ubuntu) and "
    "`pip install playwright` (no `playwright install` needed), or set TUNEFLEET_CHROMIUM"
)
# How long a browser-side expectation may take: live updates arrive in well under a
# second, but the machine may be busy (agents and the orchestrator are real processes).
UI_TIMEOUT_MS = 20_000


def chromium_path(candidates: Iterable[str | None] | None = None) -> str | None:
    """TUNEFLEET_CHROMIUM, else `chromium` on the PATH, else Debian's path; None if none runs."""
    if candidates is None:
        candidates = [
            os.environ.get("TUNEFLEET_CHROMIUM"),
            shutil.which("chromium"),
            "/usr/bin/chromium",
        ]
    for candidate in candidates:
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


@dataclass
class PageProblems:
    """What the browser complained about: script errors and blocked resources (CSP)."""

    errors: list[str] = field(default_factory=list)

    def unexpected(self) -> list[str]:
        # A refused token or permission is logged by Chromium as a failed resource load;
        # the tests provoke those on purpose.
        expected = re.compile(r"status of (401|403)")
        return [e for e in self.errors if not expected.search(e)]


def sign_in(page: Any, orch: Orchestrator, token: str = ADMIN_TOKEN, route: str = "") -> None:
    page.goto(f"{orch.url}/{route}")
    page.get_by_label("API token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    page.locator("#app").wait_for(state="visible")
    page.locator("#conn[data-state='live']").wait_for()
