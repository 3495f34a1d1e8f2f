"""Audit events are in the hash chain or the request is answered with an error; never a
line in audit.jsonl alone (issue 23: three events fell out of the chain into the file,
"stored": false). An event the database refuses is held, in order, and stored once it
takes writes again; a download is served while its event is held."""

from __future__ import annotations

import asyncio
import errno
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from tunefleet.audit import AuditLog
from tunefleet.audit_held import AuditNotStored, HeldEvents

TOKEN = "wt_Q1w2E3r4T5y6U7i8O9p0AaSsDdFfGgHhJjKkLlZz-_x"


class Chain:
    """Stands in for Store.append_audit: stores in order, or refuses while `refusing`."""

    def __init__(self) -> None:
        self.kinds: list[str] = []
        self.refusing: Exception | None = None

    async def append_audit(self, kind: str, **fields: Any) -> Any:
        await asyncio.sleep(0)
        if self.refusing is not None:
            raise self.refusing
        self.kinds.append(f"{kind}:{fields['target']}")
        return type("Row", (), {"id": len(self.kinds), "hash": f"h{len(self.kinds)}"})()


class Clock:
    def time(self) -> float:
        return 1_700_000_000.0


@pytest.fixture
def chain() -> Chain:
    return Chain()


@pytest.fixture
async def audit(chain: Chain, tmp_path: Path) -> AsyncIterator[AuditLog]:
    log = AuditLog(chain.append_audit, tmp_path / "audit.jsonl", Clock(), held_retry_s=3600)
    try:
        yield log
    finally:
        await log.close()


def _lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _disk_full() -> OSError:
    return OSError(errno.ENOSPC, "No space left on device")


async def test_a_refused_event_is_no_side_line_and_the_request_gets_503(
    audit: AuditLog, chain: Chain
) -> None:
    chain.refusing = RuntimeError(f"database is locked while storing {TOKEN}")
    with pytest.raises(AuditNotStored) as refused:
        await audit.record("worker.drained", actor="api", target="w_1")
    assert refused.value.status == 503
    detail = str(refused.value)
    assert "worker.drained" in detail and "held" in detail
    assert TOKEN not in detail
    assert _lines(audit.path) == []  # nothing on file that is not in the chain
    assert audit.held == 1


async def test_a_full_disk_refuses_with_507_saying_what_to_do(
    audit: AuditLog, chain: Chain
) -> None:
    chain.refusing = _disk_full()
    with pytest.raises(AuditNotStored) as refused:
        await audit.record("api_token.created", actor="api", target="t_1")
    assert refused.value.status == 507
    assert "free space" in str(refused.value)


async def test_held_events_go_into_the_chain_first_once_it_takes_writes(
    audit: AuditLog, chain: Chain
) -> None:
    chain.refusing = _disk_full()
    for target in ("w_1", "w_2"):
        with pytest.raises(AuditNotStored):
            await audit.record("worker.drained", actor="api", target=target)
    chain.refusing = None
    await audit.record("worker.resumed", actor="api", target="w_3")
    assert chain.kinds == ["worker.drained:w_1", "worker.drained:w_2", "worker.resumed:w_3"]
    assert audit.held == 0
    await audit.close()
    assert [line["id"] for line in _lines(audit.path)] == [1, 2, 3]


async def test_a_newer_event_waits_behind_held_ones_while_they_are_refused(
    audit: AuditLog, chain: Chain
) -> None:
    chain.refusing = _disk_full()
    with pytest.raises(AuditNotStored):
        await audit.record("worker.drained", actor="api", target="w_1")
    with pytest.raises(AuditNotStored):
        await audit.record("worker.drained", actor="api", target="w_2")
    assert audit.held == 2 and chain.kinds == []


async def test_a_download_is_served_while_its_event_is_held(audit: AuditLog, chain: Chain) -> None:
    chain.refusing = _disk_full()
    answer = await audit.record(
        "artifact.downloaded", actor="api", target="j_1", serve_anyway=True, key="a.bin"
    )
    assert answer is None and audit.held == 1
    chain.refusing = None
    assert await audit.store_held()
    assert chain.kinds == ["artifact.downloaded:j_1"]


async def test_held_events_are_stored_by_themselves(chain: Chain, tmp_path: Path) -> None:
    audit = AuditLog(chain.append_audit, tmp_path / "audit.jsonl", Clock(), held_retry_s=0)
    chain.refusing = _disk_full()
    await audit.record("worker.offline", actor="w", target="w_1", serve_anyway=True)
    chain.refusing = None
    for _ in range(100):  # bounded: the retry task runs on the loop, no clock involved
        if not audit.held:
            break
        await asyncio.sleep(0)
    assert chain.kinds == ["worker.offline:w_1"]
    await audit.close()


async def test_events_still_refused_at_close_are_logged_loudly_not_filed(
    chain: Chain, tmp_path: Path
) -> None:
    audit = AuditLog(chain.append_audit, tmp_path / "audit.jsonl", Clock(), held_retry_s=3600)
    chain.refusing = _disk_full()
    await audit.record("worker.offline", actor="w", target="w_1", serve_anyway=True)
    with capture_logs() as logs:
        await audit.close()
    lost = [e for e in logs if e["event"].startswith("audit event never stored")]
    assert len(lost) == 1 and lost[0]["log_level"] == "error"
    assert _lines(audit.path) == []


async def test_past_the_limit_even_a_download_is_refused() -> None:
    async def refuse(_event: Any) -> Any:
        raise _disk_full()

    async def stored(_event: Any, _row: Any) -> None:
        raise AssertionError("nothing is stored")

    held = HeldEvents(refuse, stored, limit=2, retry_s=3600)
    assert held.hold("e1", "k", _disk_full()) and held.hold("e2", "k", _disk_full())
    with capture_logs() as logs:
        assert not held.hold("e3", "k", _disk_full())
    assert logs[0]["log_level"] == "error" and logs[0]["event"].startswith("audit event not")
    assert len(held) == 2
    await held.close()
