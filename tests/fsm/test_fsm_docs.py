"""docs/lifecycles.md must describe exactly the states and transitions the machines run."""

from __future__ import annotations

from pathlib import Path

import pytest

from tunefleet.fsm import JOB_LIFECYCLE, WORKER_LIFECYCLE, JobState, Lifecycle, WorkerState

PAGE = Path(__file__).resolve().parents[2] / "docs" / "lifecycles.md"


def tables(markdown: str, section: str) -> list[tuple[list[str], list[list[str]]]]:
    """(header, rows) of every Markdown table under ``## <section>``, cells stripped."""
    body = markdown.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    found: list[tuple[list[str], list[list[str]]]] = []
    current: list[list[str]] = []
    for line in [*body.splitlines(), ""]:
        if line.startswith("|"):
            current.append([cell.strip() for cell in line.strip().strip("|").split("|")])
        elif current:
            header, _rule, *rows = current
            found.append((header, rows))
            current = []
    return found


def documented_edges(markdown: str, section: str) -> set[tuple[str, str, str]]:
    return {
        (row[0].strip("`"), source.strip(), row[2])
        for header, rows in tables(markdown, section)
        if header[:3] == ["Event", "From", "To"]
        for row in rows
        for source in row[1].split(",")
    }


def documented_states(markdown: str, section: str) -> set[str]:
    return {
        row[0].strip("`")
        for header, rows in tables(markdown, section)
        if header == ["State", "Meaning"]
        for row in rows
    }


@pytest.mark.parametrize(
    ("section", "lifecycle"),
    [("Worker lifecycle", WORKER_LIFECYCLE), ("Job lifecycle", JOB_LIFECYCLE)],
)
def test_the_page_documents_every_transition_and_no_other(
    section: str, lifecycle: Lifecycle
) -> None:
    documented = documented_edges(PAGE.read_text(encoding="utf-8"), section)
    running = set(lifecycle.edges())
    assert running - documented == set(), "transitions missing from docs/lifecycles.md"
    assert documented - running == set(), "docs/lifecycles.md names transitions that do not exist"


@pytest.mark.parametrize(
    ("section", "states"),
    [("Worker lifecycle", list(WorkerState)), ("Job lifecycle", list(JobState))],
)
def test_the_page_describes_every_state(section: str, states: list[str]) -> None:
    described = documented_states(PAGE.read_text(encoding="utf-8"), section)
    assert described == set(states)


def test_a_row_dropped_from_the_page_is_noticed() -> None:
    page = PAGE.read_text(encoding="utf-8")
    edge = ("release", "draining", "draining")
    without = "\n".join(line for line in page.splitlines() if "| `release` | draining" not in line)
    assert edge in documented_edges(page, "Worker lifecycle")
    assert edge not in documented_edges(without, "Worker lifecycle")
