"""schemathesis against the orchestrator's own /api/openapi.json, every operation, with a
valid token, with none and with a wrong one: no 5xx, every status declared, every body
matching its declared schema, every error a ``{"detail"}``.

A real orchestrator process (tests/security/conftest.py ``LiveFleet``) answers. Examples
per operation are bounded and derandomized, so make test stays fast and repeatable;
``fuzz_long=<n>`` in the environment raises the count. Each example is positive or
negative data (schemathesis' two generation modes) with a chance of naming one of the
fleet's real ids, so handlers run past "not found".
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.security.conftest import LiveFleet, fuzz_examples, running_fleet
from tunefleet.http.auth import (
    API_TOKEN_AS_WORKER,
    API_UNAUTHORIZED,
    WORKER_TOKEN_AS_API,
    WORKER_UNAUTHORIZED,
)
from tunefleet.http.errors import REQUEST_ID_HEADER
from tunefleet.http.openapi import RouteSpec
from tunefleet.http.route_table import routes

schemathesis = pytest.importorskip(
    "schemathesis", reason="schemathesis is in the test extra: pip install -e '.[test]'"
)
from schemathesis import GenerationMode  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.specs.openapi.checks import (  # noqa: E402
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

pytestmark = [pytest.mark.timeout(300)]

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]
SPECS = [s for s in routes.specs if s.include_in_schema]
CREDENTIALS = ("valid", "none", "wrong")
AUTH_HEADERS = ("authorization", "x-worker-token")
# Event streams never end: read the first event, or what arrives within this long.
STREAM_READ_S = 1.0
CALL_TIMEOUT_S = 10.0


def streams(spec: RouteSpec) -> bool:
    return spec.content_type == "text/event-stream" or spec.also_streams


def examples(spec: RouteSpec, credentials: str) -> int:
    if credentials != "valid" and spec.auth.kind != "none":
        return fuzz_examples(4)  # refused before any handler runs
    if streams(spec):
        return fuzz_examples(5)  # each open stream may cost STREAM_READ_S
    return fuzz_examples(20)


@pytest.fixture(scope="module")
def live_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveFleet]:
    # Thousands of wrong credentials from one address: the throttle (tested on its own,
    # tests/server/test_api_auth_throttle.py) would answer most of them 429 unchecked.
    yield from running_fleet(tmp_path_factory, ["--auth-failures-per-window", "1000000"])


@pytest.fixture(scope="module")
def api_schema(live_fleet: LiveFleet) -> Any:
    config = schemathesis.Config.from_dict({"max-stream-events": 1})
    return schemathesis.openapi.from_url(f"{live_fleet.url}/api/openapi.json", config=config)


def credential_headers(fleet: LiveFleet, spec: RouteSpec, credentials: str) -> dict[str, str]:
    if credentials == "none":
        return {}
    if credentials == "wrong":
        # A well-formed token never issued where the route looks, and a real token of
        # the other kind beside it, which must not open this route either.
        if spec.auth.kind == "worker":
            return {"X-Worker-Token": "wt_" + "N" * 43, **fleet.admin}
        return {"Authorization": f"Bearer {fleet.owner.token}", **fleet.owner.headers}
    if spec.auth.kind == "worker":
        return fleet.owner.headers
    return fleet.admin if spec.auth.kind == "api" else {}


def steer(case: Any, fleet: LiveFleet, spec: RouteSpec, known: bool) -> None:
    """Point some examples at real ids, and keep every example away from the ids whose
    revocation, rotation or deletion would pull the fleet from under the others."""
    path = case.path_parameters or {}
    if known:
        if "job_id" in path:
            path["job_id"] = fleet.pending_job_id
        if "worker_id" in path:
            path["worker_id"] = fleet.other.worker_id
        if isinstance(case.query, dict) and "worker_id" in case.query:
            case.query["worker_id"] = fleet.owner.worker_id
        if isinstance(case.body, dict) and "worker_id" in case.body:
            case.body["worker_id"] = fleet.owner.worker_id
        if isinstance(case.body, dict) and "config_name" in case.body:
            case.body["config_name"] = "tiny"
            case.body.pop("config", None)
    if spec.path == "/api/admin/tokens/{token_id}":
        path["token_id"] = (
            "1000000" if str(path.get("token_id")).lstrip("0") == "1" else path.get("token_id")
        )
    mutating = spec.method == "DELETE" or spec.path.endswith("/token")
    if mutating and path.get("worker_id") in (fleet.owner.worker_id, fleet.other.worker_id):
        path["worker_id"] = "w_not_a_worker"
    if case.headers:
        for name in list(case.headers):
            if name.lower() in AUTH_HEADERS:
                del case.headers[name]


def strategy(operation: Any) -> Any:
    positive = operation.as_strategy(generation_mode=GenerationMode.POSITIVE)
    try:
        negative = operation.as_strategy(generation_mode=GenerationMode.NEGATIVE)
    except Exception:  # an operation with nothing to get wrong has no negative data
        return positive
    return positive | negative


def check_auth_outcome(
    spec: RouteSpec, valid: bool, expected: dict[str, str], sent: Any, status: int, body: Any
) -> None:
    """With valid credentials actually sent (negative data sometimes leaves a required
    header out), a route never says 401; otherwise it always does, in the exact words
    of docs/api.md."""
    if spec.auth.kind == "none":
        return
    name = "X-Worker-Token" if spec.auth.kind == "worker" else "Authorization"
    if valid and name in expected and sent.get(name) == expected[name]:
        assert status != 401, body
        return
    detail = WORKER_UNAUTHORIZED if spec.auth.kind == "worker" else API_UNAUTHORIZED
    # A token of the other kind is named as such (told from its prefix).
    if spec.auth.kind == "worker" and str(sent.get(name, "")).strip().startswith("tf_"):
        detail = API_TOKEN_AS_WORKER
    if spec.auth.kind == "api" and str(sent.get(name, "")).strip().startswith("Bearer wt_"):
        detail = WORKER_TOKEN_AS_API
    assert (status, body) == (401, {"detail": detail})


# Public routes have no credentials to get wrong: they run once.
CASES = [
    pytest.param(spec, credentials, id=f"{spec.method} {spec.openapi_path}-{credentials}")
    for spec in SPECS
    for credentials in CREDENTIALS
    if credentials == "valid" or spec.auth.kind != "none"
]


@pytest.mark.parametrize(("spec", "credentials"), CASES)
def test_operation_conforms(
    api_schema: Any, live_fleet: LiveFleet, spec: RouteSpec, credentials: str
) -> None:
    operation = api_schema[spec.openapi_path][spec.method]
    timeout = (CALL_TIMEOUT_S, STREAM_READ_S) if streams(spec) else CALL_TIMEOUT_S

    @settings(
        max_examples=examples(spec, credentials),
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy(operation), known=st.booleans())
    def run(case: Any, known: bool) -> None:
        steer(case, live_fleet, spec, known)
        headers = credential_headers(live_fleet, spec, credentials)
        response = case.call(base_url=live_fleet.url, headers=headers, timeout=timeout)
        case.validate_response(response, checks=CHECKS)
        assert response.headers.get(REQUEST_ID_HEADER) or response.headers.get(
            REQUEST_ID_HEADER.lower()
        ), "every response carries X-Request-ID"
        body: Any = None
        if response.status_code >= 400:
            body = response.json()
            assert set(body) == {"detail"} and "\n" not in body["detail"], body
        sent = response.request.headers
        valid = credentials == "valid"
        check_auth_outcome(spec, valid, headers, sent, response.status_code, body)

    run()
