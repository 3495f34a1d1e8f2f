"""Users and teams wire schemas (``admin.users``): who may use the fleet, in which teams,
with which role. Names are plain (letters, digits, '.', '_', '-') and never change."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field

from tunefleet.http.roles import GrantName, RoleName
from tunefleet.http.schemas_common import PlainName, ResponseModel, StrictRequestModel


def _unique(values: list[str]) -> list[str]:
    return list(dict.fromkeys(values))


Grants = Annotated[list[GrantName], Field(max_length=2), AfterValidator(_unique)]
TeamNames = Annotated[list[PlainName], Field(max_length=64), AfterValidator(_unique)]


class CreateUserRequest(StrictRequestModel):
    """POST /api/admin/users. ``teams``: each must exist; the first is the user's default
    (the team their submits go to unless they name another)."""

    name: PlainName
    role: RoleName = "researcher"
    teams: TeamNames = Field(default_factory=list)
    grants: Grants = Field(
        default_factory=list,
        description="Separate grants beside the role: queue.command, queue.local",
    )


class SetRoleRequest(StrictRequestModel):
    """POST /api/admin/users/{name}/role. ``grants`` unset: the user's stay as they are."""

    role: RoleName
    grants: Grants | None = None


class UserTeam(ResponseModel):
    name: str
    default: bool = False


class UserView(ResponseModel):
    name: str
    role: str
    grants: list[str] = Field(default_factory=list)
    permissions: list[str] = Field(
        default_factory=list, description="What the role and grants allow a token of theirs"
    )
    disabled: bool = False
    teams: list[UserTeam] = Field(default_factory=list)
    default_team: str | None = None
    created_at: str | None = None
    updated_at: str | None = None


class UserListResponse(ResponseModel):
    users: list[UserView]
    total: int


class CreateTeamRequest(StrictRequestModel):
    """POST /api/admin/teams."""

    name: PlainName


class TeamMemberView(ResponseModel):
    user: str
    default: bool = Field(default=False, description="This is the user's default team")


class TeamView(ResponseModel):
    name: str
    members: list[TeamMemberView] = Field(default_factory=list)
    created_at: str | None = None


class TeamListResponse(ResponseModel):
    teams: list[TeamView]
    total: int


class AddMemberRequest(StrictRequestModel):
    """POST /api/admin/teams/{name}/members. ``default``: make it the user's default
    team (a user's first team is their default anyway)."""

    user: PlainName
    default: bool = False


class RemoveMemberResponse(ResponseModel):
    success: bool = True
    team: str
    user: str


# --- signing in with a password (issue 24) ----------------------------------------------

Password = Annotated[str, Field(min_length=1, max_length=1024)]


class LoginRequest(StrictRequestModel):
    username: Annotated[str, Field(min_length=1, max_length=128)]
    password: Password


class SessionView(ResponseModel):
    user: str
    role: str
    permissions: list[str]
    teams: list[str]
    default_team: str | None = None
    csrf_token: str | None = Field(
        default=None,
        description="Send as X-CSRF-Token on every change made with the session cookie "
        "(absent when the request used a token)",
    )
    idle_s: float
    max_s: float


class SetPasswordRequest(StrictRequestModel):
    password: Password


class ChangePasswordRequest(StrictRequestModel):
    current_password: Password
    new_password: Password
