"""RouteTable and build_openapi: routes served by aiohttp, auth enforced as declared, and an
OpenAPI 3.1 document whose references all resolve."""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from pydantic import BaseModel

from tunefleet.http import schemas as s
from tunefleet.http.auth import (
    AUTHENTICATOR_KEY,
    WORKER_PRINCIPAL_KEY,
    ApiPrincipal,
    WorkerPrincipal,
)
from tunefleet.http.errors import error_middleware
from tunefleet.http.openapi import (
    SSE_EVENT_SCHEMA,
    RouteSpec,
    RouteTable,
    build_openapi,
    openapi_handler,
)
from tunefleet.http.tokens import hash_token

ClientMaker = Callable[[web.Application], Awaitable[TestClient]]

Model = type[BaseModel] | None
# (method, path, auth, request, query, response, errors) of every endpoint in docs/api.md.
ENDPOINTS: list[tuple[str, str, str, Model, Model, Model, dict[int, str]]] = [
    ("POST", "/api/workers/register", "worker", s.RegisterRequest, None, s.RegisterResponse, {}),
    ("GET", "/api/workers/stream", "worker", None, s.WorkerIdQuery, None,
     {400: "Worker ID mismatch"}),
    ("POST", "/api/workers/heartbeat", "worker", s.HeartbeatRequest, None, s.SuccessResponse,
     {400: "Worker ID mismatch"}),
    ("POST", "/api/workers/job/{job_id}/status", "worker", s.JobStatusRequest, None,
     s.SuccessResponse, {403: "Worker not assigned to this job", 404: "Job not found: <id>",
                         409: "Stale report"}),
    ("POST", "/api/workers/job/{job_id}/logs", "worker", s.JobLogsRequest, None,
     s.SuccessResponse, {403: "Worker not assigned to this job", 404: "Job not found: <id>"}),
    ("GET", "/api/workers/queue", "worker", None, s.WorkerIdQuery, s.QueueCheckResponse, {}),
    ("POST", "/api/workers/disconnect", "worker", s.DisconnectRequest, None, s.SuccessResponse,
     {}),
    ("GET", "/api/admin/workers", "api:admin.workers", None, s.WorkerListQuery,
     s.WorkerListResponse, {}),
    ("POST", "/api/admin/workers", "api:admin.workers", s.CreateWorkerRequest, None,
     s.CreateWorkerResponse, {409: "A worker with this name exists"}),
    ("DELETE", "/api/admin/workers/{worker_id}", "api:admin.workers", None, s.DeleteWorkerQuery,
     s.DeleteWorkerResponse, {404: "Worker not found", 409: "Drain it first"}),
    ("POST", "/api/admin/workers/{worker_id}/drain", "api:admin.workers", None, None,
     s.WorkerActionResponse, {404: "Worker not found"}),
    ("POST", "/api/admin/workers/{worker_id}/resume", "api:admin.workers", None, None,
     s.WorkerActionResponse, {404: "Worker not found"}),
    ("POST", "/api/admin/workers/{worker_id}/token", "api:admin.workers", None, None,
     s.RotateTokenResponse, {404: "Worker not found"}),
    ("PUT", "/api/admin/workers/{worker_id}/labels", "api:admin.workers",
     s.UpdateWorkerLabelsRequest, None, s.WorkerSummary, {404: "Worker not found"}),
    ("POST", "/api/admin/tokens", "api:admin.workers", s.CreateApiTokenRequest, None,
     s.ApiTokenCreated, {}),
    ("GET", "/api/admin/tokens", "api:admin.workers", None, None, s.ApiTokenListResponse, {}),
    ("DELETE", "/api/admin/tokens/{token_id}", "api:admin.workers", None, None,
     s.RevokeApiTokenResponse, {404: "Token not found"}),
    ("POST", "/api/queue/submit", "api:queue.submit", s.SubmitJobRequest, None,
     s.SubmitJobResponse, {404: "Config not found"}),
    ("GET", "/api/queue", "api:queue.submit", None, s.JobListQuery, s.JobListResponse, {}),
    ("GET", "/api/queue/stats", "api:queue.submit", None, None, s.QueueStatsResponse, {}),
    ("GET", "/api/queue/position/{job_id}", "api:queue.submit", None, None, s.PositionResponse,
     {404: "Job not found: <id>"}),
    ("GET", "/api/queue/{job_id}", "api:queue.submit", None, None, s.JobDetail,
     {404: "Job not found: <id>"}),
    ("POST", "/api/queue/{job_id}/cancel", "api:queue.submit", s.CancelJobRequest, None,
     s.CancelJobResponse, {404: "Job not found: <id>", 409: "Already finished"}),
    ("GET", "/api/queue/{job_id}/logs", "api:queue.submit", None, s.JobLogsQuery,
     s.JobLogsResponse, {404: "Job not found: <id>"}),
    ("GET", "/api/audit", "api:audit.read", None, s.AuditListQuery, s.AuditListResponse, {}),
    ("GET", "/api/audit/verify", "api:audit.read", None, None, s.AuditVerifyResponse, {}),
    ("GET", "/api/health", "none", None, None, None, {}),
]  # fmt: skip


def full_table() -> RouteTable:
    routes = RouteTable()
    for method, path, auth, request, query, response, errors in ENDPOINTS:

        async def handler(request: web.Request) -> web.Response:
            return web.json_response({})

        handler.__name__ = re.sub(r"\W+", "_", f"{method}_{path}").lower()
        content_type = "text/event-stream" if path.endswith("/stream") else "application/json"
        routes.route(
            method,
            path,
            summary=f"{method} {path}",
            request=request,
            query=query,
            response=response,
            errors=errors,
            auth=auth,
            content_type=content_type,
        )(handler)
    return routes


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    return build_openapi(full_table(), "9.9.9")


def resolve(document: dict[str, Any], ref: str) -> Any:
    assert ref.startswith("#/"), ref
    node: Any = document
    for part in ref[2:].split("/"):
        node = node[part]
    return node


def all_refs(node: Any) -> list[str]:
    found: list[str] = []
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if isinstance(item.get("$ref"), str):
                found.append(item["$ref"])
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


# --- the document ----------------------------------------------------------------------


def test_document_header(document: dict[str, Any]) -> None:
    assert document["openapi"] == "3.1.0"
    assert document["info"] == {"title": "tunefleet orchestrator", "version": "9.9.9"}
    assert json.loads(json.dumps(document)) == document


def test_every_endpoint_and_method_is_there(document: dict[str, Any]) -> None:
    listed = {(m.upper(), p) for p, ops in document["paths"].items() for m in ops}
    assert listed == {(method, path) for method, path, *_ in ENDPOINTS}


def test_every_reference_resolves(document: dict[str, Any]) -> None:
    refs = all_refs(document)
    assert len(refs) > 50
    for ref in refs:
        assert isinstance(resolve(document, ref), dict), ref
    assert "$defs" not in json.dumps(document)


def test_every_request_and_response_model_is_a_component(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    for _, _, _, request, _, response, _ in ENDPOINTS:
        for model in (request, response):
            if model is not None:
                assert any(name.split("-")[0] == model.__name__ for name in schemas), model


def test_operation_ids_are_unique(document: dict[str, Any]) -> None:
    ids = [op["operationId"] for ops in document["paths"].values() for op in ops.values()]
    assert len(ids) == len(set(ids)) == len(ENDPOINTS)


def test_path_parameters_match_the_template(document: dict[str, Any]) -> None:
    for path, ops in document["paths"].items():
        in_template = re.findall(r"\{(\w+)\}", path)
        for op in ops.values():
            declared = [p["name"] for p in op.get("parameters", []) if p["in"] == "path"]
            assert declared == in_template, path


def test_query_parameters_come_from_the_query_model(document: dict[str, Any]) -> None:
    op = document["paths"]["/api/queue"]["get"]
    query = {p["name"]: p for p in op["parameters"] if p["in"] == "query"}
    assert set(query) == {"status", "target", "worker_id", "user", "team", "limit", "offset"}
    assert query["limit"]["schema"]["maximum"] == 500
    assert not query["limit"]["required"]


def test_security_follows_declared_auth(document: dict[str, Any]) -> None:
    schemes = document["components"]["securitySchemes"]
    assert schemes["workerToken"] == {
        "type": "apiKey",
        "in": "header",
        "name": "X-Worker-Token",
        "description": "The worker's token (wt_…)",
    }
    assert schemes["bearerAuth"]["scheme"] == "bearer"
    register = document["paths"]["/api/workers/register"]["post"]
    assert register["security"] == [{"workerToken": []}]
    assert "403" not in register["responses"]
    admin = document["paths"]["/api/admin/workers"]["get"]
    assert admin["security"] == [{"bearerAuth": []}]
    assert admin["x-permission"] == "admin.workers"
    assert admin["responses"]["403"]["description"] == "Permission denied: admin.workers"
    assert document["paths"]["/api/health"]["get"]["security"] == []
    for ops in document["paths"].values():
        for op in ops.values():
            for requirement in op["security"]:
                assert set(requirement) <= set(schemes)


def test_error_responses_use_the_error_schema(document: dict[str, Any]) -> None:
    status = document["paths"]["/api/workers/job/{job_id}/status"]["post"]["responses"]
    assert set(status) == {"200", "400", "401", "403", "404", "409", "413", "429", "500"}
    assert status["404"]["description"] == "Job not found: <id>"
    for code, response in status.items():
        if code.startswith(("4", "5")):
            schema = response["content"]["application/json"]["schema"]
            assert schema == {"$ref": "#/components/schemas/ErrorResponse"}
    error_schema = document["components"]["schemas"]["ErrorResponse"]
    assert error_schema["required"] == ["detail"]


def test_request_body_required_only_with_required_fields(document: dict[str, Any]) -> None:
    paths = document["paths"]
    assert paths["/api/workers/register"]["post"]["requestBody"]["required"] is True
    assert paths["/api/workers/heartbeat"]["post"]["requestBody"]["required"] is False
    assert "requestBody" not in paths["/api/admin/workers/{worker_id}/drain"]["post"]
    assert "413" not in paths["/api/admin/workers/{worker_id}/drain"]["post"]["responses"]


def test_stream_and_model_free_responses(document: dict[str, Any]) -> None:
    stream = document["paths"]["/api/workers/stream"]["get"]["responses"]["200"]
    assert stream["content"] == {"text/event-stream": {"schema": SSE_EVENT_SCHEMA}}
    health = document["paths"]["/api/health"]["get"]["responses"]
    assert health["200"]["content"] == {"application/json": {"schema": {}}}
    assert set(health) == {"200", "500"}


def test_other_media_types_a_route_answers_are_documented() -> None:
    table = RouteTable()

    async def history(request: web.Request) -> web.Response:
        return web.json_response({})

    table.route("GET", "/api/history", summary="h", also_content=("text/csv",))(history)
    content = build_openapi(table, "9.9.9")["paths"]["/api/history"]["get"]["responses"]
    assert content["200"]["content"] == {
        "application/json": {"schema": {}},
        "text/csv": {"schema": {"type": "string"}},
    }


def test_tags_come_from_the_path(document: dict[str, Any]) -> None:
    tags = {path: ops[next(iter(ops))]["tags"] for path, ops in document["paths"].items()}
    assert tags["/api/workers/register"] == ["workers"]
    assert tags["/api/admin/tokens"] == ["admin"]
    assert tags["/api/queue/stats"] == ["queue"]


def test_build_from_specs_and_defaults() -> None:
    routes = full_table()
    from_specs = build_openapi(list(routes.specs), "1")
    assert from_specs == build_openapi(routes, "1")
    assert build_openapi(routes)["info"]["version"] == __import__("tunefleet").__version__
    described = build_openapi(routes, "1", title="t", description="d")
    assert described["info"] == {"title": "t", "version": "1", "description": "d"}


def test_optional_spec_validator_accepts_it(document: dict[str, Any]) -> None:
    validator = pytest.importorskip("openapi_spec_validator")
    validator.validate(document)


# --- declaring routes ------------------------------------------------------------------


def test_a_summary_is_required_unless_hidden() -> None:
    routes = RouteTable()
    with pytest.raises(ValueError, match="give a summary"):
        routes.get("/x")

    @routes.get("/ui", include_in_schema=False)
    async def ui(request: web.Request) -> web.Response:
        return web.Response(text="ui")

    assert build_openapi(routes)["paths"] == {}
    assert len(routes) == 1


def test_a_typo_in_auth_fails_at_declaration() -> None:
    with pytest.raises(ValueError, match="auth must be"):
        RouteTable().get("/x", summary="x", auth="api:admin")


def test_handler_names_must_be_unique() -> None:
    routes = RouteTable()

    async def same(request: web.Request) -> web.Response:
        return web.Response()

    routes.get("/a", summary="a")(same)
    with pytest.raises(ValueError, match="used twice"):
        routes.get("/b", summary="b")(same)


def test_class_based_views_are_refused() -> None:
    with pytest.raises(TypeError, match="class-based views"):
        RouteTable().get("/v", summary="v")(web.View)  # type: ignore[arg-type]


def test_regex_path_parameters_become_plain_ones() -> None:
    spec = RouteSpec(
        method="GET",
        path="/api/queue/{job_id:j_[a-z0-9]+}/logs",
        handler=lambda r: None,  # type: ignore[arg-type,return-value]
        summary="x",
        auth=__import__("tunefleet.http.auth", fromlist=["x"]).AuthRequirement("none"),
    )
    assert spec.openapi_path == "/api/queue/{job_id}/logs"
    assert spec.path_params == ["job_id"]


# --- serving ---------------------------------------------------------------------------


class OneWorker:
    async def resolve_api(self, token_hash: str) -> ApiPrincipal | None:
        if token_hash == hash_token("tf_admin"):
            return ApiPrincipal("t1", "admin", frozenset({"admin.workers"}))
        return None

    async def resolve_worker(self, token_hash: str) -> WorkerPrincipal | None:
        return WorkerPrincipal("w_1") if token_hash == hash_token("wt_good") else None


def served_table(calls: list[str]) -> RouteTable:
    routes = RouteTable()

    @routes.post("/api/workers/job/{job_id}/status", summary="Report", auth="worker")
    async def report(request: web.Request) -> web.Response:
        calls.append("report")
        principal = request[WORKER_PRINCIPAL_KEY]
        return web.json_response(
            {"job_id": request.match_info["job_id"], "worker_id": principal.worker_id}
        )

    @routes.get("/api/admin/workers", summary="List", auth="api:admin.workers")
    async def list_workers(request: web.Request) -> web.Response:
        calls.append("list")
        return web.json_response({"workers": [], "total": 0})

    @routes.get("/api/health", summary="Health")
    async def health(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    routes.get("/api/openapi.json", include_in_schema=False)(openapi_handler(routes, "2"))
    return routes


@pytest.mark.parametrize("use_add_routes", [False, True])
async def test_routes_are_served_with_their_auth(
    aiohttp_client: ClientMaker, use_add_routes: bool
) -> None:
    calls: list[str] = []
    app = web.Application(middlewares=[error_middleware])
    app[AUTHENTICATOR_KEY] = OneWorker()
    routes = served_table(calls)
    if use_add_routes:
        app.add_routes(routes)
    else:
        routes.add_to(app)
    client = await aiohttp_client(app)

    denied = await client.post("/api/workers/job/j_1/status")
    assert denied.status == 401
    assert (await denied.json()) == {"detail": "Invalid worker token"}
    allowed = await client.post(
        "/api/workers/job/j_1/status", headers={"X-Worker-Token": "wt_good"}
    )
    assert (await allowed.json()) == {"job_id": "j_1", "worker_id": "w_1"}

    assert (await client.get("/api/admin/workers")).status == 401
    listed = await client.get("/api/admin/workers", headers={"Authorization": "Bearer tf_admin"})
    assert listed.status == 200
    assert calls == ["report", "list"]

    assert (await (await client.get("/api/health")).json()) == {"ok": True}
    served = await (await client.get("/api/openapi.json")).json()
    assert served["info"]["version"] == "2"
    assert set(served["paths"]) == {
        "/api/workers/job/{job_id}/status",
        "/api/admin/workers",
        "/api/health",
    }


def test_declared_handler_is_returned_unwrapped() -> None:
    routes = RouteTable()

    async def mine(request: web.Request) -> web.Response:
        return web.Response()

    assert routes.post("/x", summary="x", auth="worker")(mine) is mine
    assert routes.specs[0].handler is mine
