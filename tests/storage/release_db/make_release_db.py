"""Build ``release-v8.db``: a SQLite database as release 8 (schema version 8, commit
e6e2668: before the local runner's migration 9 and users' migration 10) leaves it, made
through that release's own HTTP API.

Run once, at that commit, from the repository root:
    .venv/bin/python tests/storage/release_db/make_release_db.py
The file it wrote is committed beside this script; test_storage_users_migration.py
upgrades a copy of it and checks that nothing in it is lost. Running this again at a later
commit would build a newer schema, which is not what the test needs.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sqlite3
import tempfile
from pathlib import Path

from aiohttp.test_utils import TestClient, TestServer

from tunefleet.http.app import ServerOptions, build_app

HERE = Path(__file__).parent
OUT = HERE / "release-v8.db"
ADMIN_TOKEN = "tf_release-v8-admin-token-0123456789abcdefghijklmnopq"


async def build(work: Path) -> None:
    configs = work / "configs"
    configs.mkdir()
    (configs / "tiny.json").write_text(json.dumps({"model_type": "full", "max_steps": 10}))
    options = ServerOptions(
        data_dir=work / "data",
        configs_dir=configs,
        local_runner=False,
        admin_token=ADMIN_TOKEN,
        log_format="json",
    )
    client = TestClient(TestServer(build_app(options)))
    await client.start_server()
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}

    async def call(method: str, path: str, body: object = None, headers: dict[str, str] = admin):
        resp = await client.request(method, path, json=body, headers=headers)
        data = await resp.json()
        if resp.status != 200:
            raise SystemExit(f"{method} {path}: {resp.status} {data}")
        return data

    try:
        ci = await call(
            "POST", "/api/admin/tokens", {"name": "ci", "permissions": ["queue.submit"]}
        )
        full = await call(
            "POST",
            "/api/admin/tokens",
            {
                "name": "ops",
                "permissions": [
                    "admin.workers",
                    "queue.submit",
                    "queue.admin",
                    "audit.read",
                    "queue.command",
                    "queue.local",
                ],
            },
        )
        gone = await call(
            "POST", "/api/admin/tokens", {"name": "old", "permissions": ["audit.read"]}
        )
        await call("DELETE", f"/api/admin/tokens/{gone['id']}")
        await call("POST", "/api/admin/workers", {"name": "gpu-box", "labels": {"gpu": "a100"}})
        ci_headers = {"Authorization": f"Bearer {ci['token']}"}
        ops_headers = {"Authorization": f"Bearer {full['token']}"}
        await call("POST", "/api/queue/submit", {"config_name": "tiny", "name": "by-admin"})
        by_ci = await call(
            "POST", "/api/queue/submit", {"config": {"lr": 0.1}, "name": "by-ci"}, ci_headers
        )
        await call(
            "POST", "/api/queue/submit", {"config_name": "tiny", "name": "by-ops"}, ops_headers
        )
        await call(
            "POST", f"/api/queue/{by_ci['job_id']}/cancel", {"reason": "made so"}, ci_headers
        )
    finally:
        await client.close()
    db = work / "data" / "tunefleet.db"
    with sqlite3.connect(db) as conn:  # one file, no -wal beside it
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("PRAGMA journal_mode=DELETE")
    with sqlite3.connect(db) as conn:
        conn.execute("VACUUM")
    shutil.copyfile(db, OUT)


def main() -> None:
    with tempfile.TemporaryDirectory() as work:
        asyncio.run(build(Path(work)))
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
