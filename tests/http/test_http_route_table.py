"""Helpers the route modules share."""

from __future__ import annotations

from aiohttp import web

from tunefleet.http.route_table import success_response


def test_success_response_is_what_json_response_writes() -> None:
    made, reference = success_response(), web.json_response({"success": True})
    assert made.body == reference.body == b'{"success": true}'
    assert made.headers["Content-Type"] == reference.headers["Content-Type"]
    assert (made.content_type, made.charset) == ("application/json", "utf-8")
    assert made.status == 200


def test_each_success_response_is_a_fresh_response() -> None:
    # A response is prepared (and its headers sent) once: sharing one would break.
    first, second = success_response(), success_response()
    assert first is not second
    first.headers["X-Request-ID"] = "a"
    assert "X-Request-ID" not in second.headers
