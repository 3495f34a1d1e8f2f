"""First start: the admin API token, and the banner that tells a person what to do next."""

from __future__ import annotations

import json
import shlex
from typing import TYPE_CHECKING

import structlog

from tunefleet.errors import TunefleetError
from tunefleet.http.auth import ALL_PERMISSIONS
from tunefleet.http.tokens import hash_token, new_api_token
from tunefleet.jobconfigs import ConfigCatalog

if TYPE_CHECKING:
    from tunefleet.actors.local_isolation import LocalIsolation
    from tunefleet.http.app import ServerOptions
    from tunefleet.storage.store import Store

log = structlog.get_logger(__name__)

ADMIN_TOKEN_NAME = "admin"
# The user the admin token belongs to; migration 10 creates it in every database.
ADMIN_USER_NAME = "admin"
EXAMPLE_CONFIG = "tiny-example"
INLINE_EXAMPLE = {
    "tunefleet_command": ["python", "-m", "tunefleet.examples.tiny_trainer"],
    "max_train_steps": 50,
}


async def ensure_admin_token(store: Store, given: str | None) -> str | None:
    """Make sure an admin can sign in. Returns a token to print once, or None.

    With ``given`` (``--admin-token``/``TUNEFLEET_ADMIN_TOKEN``), that token is made
    valid with every permission. Otherwise a token is generated only when the database
    has no API token at all, i.e. on the very first start. Either belongs to the user
    ``admin``.
    """
    admin = await store.users.user(ADMIN_USER_NAME)
    user_id = admin.id if admin is not None else None
    if given:
        token_hash = hash_token(given)
        if await store.api_token_by_hash(token_hash) is None:
            await store.create_api_token(
                name=ADMIN_TOKEN_NAME,
                token_hash=token_hash,
                permissions=list(ALL_PERMISSIONS),
                user_id=user_id,
            )
            log.info("admin token from --admin-token registered")
        return None
    if await store.list_api_tokens(include_revoked=True):
        return None
    token = new_api_token()
    await store.create_api_token(
        name=ADMIN_TOKEN_NAME,
        token_hash=hash_token(token),
        permissions=list(ALL_PERMISSIONS),
        user_id=user_id,
    )
    return token


def startup_banner(
    options: ServerOptions, new_admin_token: str | None, local: LocalIsolation | None = None
) -> str:
    host = "127.0.0.1" if options.host in ("0.0.0.0", "::") else options.host
    url = f"{options.scheme}://{host}:{options.port}"
    token_ref = new_admin_token or "$ADMIN_TOKEN"
    lines = [
        f"tunefleet orchestrator listening on {options.scheme}://{options.host}:{options.port}",
        f"  web UI:        {url}/",
        f"  data dir:      {options.data_dir}",
        f"  configs dir:   {options.configs_dir}",
    ]
    if local is not None:  # who the local runner's trainers run as, or why it is off
        lines.append(f"  {local.banner}")
    if new_admin_token:
        lines += [
            "",
            "  Admin API token (shown only this once; store it now):",
            f"    export ADMIN_TOKEN={new_admin_token}",
        ]
    else:
        lines += ["", "  Sign in with your admin API token (export ADMIN_TOKEN=tf_...)."]
    # -sS: quiet, but a failure (refused, TLS) is still said, not hidden.
    curl = "curl -sS"
    worker = f"tunefleet worker --orchestrator-url {url} --worker-token wt_... --persistent"
    trust = options.trust_cert
    if trust is not None:
        curl += f" --cacert {shlex.quote(str(trust))}"
        worker += f" --ca-cert {shlex.quote(str(trust))}"
    lines += [
        "",
        "  Create a worker:",
        f'    {curl} -X POST {url}/api/admin/workers -H "Authorization: Bearer {token_ref}" \\',
        '      -d \'{"name": "gpu-worker-1", "worker_type": "persistent"}\'',
        "  Connect it (on the GPU machine, with the token from that response):",
        f"    {worker}",
        _submit_heading(local),
        f'    {curl} -X POST {url}/api/queue/submit -H "Authorization: Bearer {token_ref}" \\',
        f"      -d '{_example_job(options)}'",
    ]
    if trust is not None:
        lines.append(
            f"  (The certificate is self-signed: copy {trust} to each worker machine"
            " and pass that copy to --ca-cert.)"
        )
    if options.host in ("127.0.0.1", "localhost", "::1"):
        lines.append(
            "  (Listening on loopback only: use --host 0.0.0.0 for workers on other machines.)"
        )
    return "\n".join(lines)


def _submit_heading(local: LocalIsolation | None) -> str:
    """Where the suggested job runs: with the admin token, ``auto`` falls back to the
    local runner wherever it runs admins' jobs."""
    if local is not None and local.off_reason is None:
        return "  Submit a job (with no worker connected, it runs here, on the local runner):"
    return "  Submit a job (it waits for a worker: the local runner is off):"


def _example_job(options: ServerOptions) -> str:
    """The sample configuration where the configs directory has it, else the same
    trainer inline (the admin token may name the command), so the line works as printed."""
    try:
        ConfigCatalog(options.configs_dir).load(EXAMPLE_CONFIG)
    except TunefleetError:
        body: dict[str, object] = {"config": INLINE_EXAMPLE, "target": "auto"}
    else:
        body = {"config_name": EXAMPLE_CONFIG, "target": "auto"}
    return json.dumps(body)


def standby_banner(options: ServerOptions) -> str:
    """Printed by a process that starts as a standby (another one holds the lease)."""
    return "\n".join(
        [
            "tunefleet orchestrator (standby) listening on "
            f"{options.scheme}://{options.host}:{options.port}",
            f"  Another orchestrator is active on {options.database_url_description}; this",
            f"  one takes over within {options.leader_lease:g} s of it going away, and answers",
            "  503 (naming the active one) until then. /healthz shows the role.",
        ]
    )
