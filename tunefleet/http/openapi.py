"""Routes declared once, with what they take, return, require and can fail with; served by
aiohttp and described as an OpenAPI 3.1 document from the same declarations.

    routes = RouteTable()

    @routes.post("/api/workers/register", summary="Register and report GPUs",
                 request=RegisterRequest, response=RegisterResponse, auth="worker")
    async def register(request: web.Request) -> web.Response: ...

    routes.add_to(app)            # or app.add_routes(routes): it is a web.RouteTableDef
    document = build_openapi(routes)

The declared ``auth`` is enforced by the table (the handler runs only after
``require_worker``/``require_api`` passed), so the document cannot promise a check the
code forgets. Handlers still parse their own bodies with ``parse_body``.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler
from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

import tunefleet
from tunefleet.http.auth import AuthRequirement, authenticate_worker, authorize, parse_auth
from tunefleet.http.body import required_fields
from tunefleet.http.schemas_common import ErrorResponse

REF_TEMPLATE = "#/components/schemas/{model}"
_PATH_PARAM = re.compile(r"\{([^}:]+)(?::[^}]*)?\}")
_STANDARD_ERRORS = {
    "body": (400, "What was sent does not fit; the detail names the field and what to send"),
    "too_large": (413, "Request body over the limit (1 MiB unless the endpoint says otherwise)"),
    "worker": (401, "Invalid worker token"),
    "api": (401, "Missing or invalid API token; send Authorization: Bearer <token>"),
    "internal": (500, "Internal error; the detail names a request id to find in the log"),
    "throttled": (429, "Too many failed sign-ins from this address; retry after Retry-After s"),
}
EVENT_STREAM = "text/event-stream"
# What OpenAPI 3.1 tools read a text/event-stream schema as: one event. Every tunefleet
# stream names its event and sends one JSON object whose "type" repeats that name.
SSE_EVENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "One Server-Sent Event; data is a JSON object whose type repeats event",
    "properties": {
        "event": {"type": "string"},
        "id": {"type": "string"},
        "retry": {"type": "integer", "minimum": 0},
        "data": {
            "type": "string",
            "contentMediaType": "application/json",
            "contentSchema": {
                "type": "object",
                "properties": {"type": {"type": "string"}},
                "required": ["type"],
            },
        },
    },
    "required": ["event", "data"],
}


def event_stream_schema(events: list[dict[str, Any]]) -> dict[str, Any]:
    """SSE_EVENT_SCHEMA with the data's schema narrowed to one of the given events."""
    data = {**SSE_EVENT_SCHEMA["properties"]["data"], "contentSchema": {"oneOf": events}}
    return {**SSE_EVENT_SCHEMA, "properties": {**SSE_EVENT_SCHEMA["properties"], "data": data}}


_SECURITY_SCHEMES = {
    "bearerAuth": {"type": "http", "scheme": "bearer", "description": "An API token (tf_…)"},
    "workerToken": {
        "type": "apiKey",
        "in": "header",
        "name": "X-Worker-Token",
        "description": "The worker's token (wt_…)",
    },
}


@dataclass(frozen=True, slots=True)
class RouteSpec:
    """What one route declares about itself."""

    method: str
    path: str
    handler: Handler
    summary: str
    auth: AuthRequirement
    request_model: type[BaseModel] | None = None
    response_model: type[BaseModel] | None = None
    query_model: type[BaseModel] | None = None
    errors: Mapping[int, str] = field(default_factory=dict)
    description: str | None = None
    status: int = 200
    content_type: str = "application/json"
    tags: tuple[str, ...] = ()
    operation_id: str = ""
    include_in_schema: bool = True
    # Also answers with an event stream (a query parameter such as ?follow=true asks).
    also_streams: bool = False
    # Other media types it answers with on request (e.g. ?format=csv), as plain text.
    also_content: tuple[str, ...] = ()
    # The models of the events an event stream sends (its data's schemas).
    events: tuple[type[BaseModel], ...] = ()

    @property
    def openapi_path(self) -> str:
        """aiohttp's ``{name:regex}`` written the OpenAPI way, ``{name}``."""
        return _PATH_PARAM.sub(lambda m: "{" + m.group(1) + "}", self.path)

    @property
    def path_params(self) -> list[str]:
        return _PATH_PARAM.findall(self.path)


class RouteTable(web.RouteTableDef):
    """A ``web.RouteTableDef`` whose routes carry their API metadata and enforce their auth."""

    def __init__(self) -> None:
        super().__init__()
        self._specs: list[RouteSpec] = []

    @property
    def specs(self) -> tuple[RouteSpec, ...]:
        return tuple(self._specs)

    def route(
        self,
        method: str,
        path: str,
        *,
        summary: str = "",
        request: type[BaseModel] | None = None,
        response: type[BaseModel] | None = None,
        query: type[BaseModel] | None = None,
        errors: Mapping[int, str] | None = None,
        auth: str = "none",
        description: str | None = None,
        status: int = 200,
        content_type: str = "application/json",
        tags: Iterable[str] = (),
        include_in_schema: bool = True,
        also_streams: bool = False,
        also_content: Iterable[str] = (),
        events: Iterable[type[BaseModel]] = (),
        **kwargs: Any,
    ) -> Callable[[Handler], Handler]:
        """Declare a route; ``auth`` is "none", "worker", "api" or "api:<permission>"."""
        requirement = parse_auth(auth)
        if include_in_schema and not summary:
            raise ValueError(f"{method} {path}: give a summary (it is the API documentation)")

        def decorator(handler: Handler) -> Handler:
            if inspect.isclass(handler):
                raise TypeError(f"{method} {path}: class-based views are not supported")
            operation_id = getattr(handler, "__name__", "") or f"{method}_{path}"
            if any(s.operation_id == operation_id for s in self._specs):
                raise ValueError(f"{method} {path}: handler name {operation_id!r} is used twice")
            self._specs.append(
                RouteSpec(
                    method=method.upper(),
                    path=path,
                    handler=handler,
                    summary=summary,
                    auth=requirement,
                    request_model=request,
                    response_model=response,
                    query_model=query,
                    errors=dict(errors or {}),
                    description=description,
                    status=status,
                    content_type=content_type,
                    tags=tuple(tags) or (_default_tag(path),),
                    operation_id=operation_id,
                    include_in_schema=include_in_schema,
                    also_streams=also_streams,
                    also_content=tuple(also_content),
                    events=tuple(events),
                )
            )
            register = web.RouteTableDef.route(self, method, path, **kwargs)
            register(_guarded(handler, requirement))
            return handler

        return decorator

    def add_to(self, app: web.Application) -> None:
        app.add_routes(self)


def _guarded(handler: Handler, requirement: AuthRequirement) -> Handler:
    if requirement.kind == "none":
        return handler
    if requirement.kind == "worker":
        # authorize's worker branch without authorize: a call fewer per heartbeat.

        @functools.wraps(handler)
        async def worker_guarded(request: web.Request) -> web.StreamResponse:
            await authenticate_worker(request)
            return await handler(request)

        return worker_guarded

    @functools.wraps(handler)
    async def guarded(request: web.Request) -> web.StreamResponse:
        await authorize(request, requirement)
        return await handler(request)

    return guarded


def _default_tag(path: str) -> str:
    parts = [p for p in path.split("/") if p and not p.startswith("{")]
    if len(parts) >= 2 and parts[0] == "api":
        return parts[1]
    return parts[0] if parts else "root"


# --- the document ----------------------------------------------------------------------


def build_openapi(
    routes: RouteTable | Iterable[RouteSpec],
    version: str | None = None,
    *,
    title: str = "tunefleet orchestrator",
    description: str | None = None,
) -> dict[str, Any]:
    """An OpenAPI 3.1 document for the declared routes, schemas from the pydantic models."""
    specs = [
        s
        for s in (routes.specs if isinstance(routes, RouteTable) else routes)
        if s.include_in_schema
    ]
    refs, schemas = _component_schemas(specs)
    paths: dict[str, dict[str, Any]] = {}
    for spec in specs:
        operation = _operation(spec, refs, schemas)
        paths.setdefault(spec.openapi_path, {})[spec.method.lower()] = operation
    info: dict[str, Any] = {"title": title, "version": version or tunefleet.__version__}
    if description:
        info["description"] = description
    return {
        "openapi": "3.1.0",
        "info": info,
        "paths": paths,
        "components": {"schemas": schemas, "securitySchemes": dict(_SECURITY_SCHEMES)},
    }


Refs = dict[tuple[type[BaseModel], JsonSchemaMode], dict[str, Any]]


def _component_schemas(specs: list[RouteSpec]) -> tuple[Refs, dict[str, Any]]:
    wanted: list[tuple[type[BaseModel], JsonSchemaMode]] = [(ErrorResponse, "serialization")]
    for spec in specs:
        for model, mode in (
            (spec.request_model, "validation"),
            (spec.query_model, "validation"),
            (spec.response_model, "serialization"),
            *((event, "serialization") for event in spec.events),
        ):
            if model is not None and (model, mode) not in wanted:
                wanted.append((model, mode))  # type: ignore[arg-type]
    key_map, top = models_json_schema(wanted, ref_template=REF_TEMPLATE)
    refs: Refs = {(model, mode): dict(key_map[(model, mode)]) for model, mode in wanted}
    return refs, dict(top.get("$defs", {}))


def _error_response(meaning: str) -> dict[str, Any]:
    return {
        "description": meaning,
        "content": {
            "application/json": {"schema": {"$ref": REF_TEMPLATE.format(model="ErrorResponse")}}
        },
    }


def _operation(spec: RouteSpec, refs: Refs, schemas: dict[str, Any]) -> dict[str, Any]:
    operation: dict[str, Any] = {
        "operationId": spec.operation_id,
        "summary": spec.summary,
        "tags": list(spec.tags),
    }
    notes = [spec.description] if spec.description else []
    if spec.auth.kind == "worker":
        operation["security"] = [{"workerToken": []}]
    elif spec.auth.kind == "api":
        operation["security"] = [{"bearerAuth": []}]
        if spec.auth.permission:
            operation["x-permission"] = spec.auth.permission
            notes.append(f"Requires permission `{spec.auth.permission}`.")
    else:
        operation["security"] = []
    if notes:
        operation["description"] = "\n\n".join(notes)
    parameters = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in spec.path_params
    ]
    if spec.query_model is not None:
        parameters += _query_parameters(spec.query_model, refs, schemas)
    if parameters:
        operation["parameters"] = parameters
    if spec.request_model is not None:
        operation["requestBody"] = {
            "required": bool(required_fields(spec.request_model)),
            "content": {"application/json": {"schema": refs[(spec.request_model, "validation")]}},
        }
    operation["responses"] = _responses(spec, refs)
    return operation


def _query_parameters(model: type[BaseModel], refs: Refs, schemas: dict[str, Any]) -> list[Any]:
    name = refs[(model, "validation")]["$ref"].rsplit("/", 1)[-1]
    schema = schemas[name]
    required = set(schema.get("required", []))
    parameters = []
    for prop, prop_schema in schema.get("properties", {}).items():
        parameter: dict[str, Any] = {
            "name": prop,
            "in": "query",
            "required": prop in required,
            "schema": prop_schema,
        }
        if "description" in prop_schema:
            parameter["description"] = prop_schema["description"]
        parameters.append(parameter)
    return parameters


def _responses(spec: RouteSpec, refs: Refs) -> dict[str, Any]:
    success: dict[str, Any] = {"description": spec.summary}
    if spec.status != 204:
        if spec.response_model is not None:
            schema = refs[(spec.response_model, "serialization")]
        elif spec.content_type == EVENT_STREAM and spec.events:
            schema = event_stream_schema([refs[(event, "serialization")] for event in spec.events])
        elif spec.content_type == EVENT_STREAM:
            schema = SSE_EVENT_SCHEMA
        else:
            schema = {"type": "string"} if spec.content_type != "application/json" else {}
        success["content"] = {spec.content_type: {"schema": schema}}
        if spec.also_streams:
            success["content"][EVENT_STREAM] = {"schema": SSE_EVENT_SCHEMA}
        for media_type in spec.also_content:
            success["content"][media_type] = {"schema": {"type": "string"}}
    responses: dict[str, Any] = {str(spec.status): success}
    standard: list[tuple[int, str]] = []
    if spec.request_model is not None or spec.query_model is not None:
        standard.append(_STANDARD_ERRORS["body"])
    if spec.request_model is not None:
        standard.append(_STANDARD_ERRORS["too_large"])
    if spec.auth.kind in ("worker", "api"):
        standard.append(_STANDARD_ERRORS[spec.auth.kind])
        standard.append(_STANDARD_ERRORS["throttled"])
    if spec.auth.permission:
        standard.append((403, f"Permission denied: {spec.auth.permission}"))
    standard.append(_STANDARD_ERRORS["internal"])
    for status, meaning in [*standard, *spec.errors.items()]:
        responses[str(status)] = _error_response(meaning)
    return dict(sorted(responses.items()))


def openapi_handler(routes: RouteTable, version: str | None = None) -> Callable[[web.Request], Any]:
    """A handler serving the document (built on first request, then kept)."""
    cache: dict[str, Any] = {}

    async def serve_openapi(request: web.Request) -> web.Response:
        if "doc" not in cache:
            cache["doc"] = build_openapi(routes, version)
        return web.json_response(cache["doc"])

    return serve_openapi
