"""A fleet of three users in two teams, for the tenancy tests: alice (researcher) and
bob (lead) in team ml, carol (researcher) in team vision, each with a token holding
everything their role allows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tests.server.conftest import Server, bearer


@dataclass
class People:
    alice: dict[str, str]
    bob: dict[str, str]
    carol: dict[str, str]


async def make_user(
    server: Server, name: str, role: str, teams: list[str], grants: tuple[str, ...] = ()
) -> dict[str, str]:
    """Create the user and a token of theirs; the token's Authorization header."""
    body: dict[str, Any] = {"name": name, "role": role, "teams": teams, "grants": list(grants)}
    await server.ok("POST", "/api/admin/users", body)
    data = await server.ok("POST", "/api/admin/tokens", {"name": f"{name}-laptop", "user": name})
    return bearer(data["token"])


async def three_people(server: Server) -> People:
    for team in ("ml", "vision"):
        await server.ok("POST", "/api/admin/teams", {"name": team})
    return People(
        alice=await make_user(server, "alice", "researcher", ["ml"]),
        bob=await make_user(server, "bob", "lead", ["ml"]),
        carol=await make_user(server, "carol", "researcher", ["vision"]),
    )


async def submit_as(server: Server, headers: dict[str, str], **body: Any) -> str:
    body.setdefault("config", {"model_type": "lora"})
    resp = await server.client.post("/api/queue/submit", json=body, headers=headers)
    data = await resp.json()
    if resp.status != 200:
        raise AssertionError(f"submit → {resp.status} {data}")
    return str(data["job_id"])
