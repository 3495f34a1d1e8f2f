"""Property: no path parameter or header value a client can send makes the orchestrator
answer 5xx. These are the inputs the OpenAPI document does not describe (Last-Event-ID,
X-Request-ID, the credentials themselves) or describes only as "a string" (path ids), so
schemathesis does not reach their edges: Unicode digits such as "²" (``str.isdigit`` says
yes, ``int`` says no), numbers beyond 64 bits, percent-escapes, control bytes.

Runs against a real orchestrator process (tests/security/conftest.py ``LiveFleet``)."""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.security.conftest import LiveFleet, Reply, fuzz_examples, running_fleet
from tunefleet.http.errors import REQUEST_ID_HEADER
from tunefleet.http.openapi import RouteSpec
from tunefleet.http.route_table import routes

SETTINGS = settings(
    max_examples=fuzz_examples(30),
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

PATH_ROUTES = [s for s in routes.specs if s.path_params]
REVOKE = next(s for s in PATH_ROUTES if s.path == "/api/admin/tokens/{token_id}")
# Values that sit on the edges of id parsing.
EDGE_IDS = [
    "²",
    "١٢",
    "0",
    "-1",
    "1.5",
    "99999999999999999999",
    "9" * 5000,
    "9223372036854775808",
    "..",
    "%00",
    "w_" + "a" * 300,
    "j_\u0000",
]
path_values = st.one_of(
    st.sampled_from(EDGE_IDS),
    st.text(min_size=1, max_size=40),
    st.from_regex(r"\A[0-9]{1,40}\Z"),
    st.from_regex(r"\A[wj]_[0-9a-f]{1,20}\Z"),
)
# Header values http.client can send: any byte but CR, LF and NUL.
header_bytes = st.one_of(
    st.binary(max_size=80).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b"")),
    st.sampled_from([v.encode() for v in EDGE_IDS]),
    st.from_regex(rb"\A[0-9]{1,30}\Z"),
).map(lambda b: b.replace(b"\0", b"").strip() or b"x")


@pytest.fixture(scope="module")
def live_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveFleet]:
    # Thousands of wrong credentials from one address: the throttle (tested on its own,
    # tests/server/test_api_auth_throttle.py) would answer most of them 429 unchecked.
    yield from running_fleet(tmp_path_factory, ["--auth-failures-per-window", "1000000"])


def assert_handled(reply: Reply, what: str) -> bool:
    """No 5xx; an answer from the application carries a request id and, when it is an
    error, a ``{"detail"}`` body. False when aiohttp's HTTP parser refused the bytes
    itself (a control character in a header), before the application saw them."""
    assert reply.status < 500, f"{what}: {reply.status} {reply.text[:300]}"
    if reply.status == 400 and reply.headers.get_content_type() == "text/plain":
        return False
    assert reply.headers.get(REQUEST_ID_HEADER), what
    if reply.status >= 400:
        assert set(reply.json()) == {"detail"}, what
    return True


def credentials(fleet: LiveFleet, spec: RouteSpec) -> dict[str, str]:
    if spec.auth.kind == "worker":
        return fleet.owner.headers
    return fleet.admin if spec.auth.kind == "api" else {}


def protected(fleet: LiveFleet, spec: RouteSpec, value: str) -> bool:
    """Ids whose rotation, revocation or deletion would pull the fleet from under the
    other examples: the admin token (id 1) and the two workers."""
    if spec.path == "/api/admin/tokens/{token_id}":
        return value.strip().lstrip("0") in ("1", "")
    return value in (fleet.owner.worker_id, fleet.other.worker_id) and spec.method != "GET"


@SETTINGS
@given(spec=st.sampled_from(PATH_ROUTES), value=path_values)
@example(spec=REVOKE, value="²")
@example(spec=REVOKE, value="99999999999999999999")
def test_any_path_parameter_is_handled(live_fleet: LiveFleet, spec: RouteSpec, value: str) -> None:
    if protected(live_fleet, spec, value):
        return
    path = spec.path
    for name in spec.path_params:
        path = path.replace("{" + name + "}", urllib.parse.quote(value, safe=""))
    body: dict[str, object] | None = {} if spec.method in ("POST", "PUT", "PATCH") else None
    reply = live_fleet.call(
        spec.method,
        path,
        headers=credentials(live_fleet, spec),
        body=body,
        read_body=spec.content_type != "text/event-stream",
    )
    assert_handled(reply, f"{spec.method} {path[:80]}")


def test_unicode_and_huge_token_ids_are_not_found(live_fleet: LiveFleet) -> None:
    """The regression examples by themselves: once 500s (int("²"), a 20-digit id)."""
    for raw in ("²", "99999999999999999999", "9" * 5000):
        path = f"/api/admin/tokens/{urllib.parse.quote(raw)}"
        reply = live_fleet.call("DELETE", path, headers=live_fleet.admin)
        assert reply.status == 404, (raw[:30], reply.text)
        assert reply.json()["detail"].startswith("API token not found")


@SETTINGS
@given(value=header_bytes)
@example(value="²".encode())
@example(value=b"99999999999999999999999")
def test_any_last_event_id_is_handled(live_fleet: LiveFleet, value: bytes) -> None:
    owner = live_fleet.owner
    reply = live_fleet.call(
        "GET",
        f"/api/workers/stream?worker_id={owner.worker_id}",
        headers={**owner.headers, "Last-Event-ID": value},
        read_body=False,
    )
    # The stream opens (an unusable id means "no replay"), or the request is refused.
    assert reply.status == 200 or 400 <= reply.status < 500, (value, reply.status)


@SETTINGS
@given(
    spec=st.sampled_from([s for s in routes.specs if s.auth.kind != "none"]),
    header=st.sampled_from(["Authorization", "X-Worker-Token", REQUEST_ID_HEADER]),
    value=header_bytes,
    prefix=st.sampled_from([b"", b"Bearer ", b"bearer  ", b"Basic ", b"wt_", b"tf_"]),
)
def test_any_credential_or_request_id_header_is_handled(
    live_fleet: LiveFleet, spec: RouteSpec, header: str, value: bytes, prefix: bytes
) -> None:
    path = spec.path
    for name in spec.path_params:
        path = path.replace("{" + name + "}", "x_unknown")
    headers: dict[str, str | bytes] = {header: prefix + value}
    reply = live_fleet.call(
        spec.method,
        path,
        headers=headers,
        body={} if spec.method == "POST" else None,
        read_body=spec.content_type != "text/event-stream",
    )
    if assert_handled(reply, f"{spec.method} {spec.path} {header}"):
        # Garbage credentials (or none, beside a request id) never pass.
        assert reply.status == 401, (header, prefix + value, reply.status)
