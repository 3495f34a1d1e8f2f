"""Every CSV tunefleet writes: text a spreadsheet would run as a formula is escaped with a
leading ``'`` (OWASP's advice), numbers stay numbers, and the metric table is bounded in
columns."""

from __future__ import annotations

import csv
import io

import pytest

from tunefleet.csv_cells import safe_cell, safe_row
from tunefleet.metric_table import csv_columns, metrics_csv


@pytest.mark.parametrize(
    "text",
    ["=cmd|' /C calc'!A0", "+1+1", "-2+3", "@SUM(A1:A2)", "\tx", "\rx", "=1", "-", "+"],
)
def test_text_a_spreadsheet_would_run_gets_a_leading_quote(text: str) -> None:
    assert safe_cell(text) == "'" + text


@pytest.mark.parametrize("text", ["-0.5", "+3", "-1e-5", "12", ".5", "-.5e3", "loss", ""])
def test_numbers_and_plain_text_are_left_alone(text: str) -> None:
    assert safe_cell(text) == text


def test_non_text_cells_pass_through_and_none_is_blank() -> None:
    assert safe_row([1, -0.5, None, "=x", "a"]) == [1, -0.5, "", "'=x", "a"]


def _point(step: int, **values: float) -> dict[str, object]:
    return {"attempt": 1, "step": step, "at": "2026-01-01T00:00:00Z", "values": values}


def test_negative_metric_values_stay_numbers_in_the_metric_csv() -> None:
    rows = list(csv.reader(io.StringIO(metrics_csv([_point(1, loss=-0.5, **{"-x": 2})]))))
    assert rows[0] == ["attempt", "step", "at", "loss", "'-x"]
    assert rows[1][3:] == ["-0.5", "2.0"]


def test_the_metric_csv_keeps_the_most_reported_columns_and_says_how_many_it_cut() -> None:
    # Finding 3 at small scale: every report names new metrics, each would be a column.
    points = [
        _point(step, loss=1.0 / (step + 1), lr=0.1, **{f"junk_{step}": 1.0}) for step in range(50)
    ]
    columns = csv_columns(points, max_metrics=4)
    assert columns.omitted == 48
    # loss and lr are in every point, so they stay; the first one-off names fill the rest,
    # and the kept columns come in the usual order (loss first, then by name).
    assert columns.names == ["loss", "junk_0", "junk_1", "lr"]
    text = metrics_csv(points, max_metrics=4)
    header = next(csv.reader(io.StringIO(text)))
    assert len(header) == 3 + 4
