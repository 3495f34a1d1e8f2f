"""The page itself in the browser: a phone-width layout, names for every control, keyboard
access, and the page's own modules checked against Python (globs, matching, SSE parsing)."""

from __future__ import annotations

import fnmatch
import itertools
import json
import uuid
from typing import Any

import pytest

from tests.e2e.harness import Orchestrator
from tests.ui.browser_support import INSTALL_HINT, PageProblems, sign_in
from tunefleet.actors.matching import Requirements, WorkerView, unmet

expect = pytest.importorskip("playwright.sync_api", reason=INSTALL_HINT).expect

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]

# Every visible control must have a name a screen reader can read out.
UNNAMED_CONTROLS = """() => [
  ...document.querySelectorAll('button, input, select, textarea, a[href]')]
  .filter((el) => el.offsetParent !== null && el.type !== 'hidden')
  .filter((el) => {
    const labelled = el.labels && [...el.labels].some((l) => l.textContent.trim());
    const aria = el.getAttribute('aria-label') || el.getAttribute('aria-labelledby');
    const text = ['BUTTON', 'A'].includes(el.tagName) && el.textContent.trim();
    return !(labelled || aria || text);
  })
  .map((el) => el.outerHTML.slice(0, 120))"""


def module_url(page: Any, path: str) -> str:
    main_js = page.evaluate("document.querySelector('script[type=module]').src")
    return str(main_js).replace("/js/main.js", f"/js/{path}")


def test_phone_width_pages_fit_and_every_control_has_a_name(
    phone_page: Any, orchestrator: Orchestrator, problems: PageProblems
) -> None:
    page = phone_page
    orchestrator.create_worker("ui-phone-check", labels={"zone": "eu"})
    sign_in(page, orchestrator)
    for route in ("#/workers", "#/queue", "#/audit"):
        page.goto(f"{orchestrator.url}/{route}")
        page.locator("#main h1").wait_for()
        if route == "#/queue":
            page.get_by_role("button", name="+ Submit job").click()
            page.get_by_role("button", name="+ Add label requirement").click()
        page.locator("#conn[data-state='live']").wait_for()
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, f"{route} is {width} px wide on a 390 px screen"
        assert page.evaluate(UNNAMED_CONTROLS) == [], route
    assert problems.unexpected() == []


def test_keyboard_reaches_the_content_and_dialogs_trap_and_return_focus(
    page: Any, orchestrator: Orchestrator
) -> None:
    sign_in(page, orchestrator)
    page.keyboard.press("Tab")
    expect(page.get_by_role("link", name="Skip to content")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.locator("#main")).to_be_focused()

    opener = page.get_by_role("button", name="+ Create worker", exact=True)
    opener.focus()
    page.keyboard.press("Enter")
    expect(page.get_by_role("dialog").get_by_label("Name")).to_be_focused()
    page.keyboard.press("Escape")
    expect(page.get_by_role("dialog")).to_have_count(0)
    expect(opener).to_be_focused()

    # A worker action by keyboard alone; focus stays in the row as its buttons change.
    name = "ui-keyboard-" + uuid.uuid4().hex[:6]
    orchestrator.create_worker(name)
    row = page.locator("#workers-table tbody tr", has_text=name)
    row.get_by_role("button", name=f"Drain {name}").focus()
    page.keyboard.press("Enter")
    expect(page.get_by_role("dialog").get_by_role("button", name="Drain")).to_be_focused()
    page.keyboard.press("Enter")
    expect(row).to_contain_text("drain requested")
    expect(row.get_by_role("button", name=f"Resume {name}")).to_be_focused()

    page.get_by_role("link", name="Queue").focus()
    page.keyboard.press("Enter")
    expect(page.get_by_role("link", name="Queue")).to_have_attribute("aria-current", "page")
    expect(page).to_have_title("Queue · tunefleet")


# fmt: off
GLOB_PATTERNS = [
    "a100", "a100*", "us-?", "us-[ew]*", "[!h]*", "*", "", "?", "[]]", "[!]]", "[a-c]x",
    "[z-a]", "[!z-a]", "a[", "a[b", "[", "*.*", "a.b", "(x)", "x+y", "^$", "\\", "[\\]",
    "[a-]", "[-a]", "*[0-9]", "*H100*", "[^a]", "a**b", "{a,b}", "[[]", "x|y", "[a-c-e]",
    "[!a-c-e]x", "$*", "a/b*", "[a-z0-9]*-[ew]",
]
GLOB_VALUES = [
    "a100", "a100-80g", "us-1", "us-10", "us-east", "us-west", "h100", "", "]", "b", "bx",
    "a[", "a.b", "axb", "(x)", "x+y", "^$", "\\", "-", "a", "n9", "[", "^", "{a,b}", "x|y",
    "A100", "ab", "aXb", "nvidia h100 80gb hbm3", "d", "dx", "$1", "a/bc", "zz9-e", "é",
]
# fmt: on


def test_glob_matching_in_the_page_agrees_with_python_fnmatch(
    page: Any, orchestrator: Orchestrator
) -> None:
    sign_in(page, orchestrator)
    cases = list(itertools.product(GLOB_VALUES, GLOB_PATTERNS))
    got = page.evaluate(
        """async ([url, cases]) => {
            const { globMatch } = await import(url);
            return cases.map(([value, pattern]) => globMatch(value, pattern));
        }""",
        [module_url(page, "matching.js"), cases],
    )
    wrong = [c for c, g in zip(cases, got, strict=True) if g != fnmatch.fnmatchcase(*c)]
    assert wrong == []


def test_attempts_read_as_retries_spent_with_undelivered_dispatches_apart(
    page: Any, orchestrator: Orchestrator
) -> None:
    # The queue's Attempt column and the job page's Attempt fact both use attemptsText.
    sign_in(page, orchestrator)
    jobs = [
        {"attempts": 1, "max_retries": 3},  # from before the API counted undelivered ones
        {"attempts": 2, "undelivered": 0, "max_retries": 3},
        {"attempts": 3, "undelivered": 2, "max_retries": 0},  # not "3 / 1"
        {"attempts": 4, "undelivered": 1, "preempted": 2, "max_retries": 0},
        {"attempts": 3, "infrastructure_failures": 1, "max_retries": 1},  # --infra-retries
    ]
    got = page.evaluate(
        """async ([url, jobs]) => {
            const { attemptsText } = await import(url);
            return [...jobs.map((j) => attemptsText(j)), attemptsText(jobs[2], 'of')];
        }""",
        [module_url(page, "format.js"), jobs],
    )
    assert got == [
        "1 / 4",
        "2 / 4",
        "1 / 1 (2 not delivered)",
        "1 / 1 (1 not delivered, 2 preempted)",
        "2 / 2 (1 infrastructure)",
        "1 of 1 (2 not delivered)",
    ]


WORKERS = [
    WorkerView(
        "w_small",
        labels={"gpu_type": "a10", "zone": "eu-west"},
        gpu_count=1,
        gpu_vram_gb=22.5,
        gpu_name="NVIDIA A10",
    ),
    WorkerView(
        "w_big",
        labels={"gpu_type": "h100", "rack": "7"},
        gpu_count=8,
        gpu_vram_gb=79.6,
        gpu_name="NVIDIA H100 80GB HBM3",
    ),
    WorkerView("w_cpu", labels={}, gpu_count=0),
    WorkerView("w_local", is_local=True, gpu_count=2, gpu_vram_gb=40.0, gpu_name="NVIDIA A100"),
]
REQUIREMENTS = [
    Requirements("auto", gpu_count=0),
    Requirements("worker", gpu_count=1),
    Requirements("local", gpu_count=1),
    Requirements("auto", gpu_count=4),
    Requirements("auto", gpu_count=1, min_vram_gb=40),
    Requirements("auto", gpu_count=1, min_vram_gb=79.6),
    Requirements("auto", gpu_count=0, gpu_name="*h100*"),
    Requirements("auto", gpu_count=0, gpu_name="H100*"),
    Requirements("auto", gpu_count=0, labels={"gpu_type": "a1*"}),
    Requirements("auto", gpu_count=0, labels={"zone": "eu-[ew]*", "gpu_type": "a10"}),
    Requirements("auto", gpu_count=0, labels={"rack": "7"}),
    Requirements("auto", gpu_count=0, labels={"team": "*"}),
]


def test_the_qualifying_preview_gives_the_schedulers_reasons(
    page: Any, orchestrator: Orchestrator
) -> None:
    sign_in(page, orchestrator)
    pairs = [
        (
            {
                "target": r.target,
                "labels": dict(r.labels),
                "gpu_count": r.gpu_count,
                "min_vram_gb": r.min_vram_gb,
                "gpu_name": r.gpu_name,
            },
            {
                "worker_id": w.worker_id,
                "is_local": w.is_local,
                "labels": dict(w.labels),
                "gpu_count": w.gpu_count,
                "gpu_vram_gb": w.gpu_vram_gb,
                "gpu_name": w.gpu_name,
            },
            unmet(r, w),
        )
        for r in REQUIREMENTS
        for w in WORKERS
    ]
    got = page.evaluate(
        """async ([url, pairs]) => {
            const { unmet } = await import(url);
            return pairs.map(([req, worker]) => unmet(req, worker));
        }""",
        [module_url(page, "matching.js"), pairs],
    )
    assert [p[2] for p in pairs] == got


def test_the_sse_reader_handles_split_lines_comments_and_multiline_data(
    page: Any, orchestrator: Orchestrator
) -> None:
    sign_in(page, orchestrator)
    chunks = [
        ": comment\r",
        '\nid: 7\r\nevent: job\r\ndata: {"a":',
        "1}\r\n\r",
        "\n",
        "data: one\ndata: two\n\n",
        "retry: 500\nevent: ping\n\n",
        "event: end\rdata: bye",
        "",
    ]
    events = page.evaluate(
        """async ([url, chunks]) => {
            const { SseParser } = await import(url);
            const parser = new SseParser();
            const out = [];
            for (const chunk of chunks) out.push(...parser.feed(chunk));
            out.push(...parser.end());
            return { events: out, retry: parser.retry };
        }""",
        [module_url(page, "sse.js"), chunks],
    )
    assert events == {
        "events": [
            {"type": "job", "data": json.dumps({"a": 1}, separators=(",", ":")), "id": "7"},
            {"type": "message", "data": "one\ntwo", "id": "7"},
            {"type": "end", "data": "bye", "id": "7"},
        ],
        "retry": 500,
    }
