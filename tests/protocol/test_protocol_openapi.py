"""The OpenAPI document is generated from the protocol's models: the worker endpoints'
bodies and answers, and the events of the worker's job stream."""

from __future__ import annotations

from typing import Any

import pytest

from tunefleet.http.openapi import SSE_EVENT_SCHEMA, build_openapi
from tunefleet.http.routes import routes
from tunefleet.protocol import endpoints


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    return build_openapi(routes, "1")


def schema_name(ref: dict[str, Any]) -> str:
    return str(ref["$ref"]).rsplit("/", 1)[-1]


def test_the_job_streams_events_are_the_protocols_models(document: dict[str, Any]) -> None:
    stream = document["paths"]["/api/workers/stream"]["get"]["responses"]["200"]
    schema = stream["content"]["text/event-stream"]["schema"]
    assert schema["required"] == SSE_EVENT_SCHEMA["required"]
    data = schema["properties"]["data"]
    assert data["contentMediaType"] == "application/json"
    names = [schema_name(ref) for ref in data["contentSchema"]["oneOf"]]
    assert names == ["JobSubmitEvent", "JobCancelEvent", "DrainEvent", "ShutdownEvent", "PingEvent"]
    components = document["components"]["schemas"]
    submit = components["JobSubmitEvent"]
    assert submit["properties"]["upload_token"]["type"] == "string"
    # Always sent: SimpleTuner's agent reads the upload fields unconditionally.
    assert {"type", "job_id", "upload_endpoint", "upload_token"} <= set(submit["required"])


@pytest.mark.parametrize(
    ("path", "model"),
    [
        ("/api/workers/register", endpoints.RegisterRequest),
        ("/api/workers/heartbeat", endpoints.HeartbeatRequest),
        ("/api/workers/job/{job_id}/status", endpoints.JobStatusRequest),
        ("/api/workers/job/{job_id}/logs", endpoints.JobLogsRequest),
        ("/api/workers/disconnect", endpoints.DisconnectRequest),
    ],
)
def test_worker_bodies_are_the_protocols_models(
    document: dict[str, Any], path: str, model: type[Any]
) -> None:
    body = document["paths"][path]["post"]["requestBody"]["content"]["application/json"]
    assert schema_name(body["schema"]).startswith(model.__name__)
    properties = document["components"]["schemas"][schema_name(body["schema"])]["properties"]
    assert set(properties) == set(model.model_fields)


def test_the_answers_agents_read_are_documented_by_their_models(document: dict[str, Any]) -> None:
    def answer(path: str, method: str) -> str:
        content = document["paths"][path][method]["responses"]["200"]["content"]
        return schema_name(content["application/json"]["schema"])

    assert answer("/api/workers/register", "post").startswith("RegisterResponse")
    assert answer("/api/workers/queue", "get").startswith("QueueCheckResponse")
    logs = answer("/api/workers/job/{job_id}/logs", "post")
    assert logs.startswith("LogBatchResponse")
    assert "stored" in document["components"]["schemas"][logs]["properties"]
