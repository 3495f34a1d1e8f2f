"""A job's stored metric history: JSON for pages and tools, CSV for spreadsheets."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from aiohttp import web

from tunefleet.actors.records import iso
from tunefleet.http import keys
from tunefleet.http.body import parse_query
from tunefleet.http.job_access import visible_job
from tunefleet.http.route_table import routes
from tunefleet.http.schemas_queue import JobMetricsQuery, JobMetricsResponse
from tunefleet.metric_table import MetricColumns, Point, csv_columns, metrics_csv_pieces
from tunefleet.storage.rows import JobMetricRow

CSV = "text/csv"
# Set when the CSV left metric columns out (metric_table.MAX_CSV_METRICS): how many.
OMITTED_COLUMNS_HEADER = "X-Tunefleet-Omitted-Columns"


@routes.route(
    "GET",
    "/api/queue/{job_id}/metrics",
    summary="The job's metric history (step, loss, lr, ...) per attempt; ?format=csv for CSV",
    query=JobMetricsQuery,
    response=JobMetricsResponse,
    auth="api",
    errors={404: "Job not found"},
    also_content=(CSV,),
)
async def job_metrics(request: web.Request) -> web.StreamResponse:
    job_id = request.match_info["job_id"]
    query = parse_query(request, JobMetricsQuery)
    store = request.app[keys.STORE]
    await visible_job(request, job_id)
    rows = await store.read_metrics(
        job_id, since=query.since, limit=query.limit, attempt=query.attempt
    )
    points = [point_view(row) for row in rows]
    if query.format == "csv":
        return await _send_csv(request, job_id, points)
    next_since = rows[-1].id if rows else query.since
    return web.json_response({"job_id": job_id, "points": points, "next_since": next_since})


async def _send_csv(
    request: web.Request, job_id: str, points: Sequence[Point]
) -> web.StreamResponse:
    """Formatted on a worker thread, not the event loop (up to 10,000 lines of up to
    MAX_CSV_METRICS columns), and written out piece by piece."""
    columns, pieces = await asyncio.to_thread(_csv_of, points)
    response = web.StreamResponse(
        headers={
            "Content-Type": f"{CSV}; charset=utf-8",
            "Content-Disposition": f'attachment; filename="{job_id}-metrics.csv"',
        }
    )
    if columns.omitted:
        response.headers[OMITTED_COLUMNS_HEADER] = str(columns.omitted)
    await response.prepare(request)
    for piece in pieces:
        await response.write(piece.encode())
    await response.write_eof()
    return response


def _csv_of(points: Sequence[Point]) -> tuple[MetricColumns, list[str]]:
    columns = csv_columns(points)
    return columns, list(metrics_csv_pieces(points, columns))


def point_view(row: JobMetricRow) -> dict[str, Any]:
    return {
        "seq": row.id,
        "attempt": row.attempt,
        "step": row.step,
        "at": iso(row.at),
        "values": row.values,
    }
