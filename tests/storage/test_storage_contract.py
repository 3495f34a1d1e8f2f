"""The in-memory store (storage/memory.py) held to the SQLite store's contract.

The actors' and scheduler's tests run on the in-memory store, so it must answer as the
database does wherever the actors rely on it. Two kinds of test hold it there:
- the same tests, parametrized over both stores (errors, compare-and-set, uniqueness,
  all-or-nothing writes, the audit chain);
- one script of operations played on both, whose every answer must be equal, row for row
  (defaults, float columns, JSON copies, ordering, ids), so no difference goes unnoticed.
And every public method of each SQL repository has its in-memory twin, so an operation
added to one cannot be missing from the other.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import peewee as pw
import pytest
from storage_testkit import Line, count_attempts_apart_of_a_page, race_to_dispatch

from tunefleet.storage.database import open_database
from tunefleet.storage.errors import AlreadyExists, DatabaseClosed
from tunefleet.storage.memory import memory_store
from tunefleet.storage.memory_approvals import MemoryApprovalRuleRepo
from tunefleet.storage.memory_limits import MemoryLimitRepo
from tunefleet.storage.memory_records import MemoryArtifactRepo, MemoryAuditRepo, MemoryMetricRepo
from tunefleet.storage.memory_repos import MemoryApiTokenRepo, MemoryJobRepo, MemoryWorkerRepo
from tunefleet.storage.memory_users import MemoryUsageRepo, MemoryUserRepo
from tunefleet.storage.rows import TeamRow, UserRow
from tunefleet.storage.store import Repos, Store
from tunefleet.storage.store_approvals import ApprovalRuleRepo
from tunefleet.storage.store_artifacts import ArtifactRepo, ArtifactRow
from tunefleet.storage.store_audit import AuditRepo
from tunefleet.storage.store_base import JobOwner, Viewer
from tunefleet.storage.store_jobs import JobRepo
from tunefleet.storage.store_limits import LimitRepo
from tunefleet.storage.store_metrics import MAX_POINTS_PER_ATTEMPT, MetricRepo
from tunefleet.storage.store_usage import UsageRepo
from tunefleet.storage.store_users import UserFacts, UserRepo
from tunefleet.storage.store_workers import ApiTokenRepo, WorkerRepo

START = 1_700_000_000.0
TWINS = [
    (WorkerRepo, MemoryWorkerRepo),
    (ApiTokenRepo, MemoryApiTokenRepo),
    (JobRepo, MemoryJobRepo),
    (AuditRepo, MemoryAuditRepo),
    (MetricRepo, MemoryMetricRepo),
    (ArtifactRepo, MemoryArtifactRepo),
    (UserRepo, MemoryUserRepo),
    (UsageRepo, MemoryUsageRepo),
    (LimitRepo, MemoryLimitRepo),
    (ApprovalRuleRepo, MemoryApprovalRuleRepo),
]


@dataclass
class Beat:
    worker_id: str
    last_heartbeat_at: float | None
    last_seen_at: float | None
    gpu_utilization: list[float]
    vram_used_gb: list[float]


async def _open(kind: str, data_dir: Path, clock: list[float]) -> tuple[Store, Any]:
    def now() -> float:
        return clock[0]

    if kind == "memory":
        store = memory_store(now)
        return store, store.db
    db = await open_database(None, data_dir)
    return Store(db, now=now), db


@pytest.fixture(params=["memory", "sqlite"])
async def store(
    request: pytest.FixtureRequest, tmp_path: Path, clock: list[float]
) -> AsyncIterator[Store]:
    opened, db = await _open(request.param, tmp_path, clock)
    try:
        yield opened
    finally:
        await db.close()


@pytest.mark.parametrize(("sql", "memory"), TWINS, ids=[sql.__name__ for sql, _ in TWINS])
def test_every_repository_operation_has_its_in_memory_twin(sql: type, memory: type) -> None:
    public = {n for n, f in inspect.getmembers(sql, inspect.isfunction) if not n.startswith("_")}
    missing = sorted(n for n in public if getattr(memory, n) is getattr(sql, n))
    assert missing == [], f"{memory.__name__} does not implement {missing}"
    for name in public:  # same arguments, so a caller cannot tell them apart
        assert inspect.signature(getattr(memory, name)) == inspect.signature(getattr(sql, name))


# --- the same tests on both ---------------------------------------------------------------


async def test_ids_and_token_hashes_are_unique(store: Store) -> None:
    await store.create_worker("w_1", name="a", worker_type="persistent", token_hash="h1")
    with pytest.raises(AlreadyExists, match="worker w_1 already exists"):
        await store.create_worker("w_1", name="b", worker_type="persistent")
    await store.create_worker("w_2", name="a", worker_type="persistent")  # names may repeat
    with pytest.raises(AlreadyExists, match="worker token hash is already in use"):
        await store.set_worker_token("w_2", "h1")
    assert not await store.set_worker_token("w_missing", "h9")
    await store.create_api_token(name="ci", token_hash="a1", permissions=["jobs.submit"])
    with pytest.raises(AlreadyExists, match="API token hash is already in use"):
        await store.create_api_token(name="ci2", token_hash="a1", permissions=[])
    await store.create_job("j_1", config={})
    with pytest.raises(AlreadyExists, match="job j_1 already exists"):
        await store.create_job("j_1", config={})
    await store.start_attempt("j_1", 1, worker_id="w_1")
    with pytest.raises(AlreadyExists, match="attempt 1 already exists"):
        await store.start_attempt("j_1", 1, worker_id="w_1")
    with pytest.raises(pw.IntegrityError):
        await store.start_attempt("j_missing", 1, worker_id="w_1")


async def test_fields_are_checked_as_the_models_say(store: Store) -> None:
    with pytest.raises(TypeError, match="cannot be set here"):
        await store.create_job("j_1", config={}, seq=7)
    await store.create_job("j_1", config={})
    with pytest.raises(TypeError, match="has no field"):
        await store.update_job("j_1", colour="red")
    with pytest.raises(TypeError, match="cannot be set here"):
        await store.cas_job_state("j_1", "pending", "running", state="failed")
    with pytest.raises(ValueError, match="at least one state"):
        await store.cas_job_state("j_1", [], "running")


async def test_compare_and_set_moves_only_from_the_expected_state(store: Store) -> None:
    await store.create_job("j_1", config={})
    results = await race_to_dispatch(store, "j_1", 20)
    assert results.count(True) == 1
    assert not await store.cas_job_state("j_missing", "pending", "dispatched")
    await store.create_worker("w_1", name="a", worker_type="persistent")
    assert not await store.cas_worker_state("w_1", "idle", "busy")
    assert await store.cas_worker_state("w_1", ("connecting", "offline"), "idle", hostname="h")
    worker = await store.get_worker("w_1")
    assert worker is not None and (worker.state, worker.hostname) == ("idle", "h")


async def test_seq_orders_submissions(store: Store) -> None:
    seqs = [(await store.create_job(f"j_{i}", config={})).seq for i in range(5)]
    assert seqs == sorted(seqs) and len(set(seqs)) == 5


async def test_an_insert_without_the_row_back_stores_what_its_row_returning_twin_does(
    store: Store,
) -> None:
    # The actors' commits use insert/insert_attempt/insert_event; reads must not tell.
    fields: dict[str, Any] = {
        "config": {"lr": 1},
        "worker_labels": {"gpu": "a100"},
        "submitted_at": 5,
    }

    def both(repos: Repos) -> tuple[int, int]:
        created = repos.jobs.create("j_1", **fields)
        repos.jobs.start_attempt("j_1", 1, worker_id="w_1", dispatched_at=6)
        repos.jobs.append_event("j_1", "dispatched", attempt=1, detail={"n": (1, 2)}, at=7)
        seq = repos.jobs.insert("j_2", **fields)
        repos.jobs.insert_attempt("j_2", 1, worker_id="w_1", dispatched_at=6)
        repos.jobs.insert_event("j_2", "dispatched", attempt=1, detail={"n": (1, 2)}, at=7)
        return created.seq, seq

    first, second = await store.atomically(both)
    assert second == first + 1
    one, two = await store.get_job("j_1"), await store.get_job("j_2")
    assert one is not None and two is not None
    assert replace(two, id="j_1", seq=first) == one
    attempts = [await store.list_attempts(job) for job in ("j_1", "j_2")]
    assert [replace(a, id=0, job_id="") for a in attempts[0]] == [
        replace(a, id=0, job_id="") for a in attempts[1]
    ]
    events = [await store.list_job_events(job) for job in ("j_1", "j_2")]
    assert [replace(e, id=0, job_id="") for e in events[0]] == [
        replace(e, id=0, job_id="") for e in events[1]
    ]
    assert events[1][0].detail == {"n": [1, 2]} and events[1][0].at == 7.0


async def test_attempts_that_spent_no_retry_are_counted_for_a_page_of_jobs(
    store: Store,
) -> None:
    await count_attempts_apart_of_a_page(store)


async def test_after_commit_follows_a_kept_write_before_its_caller_hears(store: Store) -> None:
    followed: list[object] = []
    store.db.on_commit(lambda: followed.append("committed"))

    def fail(repos: Repos) -> None:
        repos.audit.append("doomed")
        raise RuntimeError("the commit failed")

    stored = await store.atomically(
        lambda repos: repos.audit.append("kept"), after_commit=followed.append
    )
    assert followed == [stored, "committed"]
    with pytest.raises(RuntimeError, match="commit failed"):
        await store.atomically(fail, after_commit=followed.append)
    assert followed == [stored, "committed"]


async def test_a_failed_write_keeps_nothing_and_the_next_one_works(store: Store) -> None:
    await store.create_job("j_1", config={})
    await store.append_audit("first")

    def half_then_fail(repos: Repos) -> None:
        repos.jobs.cas_state("j_1", "pending", "dispatched", worker_id="w_1", attempts=1)
        repos.jobs.start_attempt("j_1", 1, worker_id="w_1")
        repos.jobs.append_event("j_1", "dispatched")
        repos.audit.append("job.dispatched")
        repos.metrics.append("j_1", 1, 1, {"loss": 1.0}, START)
        raise RuntimeError("the commit failed")

    with pytest.raises(RuntimeError, match="commit failed"):
        await store.atomically(half_then_fail)
    job = await store.get_job("j_1")
    assert job is not None and (job.state, job.worker_id) == ("pending", None)
    assert await store.list_attempts("j_1") == []
    assert await store.list_job_events("j_1") == []
    assert await store.read_metrics("j_1") == []
    assert [e.kind for e in await store.list_audit()] == ["first"]
    # What the repositories remembered of the rolled-back write is forgotten.
    await store.append_audit("second")
    assert await store.verify_audit() == (True, None)
    assert await store.append_metrics("j_1", 1, 1, {"loss": 1.0}, START)


async def test_rows_read_are_copies(store: Store) -> None:
    await store.create_job("j_1", config={"lr": 1}, worker_labels={"gpu": "a100"})
    job = await store.get_job("j_1")
    assert job is not None
    job.config["lr"] = 2
    job.worker_labels.clear()
    again = await store.get_job("j_1")
    assert (
        again is not None and again.config == {"lr": 1} and again.worker_labels == {"gpu": "a100"}
    )


async def test_a_closed_store_refuses_work(store: Store) -> None:
    await store.db.close()  # type: ignore[attr-defined]
    with pytest.raises(DatabaseClosed):
        await store.get_job("j_1")


async def test_metric_points_are_thinned_past_the_bound(store: Store) -> None:
    await store.create_job("j_1", config={})
    for step in range(MAX_POINTS_PER_ATTEMPT + 1):
        await store.append_metrics("j_1", 1, step, {"loss": 1.0 / (step + 1)}, START + step)
    points = await store.read_metrics("j_1")
    assert len(points) <= MAX_POINTS_PER_ATTEMPT // 2 + 1
    assert points[0].step == 0 and max(p.step for p in points) == MAX_POINTS_PER_ATTEMPT


# --- one script, the same answers -------------------------------------------------------


async def _script(store: Store, clock: list[float]) -> list[Any]:
    """Every operation the actors use, with the answers recorded."""
    out: list[Any] = []

    async def step(call: Callable[[], Awaitable[Any]]) -> None:
        clock[0] += 1.5
        try:
            out.append(await call())
        except Exception as error:  # the error is part of the answer
            out.append((type(error).__name__, str(error)))

    await step(lambda: store.create_worker("w_1", name="a", worker_type="persistent"))
    await step(
        lambda: store.create_worker(
            "w_2", name="b", worker_type="ephemeral", token_hash="h2", labels={"gpu": "a100"}
        )
    )
    await step(lambda: store.set_worker_token("w_1", "h1"))
    await step(lambda: store.set_worker_token("w_1", "h1b"))
    await step(lambda: store.list_worker_tokens(include_revoked=True))
    await step(lambda: store.worker_by_token_hash("h1"))
    await step(lambda: store.worker_by_token_hash("h1b"))
    await step(lambda: store.cas_worker_state("w_1", "connecting", "idle", gpu_vram_gb=80))
    await step(lambda: store.update_worker("w_2", last_event_id=4, gpu_count=2))
    beats = [Beat("w_1", START, START, [50], [10]), Beat("w_9", START, START, [], [])]
    await step(lambda: store.save_heartbeats(beats))
    await step(lambda: store.list_workers())
    await step(lambda: store.list_workers("idle", worker_type="persistent", is_local=False))
    await step(lambda: store.create_api_token(name="ci", token_hash="t1", permissions=["x"]))
    await step(lambda: store.api_token_by_hash("t1"))
    await step(lambda: store.touch_api_token(1))
    await step(lambda: store.revoke_api_token(1))
    await step(lambda: store.revoke_api_token(1))
    await step(lambda: store.list_api_tokens(include_revoked=True))
    for i in range(3):
        await step(
            lambda i=i: store.create_job(  # type: ignore[misc]
                f"j_{i}",
                config={"lr": 1e-4, "steps": [1, 2]},
                name=f"job {i}",
                target="worker",
                gpu_count=1,
                min_vram_gb=40,
                priority=i % 2,
                submitted_by="alice" if i else "bob",
                user_name="alice" if i else "bob",
                team_name="vision" if i == 2 else "ml",
            )
        )
    await step(lambda: store.cas_job_state("j_0", "pending", "dispatched", worker_id="w_1"))
    await step(lambda: store.start_attempt("j_0", 1, worker_id="w_1", dispatched_at=START))
    await step(lambda: store.ack_attempt("j_0", 1))
    await step(lambda: store.ack_attempt("j_0", 1))
    await step(lambda: store.append_job_event("j_0", "started", attempt=1, detail={"a": [1]}))
    await step(lambda: store.update_job("j_0", progress={"step": 3, "loss": 0.5}))
    await step(lambda: store.append_logs("j_0", 1, [Line(1, "stdout", "x", START)] * 2))
    await step(lambda: store.append_logs("j_0", 1, [Line(2, "stderr", "y", START)]))
    await step(lambda: store.read_logs("j_0", after_id=0, limit=10))
    await step(lambda: store.read_logs("j_0", after_id=1, attempt=1))
    quota_batch = [Line(3, "stdout", "z", START), Line(4, "stdout", "w" * 200, START + 1)]
    quota_batch.append(Line(5, "stderr", "v", START + 2))
    await step(lambda: store.append_logs_within_quota("j_0", 1, quota_batch, 300))
    await step(lambda: store.append_logs_within_quota("j_0", 1, quota_batch[:1], 300))
    await step(
        lambda: store.append_logs_within_quota("j_0", 1, [Line(6, "stdout", "u", START)], 300)
    )
    await step(lambda: store.append_logs_within_quota("j_0", 7, [Line(1, "stdout", "t", START)], 9))
    await step(lambda: store.read_logs("j_0", attempt=1))
    await step(lambda: store.list_attempts("j_0"))
    await step(lambda: store.append_metrics("j_0", 1, 3, {"loss": 0.5}, START))
    await step(lambda: store.append_metrics("j_0", 1, 3, {"loss": 0.5}, START))
    await step(lambda: store.append_metrics("j_0", 1, 3, {"loss": 0.4}, START))
    await step(lambda: store.read_metrics("j_0"))
    await step(lambda: store.end_attempt("j_0", 1, outcome="completed", reason=None))
    await step(lambda: store.end_attempt("j_0", 1, outcome="failed"))
    await step(lambda: store.cas_job_state("j_0", ("dispatched", "running"), "completed"))
    await step(lambda: store.list_attempts("j_0"))
    await step(lambda: store.list_job_events("j_0"))
    await step(lambda: store.list_jobs())
    await step(lambda: store.list_jobs(state=["pending"], order="seq", limit=1, offset=1))
    await step(lambda: store.list_jobs(submitted_by="alice", target="worker"))
    await step(lambda: store.list_jobs(worker_id="w_1"))
    await step(lambda: store.count_jobs(state="pending"))
    await step(lambda: store.list_jobs(owner=JobOwner(user_name="alice")))
    await step(lambda: store.list_jobs(owner=JobOwner(user_name="alice", team_name="ml")))
    await step(lambda: store.count_jobs(owner=JobOwner(team_name="vision")))
    await step(lambda: store.list_jobs(visible_to=Viewer("carol", frozenset({"vision"}))))
    await step(lambda: store.list_jobs(visible_to=Viewer("bob", frozenset())))
    await step(lambda: store.count_jobs(visible_to=Viewer("bob", frozenset({"ml"}))))
    await step(lambda: store.job_counts())
    await step(lambda: store.nonterminal_jobs())
    await step(lambda: store.append_audit("a", actor="me", detail={"n": 1}, at=START))
    await step(lambda: store.append_audit("b", target="w_1", outcome="denied"))
    await step(lambda: store.list_audit(newest_first=False))
    await step(lambda: store.list_audit(kind="b", since=START + 1))
    await step(lambda: store.verify_audit(batch_size=1))
    await step(lambda: store.artifacts.add_token("j_1", 1, "u1"))
    await step(lambda: store.artifacts.token_scope("u1"))
    await step(lambda: store.artifacts.put("j_1", "out/a.bin", 3, "ab", 1))
    await step(lambda: store.artifacts.put("j_1", "out/a.bin", 4, "cd", 1))
    await step(lambda: store.artifacts.objects("j_1", "out/"))
    await step(lambda: store.artifacts.add_checkpoint("j_1", "checkpoint-2", 2, 1, 10))
    await step(lambda: store.artifacts.latest_checkpoint("j_1"))
    await step(lambda: store.artifacts.add_multipart("m_1", "j_1", "k", 1, None))
    await step(lambda: store.artifacts.every_multipart())
    await step(lambda: store.artifacts.put("j_1", "model.bin", 9, None, 1))
    await step(lambda: store.artifacts.sizes("j_1"))
    await step(lambda: store.artifacts.sizes("j_0"))
    await step(lambda: store.delete_worker("w_2"))
    await step(lambda: store.list_worker_tokens(include_revoked=True))
    await step(lambda: store.append_job_event("j_missing", "x"))
    users = store.users
    await step(lambda: users.create_team("ml"))
    await step(lambda: users.create_team("ml"))
    await step(lambda: users.create_team("vision"))
    await step(lambda: users.create_user("alice", role="researcher", teams=["ml", "vision"]))
    await step(lambda: users.create_user("alice", role="viewer"))
    await step(lambda: users.create_user("bob", role="lead", teams=["nope"]))
    await step(lambda: users.create_user("bob", role="lead", grants=["queue.command"]))
    await step(lambda: users.users())
    await step(lambda: users.teams())
    await step(lambda: users.team("ml"))
    await step(lambda: users.user("nobody"))
    await step(lambda: users.add_member("vision", "admin"))
    await step(lambda: users.add_member("vision", "alice", default=True))
    await step(lambda: users.add_member("ml", "bob"))
    await step(lambda: users.add_member("ml", "nobody"))
    await step(lambda: users.memberships(user="alice"))
    await step(lambda: users.memberships(team="vision"))
    await step(lambda: users.remove_member("vision", "alice"))
    await step(lambda: users.remove_member("vision", "alice"))
    await step(lambda: users.memberships())
    await step(lambda: users.set_role("alice", "lead", ["queue.local"]))
    await step(lambda: users.set_role("alice", "viewer"))
    await step(lambda: users.set_disabled("admin", True))
    await step(lambda: users.set_role("admin", "viewer"))
    await step(lambda: users.set_role("alice", "admin"))
    await step(lambda: users.set_disabled("admin", True))
    await step(lambda: users.set_disabled("alice", True))
    await step(lambda: users.set_role("nobody", "viewer"))
    await step(lambda: users.set_password("alice", "$argon2id$stand-in"))
    await step(lambda: users.set_password("alice", None))
    await step(lambda: users.set_password("nobody", "$argon2id$stand-in"))
    await step(lambda: users.facts(2))
    await step(lambda: users.facts(99))
    await step(
        lambda: store.create_api_token(name="al", token_hash="t2", permissions=[], user_id=2)
    )
    return out


def _without_reusable_ids(answer: Any) -> Any:
    """SQLite gives a deleted newest artifact's id to the next one (its tables without
    AUTOINCREMENT reuse the highest rowid), PostgreSQL and the memory store never do.
    Nothing reads artifact ids as a cursor, so they are left out of the comparison."""
    if isinstance(answer, list):
        return [_without_reusable_ids(item) for item in answer]
    if isinstance(answer, ArtifactRow):
        return replace(answer, id=0)
    if isinstance(answer, UserFacts):
        return replace(answer, user=_without_reusable_ids(answer.user))
    # The first admin and team are made by the migration, at the time it runs.
    if isinstance(answer, UserRow) and answer.name == "admin":
        untouched = answer.updated_at == answer.created_at
        return replace(answer, created_at=0.0, updated_at=0.0 if untouched else answer.updated_at)
    if isinstance(answer, TeamRow) and answer.name == "default":
        return replace(answer, created_at=0.0)
    return answer


async def test_one_script_gives_the_same_answers_in_memory_and_on_sqlite(tmp_path: Path) -> None:
    answers = []
    for kind in ("memory", "sqlite"):
        clock = [START]
        store, db = await _open(kind, tmp_path / kind, clock)
        try:
            answers.append(await _script(store, clock))
        finally:
            await db.close()
    memory, sqlite = answers
    assert len(memory) == len(sqlite)
    for number, (got, want) in enumerate(zip(memory, sqlite, strict=True)):
        if isinstance(want, tuple) and want and want[0] == "IntegrityError":
            assert got[0] == "IntegrityError", f"step {number}"  # the messages differ by backend
            continue
        assert _without_reusable_ids(got) == _without_reusable_ids(want), f"step {number}"


async def test_approval_rules_keep_their_order_and_delete_by_id(store: Store) -> None:
    rules = store.approval_rules
    first = await rules.add_rule("gpus_exceed", "4", ["admin"], True)
    second = await rules.add_rule("first_job", "", [], False)
    assert [r.id for r in await rules.rules()] == [first.id, second.id]
    assert (await rules.rules())[0] == first
    assert first.exempt_roles == ["admin"] and second.enabled is False
    assert await rules.delete_rule(first.id)
    assert not await rules.delete_rule(first.id), "a second delete finds nothing"
    assert await rules.rules() == [second]
