"""Authentication: worker and API tokens, permissions, and the audit hook for failures."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
import structlog
from aiohttp import web
from aiohttp.test_utils import TestClient, make_mocked_request

from tunefleet.http.auth import (
    ADMIN_USERS,
    ADMIN_WEBHOOKS,
    ADMIN_WORKERS,
    ALL_PERMISSIONS,
    API_TOKEN_AS_WORKER,
    API_UNAUTHORIZED,
    AUDIT_READ,
    AUTH_FAILURE_HOOK_KEY,
    AUTHENTICATOR_KEY,
    QUEUE_ADMIN,
    QUEUE_APPROVE,
    QUEUE_COMMAND,
    QUEUE_LOCAL,
    QUEUE_SUBMIT,
    USAGE_READ,
    WORKER_TOKEN_AS_API,
    WORKER_UNAUTHORIZED,
    ApiPrincipal,
    AuthRequirement,
    WorkerPrincipal,
    check_grantable,
    extract_bearer,
    extract_worker_token,
    parse_auth,
    require_api,
    require_worker,
)
from tunefleet.http.errors import ApiError, error_middleware
from tunefleet.http.tokens import hash_token, new_api_token, new_worker_token

ClientMaker = Callable[[web.Application], Awaitable[TestClient]]

WORKER_TOKEN = new_worker_token()
ADMIN_TOKEN = new_api_token()
SUBMIT_TOKEN = new_api_token()
SECRETS = (WORKER_TOKEN, ADMIN_TOKEN, SUBMIT_TOKEN)


class FakeAuthenticator:
    def __init__(self) -> None:
        self.api = {
            hash_token(ADMIN_TOKEN): ApiPrincipal("t_admin", "admin", frozenset(ALL_PERMISSIONS)),
            hash_token(SUBMIT_TOKEN): ApiPrincipal("t_ci", "ci", frozenset({QUEUE_SUBMIT})),
        }
        self.workers = {hash_token(WORKER_TOKEN): WorkerPrincipal("w_1")}
        self.api_lookups = 0

    async def resolve_api(self, token_hash: str) -> ApiPrincipal | None:
        self.api_lookups += 1
        return self.api.get(token_hash)

    async def resolve_worker(self, token_hash: str) -> WorkerPrincipal | None:
        return self.workers.get(token_hash)


class Hook:
    def __init__(self, *, fail: bool = False, is_async: bool = True) -> None:
        self.calls: list[tuple[str, str]] = []
        self.fail = fail
        self.is_async = is_async

    def __call__(self, request: web.Request, kind: str, reason: str) -> Awaitable[None] | None:
        assert isinstance(request, web.Request)
        self.calls.append((kind, reason))
        if self.fail:
            raise RuntimeError("audit store down")
        if self.is_async:
            return self._done()
        return None

    async def _done(self) -> None:
        return None


def build_app(authenticator: FakeAuthenticator | None, hook: Hook | None) -> web.Application:
    app = web.Application(middlewares=[error_middleware])
    if authenticator is not None:
        app[AUTHENTICATOR_KEY] = authenticator
    if hook is not None:
        app[AUTH_FAILURE_HOOK_KEY] = hook
    routes = web.RouteTableDef()

    @routes.post("/worker")
    async def worker(request: web.Request) -> web.Response:
        principal = await require_worker(request)
        again = await require_worker(request)
        return web.json_response({"worker_id": principal.worker_id, "same": again is principal})

    @routes.get("/admin")
    async def admin(request: web.Request) -> web.Response:
        principal = await require_api(request, ADMIN_WORKERS)
        await require_api(request, ADMIN_WORKERS)  # cached: no second lookup
        return web.json_response({"token_id": principal.token_id})

    @routes.get("/any")
    async def any_token(request: web.Request) -> web.Response:
        principal = await require_api(request)
        return web.json_response({"name": principal.name})

    app.add_routes(routes)
    return app


@pytest.fixture
def authenticator() -> FakeAuthenticator:
    return FakeAuthenticator()


@pytest.fixture
def hook() -> Hook:
    return Hook()


@pytest.fixture
async def client(
    aiohttp_client: ClientMaker, authenticator: FakeAuthenticator, hook: Hook
) -> TestClient:
    return await aiohttp_client(build_app(authenticator, hook))


def assert_no_secret(*values: object) -> None:
    for value in values:
        for secret in SECRETS:
            assert secret not in repr(value)


# --- extraction ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("Bearer tf_abc", "tf_abc"),
        ("bearer tf_abc", "tf_abc"),
        ("BEARER   tf_abc  ", "tf_abc"),
        ("Bearer", None),
        ("Bearer    ", None),
        ("Basic dXNlcjpwYXNz", None),
        ("tf_abc", None),
        ("", None),
    ],
)
def test_extract_bearer(header: str, token: str | None) -> None:
    request = make_mocked_request("GET", "/", headers={"Authorization": header})
    assert extract_bearer(request) == token


def test_extract_bearer_without_header() -> None:
    assert extract_bearer(make_mocked_request("GET", "/")) is None


@pytest.mark.parametrize(
    ("value", "token"),
    [("wt_abc", "wt_abc"), ("  wt_abc \t", "wt_abc"), ("   ", None), ("", None)],
)
def test_extract_worker_token_strips_whitespace(value: str, token: str | None) -> None:
    request = make_mocked_request("GET", "/", headers={"X-Worker-Token": value})
    assert extract_worker_token(request) == token


def test_extract_worker_token_without_header() -> None:
    assert extract_worker_token(make_mocked_request("GET", "/")) is None


# --- worker tokens ---------------------------------------------------------------------


async def test_a_valid_worker_token_names_its_worker(client: TestClient, hook: Hook) -> None:
    response = await client.post("/worker", headers={"X-Worker-Token": WORKER_TOKEN})
    assert response.status == 200
    assert (await response.json()) == {"worker_id": "w_1", "same": True}
    assert hook.calls == []


async def test_a_padded_worker_token_still_works(client: TestClient) -> None:
    response = await client.post("/worker", headers={"X-Worker-Token": f" {WORKER_TOKEN}\t"})
    assert response.status == 200


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        ({}, "no X-Worker-Token header"),
        ({"X-Worker-Token": "wt_" + "x" * 43}, "unknown or revoked worker token"),
        ({"Authorization": f"Bearer {WORKER_TOKEN}"}, "no X-Worker-Token header"),
    ],
)
async def test_worker_auth_failures_are_401_invalid_worker_token(
    client: TestClient, hook: Hook, headers: dict[str, str], reason: str
) -> None:
    with structlog.testing.capture_logs() as logs:
        response = await client.post("/worker", headers=headers)
    assert response.status == 401
    assert (await response.json()) == {"detail": "Invalid worker token"}
    assert WORKER_UNAUTHORIZED == "Invalid worker token"
    assert hook.calls == [("worker", reason)]
    assert_no_secret(hook.calls, logs)


async def test_an_api_token_on_a_worker_endpoint_says_a_worker_token_is_needed(
    client: TestClient, hook: Hook
) -> None:
    with structlog.testing.capture_logs() as logs:
        response = await client.post("/worker", headers={"X-Worker-Token": ADMIN_TOKEN})
    assert response.status == 401
    detail = (await response.json())["detail"]
    assert detail == API_TOKEN_AS_WORKER
    # The protocol's words come first, so an agent matching on them still works.
    assert detail.startswith("Invalid worker token: this is an API token (tf_...)")
    assert "needs its worker token (wt_...)" in detail
    assert hook.calls == [("worker", "unknown or revoked worker token")]
    assert_no_secret(hook.calls, logs)


# --- API tokens ------------------------------------------------------------------------


async def test_an_admin_token_passes_and_is_looked_up_once(
    client: TestClient, authenticator: FakeAuthenticator
) -> None:
    response = await client.get("/admin", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    assert response.status == 200
    assert (await response.json()) == {"token_id": "t_admin"}
    assert authenticator.api_lookups == 1


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        ({}, "no Authorization header"),
        ({"Authorization": "Bearer "}, "empty Bearer token"),
        ({"Authorization": f"Basic {ADMIN_TOKEN}"}, "Authorization header is not a Bearer token"),
        ({"Authorization": "Bearer tf_unknown"}, "unknown or revoked API token"),
        ({"X-Worker-Token": WORKER_TOKEN}, "no Authorization header"),
    ],
)
async def test_api_auth_failures_are_401(
    client: TestClient, hook: Hook, headers: dict[str, str], reason: str
) -> None:
    with structlog.testing.capture_logs() as logs:
        response = await client.get("/admin", headers=headers)
    assert response.status == 401
    assert (await response.json()) == {"detail": API_UNAUTHORIZED}
    assert API_UNAUTHORIZED == "Missing or invalid API token; send Authorization: Bearer <token>"
    assert response.headers["WWW-Authenticate"] == "Bearer"
    assert hook.calls == [("api", reason)]
    assert_no_secret(hook.calls, logs)


async def test_a_token_without_the_permission_is_403(client: TestClient, hook: Hook) -> None:
    with structlog.testing.capture_logs() as logs:
        response = await client.get("/admin", headers={"Authorization": f"Bearer {SUBMIT_TOKEN}"})
    assert response.status == 403
    assert (await response.json()) == {"detail": "Permission denied: admin.workers"}
    assert hook.calls == [("api", "token t_ci lacks admin.workers")]
    assert_no_secret(hook.calls, logs)


async def test_no_permission_named_means_any_valid_token(client: TestClient) -> None:
    response = await client.get("/any", headers={"Authorization": f"Bearer {SUBMIT_TOKEN}"})
    assert response.status == 200
    assert (await response.json()) == {"name": "ci"}


# --- the hook --------------------------------------------------------------------------


async def test_a_sync_hook_is_called(aiohttp_client: ClientMaker) -> None:
    hook = Hook(is_async=False)
    client = await aiohttp_client(build_app(FakeAuthenticator(), hook))
    response = await client.post("/worker")
    assert response.status == 401
    assert hook.calls == [("worker", "no X-Worker-Token header")]


async def test_a_failing_hook_does_not_change_the_answer(aiohttp_client: ClientMaker) -> None:
    hook = Hook(fail=True)
    client = await aiohttp_client(build_app(FakeAuthenticator(), hook))
    with structlog.testing.capture_logs() as logs:
        response = await client.get("/admin")
    assert response.status == 401
    assert any(e["event"] == "auth_failure_hook_failed" for e in logs)


async def test_no_hook_is_fine(aiohttp_client: ClientMaker) -> None:
    client = await aiohttp_client(build_app(FakeAuthenticator(), None))
    assert (await client.get("/admin")).status == 401


async def test_missing_authenticator_is_a_server_bug_not_an_open_door(
    aiohttp_client: ClientMaker,
) -> None:
    client = await aiohttp_client(build_app(None, None))
    response = await client.get("/admin", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    assert response.status == 500


async def test_authenticator_on_a_parent_app_serves_a_sub_app(
    aiohttp_client: ClientMaker,
) -> None:
    parent = web.Application(middlewares=[error_middleware])
    parent[AUTHENTICATOR_KEY] = FakeAuthenticator()
    child = web.Application()

    async def handler(request: web.Request) -> web.Response:
        return web.json_response({"w": (await require_worker(request)).worker_id})

    child.router.add_post("/x", handler)
    parent.add_subapp("/sub", child)
    client = await aiohttp_client(parent)
    response = await client.post("/sub/x", headers={"X-Worker-Token": WORKER_TOKEN})
    assert (await response.json()) == {"w": "w_1"}


async def test_a_sub_app_with_its_own_authenticator_uses_it(aiohttp_client: ClientMaker) -> None:
    parent = web.Application(middlewares=[error_middleware])
    parent[AUTHENTICATOR_KEY] = FakeAuthenticator()
    child = web.Application()
    own = FakeAuthenticator()
    own.workers = {hash_token(WORKER_TOKEN): WorkerPrincipal("w_child")}
    child[AUTHENTICATOR_KEY] = own

    async def handler(request: web.Request) -> web.Response:
        return web.json_response({"w": (await require_worker(request)).worker_id})

    child.router.add_post("/x", handler)
    parent.router.add_post("/x", handler)
    parent.add_subapp("/sub", child)
    client = await aiohttp_client(parent)
    headers = {"X-Worker-Token": WORKER_TOKEN}
    assert (await (await client.post("/sub/x", headers=headers)).json()) == {"w": "w_child"}
    assert (await (await client.post("/x", headers=headers)).json()) == {"w": "w_1"}


# --- permissions -----------------------------------------------------------------------


def test_permission_names() -> None:
    assert (ADMIN_WORKERS, QUEUE_SUBMIT, QUEUE_ADMIN, AUDIT_READ) == (
        "admin.workers",
        "queue.submit",
        "queue.admin",
        "audit.read",
    )
    assert (QUEUE_COMMAND, QUEUE_LOCAL) == ("queue.command", "queue.local")
    assert (ADMIN_USERS, QUEUE_APPROVE, USAGE_READ) == (
        "admin.users",
        "queue.approve",
        "usage.read",
    )
    assert set(ALL_PERMISSIONS) == {
        ADMIN_WORKERS, QUEUE_SUBMIT, QUEUE_ADMIN, AUDIT_READ, QUEUE_COMMAND, QUEUE_LOCAL,
        ADMIN_USERS, QUEUE_APPROVE, USAGE_READ, ADMIN_WEBHOOKS,
    }  # fmt: skip
    assert ADMIN_WEBHOOKS == "admin.webhooks"


def test_a_token_grants_only_what_it_holds() -> None:
    ci = ApiPrincipal("t_ci", "ci", frozenset({QUEUE_SUBMIT, ADMIN_WORKERS}))
    check_grantable(ci, [QUEUE_SUBMIT])
    check_grantable(ci, [])
    with pytest.raises(ApiError) as caught:
        check_grantable(ci, [QUEUE_SUBMIT, AUDIT_READ, QUEUE_ADMIN])
    assert caught.value.status == 403
    assert caught.value.detail == (
        "Permission denied: cannot grant audit.read, queue.admin, which this token lacks"
    )


@pytest.mark.parametrize(
    ("spec", "requirement"),
    [
        ("none", AuthRequirement("none")),
        ("worker", AuthRequirement("worker")),
        ("api", AuthRequirement("api")),
        ("api:admin.workers", AuthRequirement("api", "admin.workers")),
        ("api:audit.read", AuthRequirement("api", "audit.read")),
    ],
)
def test_parse_auth(spec: str, requirement: AuthRequirement) -> None:
    assert parse_auth(spec) == requirement


@pytest.mark.parametrize("spec", ["", "Worker", "api:", "api:admin", "bearer", "worker:x"])
def test_parse_auth_refuses_typos(spec: str) -> None:
    with pytest.raises(ValueError, match="auth must be"):
        parse_auth(spec)


async def test_a_worker_token_on_an_api_endpoint_says_an_api_token_is_needed(
    client: TestClient, hook: Hook
) -> None:
    with structlog.testing.capture_logs() as logs:
        response = await client.get("/admin", headers={"Authorization": f"Bearer {WORKER_TOKEN}"})
    assert response.status == 401
    detail = (await response.json())["detail"]
    assert detail == WORKER_TOKEN_AS_API
    assert "this is a worker token (wt_...)" in detail
    assert "send an API token (tf_...)" in detail
    assert response.headers["WWW-Authenticate"] == "Bearer"
    assert hook.calls == [("api", "unknown or revoked API token")]
    assert_no_secret(hook.calls, logs)
