"""What a write returns is what a read gives back, with no read after the write.

The repositories build the row of an INSERT from the values they wrote (rows.inserted),
keep the next job seq and the audit chain's head in memory. These tests hold that to
the database itself: random values on both backends, and rolled-back writes, which
must leave nothing remembered behind.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Iterator
from typing import Any

import peewee as pw
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from storage_testkit import DbTarget

from tunefleet.audit import AuditKind
from tunefleet.storage.errors import AlreadyExists
from tunefleet.storage.migrations import migrate
from tunefleet.storage.models import Job, canonical_json, database_proxy
from tunefleet.storage.statements import execute, insert_row, update_where
from tunefleet.storage.store import Repos, Store
from tunefleet.storage.store_audit import GENESIS_HASH, AuditRepo, chained_values, hashed_fields
from tunefleet.storage.store_jobs import JobRepo
from tunefleet.storage.store_workers import ApiTokenRepo, WorkerRepo

# PostgreSQL text holds no NUL, and UTF-8 no lone surrogate.
_CHARS = st.characters(exclude_categories=("Cs",), exclude_characters="\x00")
_TEXT = st.text(_CHARS, max_size=12)
_INT32 = st.integers(-(2**31), 2**31 - 1)
_FLOAT = st.floats(allow_nan=False, allow_infinity=False)
_TIME = st.one_of(st.integers(0, 2**40), st.floats(0, 1e12))  # an int comes back a float
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63) | _FLOAT | _TEXT,
    # Tuples come back as lists and integer keys as strings: what a read returns.
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(_TEXT, inner, max_size=3)
        | st.dictionaries(st.integers(), inner, max_size=3)
    ),
    max_leaves=8,
)
_JSON_DICT = st.dictionaries(_TEXT, _JSON, max_size=4)
_ids = itertools.count()


def same(written: object, read: object) -> bool:
    """Equal, and of the same types all the way down (5 == 5.0, but a read gives 5.0).
    Not repr: PostgreSQL stores -0.0 as 0.0, which is equal and just as much a float."""
    return written == read and _types(written) == _types(read)


def _types(value: object) -> object:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _types({f.name: getattr(value, f.name) for f in dataclasses.fields(value)})
    if isinstance(value, dict):
        return sorted((repr(key), _types(item)) for key, item in value.items())
    if isinstance(value, list | tuple):
        return type(value).__name__, [_types(item) for item in value]
    return type(value).__name__


_SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.fixture
def repos(db_target: DbTarget) -> Iterator[Repos]:
    """The synchronous repositories on this thread's own connection, so @given can drive
    them directly (the Store does the same on its DB thread)."""
    database = db_target.raw()
    database_proxy.initialize(database)
    database.connect()
    migrate(database)
    now = lambda: 1_700_000_000.5  # noqa: E731
    try:
        yield Repos(WorkerRepo(now), ApiTokenRepo(now), JobRepo(now), AuditRepo(now))
    finally:
        database.close()
        database_proxy.initialize(None)


@_SETTINGS
@given(
    config=_JSON_DICT,
    name=st.none() | _TEXT,
    dataloader=_JSON,
    command=st.none() | st.lists(_TEXT, max_size=3),
    env=st.dictionaries(_TEXT, _TEXT, max_size=3),
    gpu_count=_INT32,
    min_vram_gb=st.none() | _FLOAT,
    priority=_INT32,
    timeout_minutes=st.none() | _FLOAT,
    submitted_at=_TIME,
)
def test_a_created_job_is_the_job_read_back(repos: Repos, **fields: Any) -> None:
    job_id = f"j_{next(_ids)}"
    created = repos.jobs.create(job_id, **fields)
    assert same(created, repos.jobs.get(job_id))


@_SETTINGS
@given(
    kind=st.text(_CHARS, max_size=32),
    worker_id=st.none() | st.text(_CHARS, max_size=64),
    attempt=st.none() | _INT32,
    detail=st.none() | _JSON_DICT,
    at=_TIME,
)
def test_an_appended_event_is_the_event_read_back(repos: Repos, **fields: Any) -> None:
    job_id = f"j_{next(_ids)}"
    repos.jobs.create(job_id, config={})
    appended = repos.jobs.append_event(job_id, **fields)
    assert same([appended], repos.jobs.events(job_id))


@_SETTINGS
@given(worker_id=st.none() | st.text(_CHARS, max_size=64), dispatched_at=_TIME)
def test_a_started_attempt_is_the_attempt_read_back(repos: Repos, **fields: Any) -> None:
    job_id = f"j_{next(_ids)}"
    repos.jobs.create(job_id, config={})
    started = repos.jobs.start_attempt(job_id, 1, **fields)
    assert same([started], repos.jobs.attempts(job_id))


@_SETTINGS
@given(
    kind=st.text(_CHARS, max_size=64),
    actor=st.none() | _TEXT,
    client_address=st.none() | _TEXT,
    target=st.none() | _TEXT,
    outcome=st.text(_CHARS, max_size=16),
    detail=st.none() | _JSON_DICT,
    at=_TIME,
)
def test_an_audit_event_is_the_event_read_back(repos: Repos, **fields: Any) -> None:
    appended = repos.audit.append(**fields)
    assert same([appended], repos.audit.find(limit=1))


@_SETTINGS
@given(
    kind=st.text(_CHARS, max_size=64),
    actor=st.none() | _TEXT,
    client_address=st.none() | _TEXT,
    target=st.none() | _TEXT,
    outcome=st.text(_CHARS, max_size=16),
    detail=st.none() | _JSON_DICT | st.dictionaries(_TEXT, _TEXT | _FLOAT | _INT32, max_size=4),
    at=_TIME,
)
def test_an_added_audit_event_is_the_appended_one_and_its_hash_the_chains(
    repos: Repos, **fields: Any
) -> None:
    """add stores what append would, and a flat event's hash, spelled field by field, is
    the one the chain's own canonical encoding gives (what verification recomputes)."""
    prev_hash = repos.audit.find(limit=1)[0].hash if repos.audit.find(limit=1) else GENESIS_HASH
    link = repos.audit.add(**fields)
    (row,) = repos.audit.find(limit=1)
    assert (row.id, row.hash, row.prev_hash) == (link.id, link.hash, prev_hash)
    event = hashed_fields(
        fields["at"],
        fields["kind"],
        fields["actor"],
        fields["client_address"],
        fields["target"],
        fields["outcome"],
        fields["detail"],
    )
    assert chained_values(prev_hash, event)["hash"] == link.hash
    assert repos.audit.check_chain(row.id - 1, prev_hash, 1).first_bad_id is None


def test_an_event_that_is_not_flat_or_plain_text_is_hashed_whole(repos: Repos) -> None:
    """Nested detail, a kind that is a str subclass, an actor that is no str: the hash of
    the whole canonical encoding, as before the field-by-field spelling."""
    for kind, actor, detail in [
        ("job.status", "w_1", {"b": {"z": 1, "a": [1.5, None]}, "a": (1, 2)}),
        (AuditKind.JOB_STATUS, "w_1", {"x": 1}),
        ("job.status", 7, {3: "integer key", 10: "ten"}),
    ]:
        prev_hash = repos.audit.find(limit=1)[0].hash if repos.audit.find(limit=1) else GENESIS_HASH
        link = repos.audit.add(kind, actor=actor, detail=detail, at=5)
        event = hashed_fields(5, kind, actor, None, None, "ok", detail)
        assert chained_values(prev_hash, event)["hash"] == link.hash


@_SETTINGS
@given(labels=st.dictionaries(_TEXT, _TEXT, max_size=3), gpu_vram_gb=st.none() | _FLOAT)
def test_a_created_worker_and_token_are_what_is_read_back(repos: Repos, **fields: Any) -> None:
    n = next(_ids)
    worker = repos.workers.create(f"w_{n}", name=f"n{n}", worker_type="persistent", **fields)
    assert same(worker, repos.workers.get(f"w_{n}"))
    token = repos.api_tokens.create(name=f"t{n}", token_hash=f"h{n}", permissions=["jobs.read"])
    assert same(token, repos.api_tokens.by_hash(f"h{n}"))


def test_a_duplicate_attempt_is_refused_and_the_first_kept(repos: Repos) -> None:
    repos.jobs.create("j_dup", config={})
    first = repos.jobs.start_attempt("j_dup", 1, worker_id="w_1")
    with pytest.raises(AlreadyExists, match="attempt 1 already exists"):
        repos.jobs.start_attempt("j_dup", 1, worker_id="w_2")
    assert repos.jobs.attempts("j_dup") == [first]


async def test_a_rolled_back_audit_event_is_never_a_predecessor(store: Store) -> None:
    kept = await store.append_audit("first", detail={})

    def append_then_fail(repos: Repos) -> None:
        repos.audit.append("rolled back", detail={})
        raise RuntimeError("the rest of this write failed")

    with pytest.raises(RuntimeError, match="failed"):
        await store.atomically(append_then_fail)
    after = await store.append_audit("second", detail={})
    assert after.prev_hash == kept.hash
    assert [row.kind for row in await store.list_audit(newest_first=False)] == ["first", "second"]
    assert await store.verify_audit() == (True, None)


async def test_a_rolled_back_job_leaves_seq_strictly_increasing(store: Store) -> None:
    first = await store.create_job("j_a", config={})

    def create_then_fail(repos: Repos) -> None:
        repos.jobs.create("j_gone", config={})
        raise RuntimeError("the rest of this write failed")

    with pytest.raises(RuntimeError, match="failed"):
        await store.atomically(create_then_fail)
    later = await store.create_job("j_b", config={})
    assert later.seq > first.seq
    assert await store.get_job("j_gone") is None
    with pytest.raises(AlreadyExists, match="j_b already exists"):
        await store.create_job("j_b", config={})
    assert [job.id for job in await store.list_jobs(order="seq")] == ["j_a", "j_b"]


def test_a_compare_and_set_needs_a_value_to_compare_with(repos: Repos) -> None:
    repos.jobs.create("j_cas", config={})
    with pytest.raises(ValueError, match="state must be one of at least one value"):
        update_where(Job, {"priority": 1}, equal={"id": "j_cas"}, one_of=("state", []))
    assert update_where(Job, {"priority": 1}, equal={"id": "j_cas"}, one_of=("state", ["x"])) == 0
    assert update_where(Job, {"priority": 1}, equal={"id": "j_cas"}) == 1


async def test_statements_run_only_on_the_database_thread() -> None:
    with pytest.raises(AttributeError, match="only run on the database thread"):
        insert_row(Job, {"id": "j_loop", "seq": 1, "submitted_at": 0.0, "updated_at": 0.0})


def test_a_statement_error_comes_out_as_peeweees_with_the_drivers_as_its_cause(
    repos: Repos,
) -> None:
    """Errors are converted only when one happens (no wrapper entered per statement):
    the same peewee classes as before, the driver's error as their context, and an
    error that is not the driver's goes out unchanged."""
    database = database_proxy.obj
    assert database is not None
    repos.jobs.create("j_err", config={})
    values = {"id": "j_err", "seq": 999, "submitted_at": 0.0, "updated_at": 0.0}
    with pytest.raises(pw.IntegrityError) as duplicate, database.atomic():
        insert_row(Job, values)
    assert type(duplicate.value.__context__).__name__ in {"IntegrityError", "UniqueViolation"}
    with pytest.raises(pw.DatabaseError) as unknown, database.atomic():
        execute(database, "SELECT no_such_column FROM job")
    assert unknown.value.__context__ is not None
    with pytest.raises(ZeroDivisionError), database.atomic():
        execute(database, f"SELECT {database.param}", _Unreadable())


class _Unreadable(tuple[Any, ...]):
    """Parameters the driver cannot read: an error that is not the driver's own."""

    def __len__(self) -> int:
        return 1

    def __getitem__(self, index: Any) -> Any:
        raise ZeroDivisionError("not the driver's error")


def test_an_empty_dict_or_list_is_stored_as_the_encoder_spells_it() -> None:
    for value in ({}, [], (), {"a": {}}, [[]]):
        assert canonical_json(value) == json.dumps(value, sort_keys=True, separators=(",", ":"))
    with pytest.raises(TypeError):
        canonical_json(set())
