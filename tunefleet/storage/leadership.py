"""Leadership on PostgreSQL: a lease row with a term number, and the fence on every write.

Several orchestrator processes may point at one PostgreSQL database; one of them is
active. It holds the single row of `leader_lease` (id 1): its holder id, its advertised
URL, its term and an expiry measured by the DATABASE's clock (no two machines' clocks
are compared). The holder renews the expiry every third of the lease from its own thread
and connection; standbys try to claim the row every fifth of it, which succeeds only
once the expiry has passed, and bumps the term.

Why a lease row and not a session-level advisory lock: an advisory lock lives and dies
with one connection, so a holder whose connection drops loses it without noticing,
while its DB thread, on another connection, may still write. The term is an explicit
fencing token: every write group of the active process starts with `fence()` in its
own transaction, which share-locks the lease row and checks the term. A takeover's
UPDATE of that row therefore waits for write groups in flight, and every write group
after it sees the new term and is refused (LeadershipLost), so a process that was paused
past its lease (SIGSTOP, a long GC, a partition) cannot change anything when it resumes.
`idle_in_transaction_session_timeout` ends the transaction of a holder paused mid-write,
so its share lock cannot block a takeover for longer than a lease.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import peewee as pw
import structlog

from tunefleet.storage.errors import StorageError
from tunefleet.storage.urls import DatabaseConfig, build_peewee_database

log = structlog.get_logger(__name__)

DEFAULT_LEASE_S: Final = 5.0
_NOW: Final = "extract(epoch from clock_timestamp())"


class LeadershipLost(StorageError):
    """This process is no longer the active orchestrator: another one holds a newer term."""

    status = 503


@dataclass(frozen=True, slots=True)
class LeaseView:
    """The lease row as one process reads it."""

    term: int
    holder: str
    advertise_url: str | None
    expires_in_s: float  # by the database's clock; negative once expired


def new_holder_id() -> str:
    return f"orch_{uuid.uuid4().hex[:16]}"


# --- SQL, each run on a connection the caller owns -------------------------------------


def try_acquire(
    database: pw.Database, holder: str, advertise_url: str | None, lease_s: float
) -> int | None:
    """Claim the lease if nobody holds it or it has expired: the new term, else None."""
    row = database.execute_sql(
        "INSERT INTO leader_lease (id, term, holder, advertise_url, expires_at) "
        f"VALUES (1, 1, %s, %s, {_NOW} + %s) "
        "ON CONFLICT (id) DO UPDATE SET term = leader_lease.term + 1, "
        "holder = EXCLUDED.holder, advertise_url = EXCLUDED.advertise_url, "
        "expires_at = EXCLUDED.expires_at "
        f"WHERE leader_lease.expires_at < {_NOW} RETURNING term",
        (holder, advertise_url, lease_s),
    ).fetchone()
    return int(row[0]) if row else None


def renew(database: pw.Database, holder: str, term: int, lease_s: float) -> bool:
    """Push the expiry out; False when the term is no longer ours (we were replaced)."""
    row = database.execute_sql(
        f"UPDATE leader_lease SET expires_at = {_NOW} + %s "
        "WHERE id = 1 AND term = %s AND holder = %s RETURNING term",
        (lease_s, term, holder),
    ).fetchone()
    return row is not None


def release(database: pw.Database, holder: str, term: int) -> None:
    """Expire our own lease at once, so that a standby need not wait it out."""
    database.execute_sql(
        f"UPDATE leader_lease SET expires_at = {_NOW} - 1 WHERE id = 1 AND term = %s "
        "AND holder = %s",
        (term, holder),
    )


def read_lease(database: pw.Database) -> LeaseView | None:
    row = database.execute_sql(
        f"SELECT term, holder, advertise_url, expires_at - {_NOW} FROM leader_lease WHERE id = 1"
    ).fetchone()
    if row is None:
        return None
    return LeaseView(int(row[0]), str(row[1]), row[2], float(row[3]))


def fence(database: pw.Database, term: int, lease_s: float) -> None:
    """First statement of every write group of the active process (inside its
    transaction): share-lock the lease row and refuse unless it still carries our term.

    FOR SHARE, not FOR KEY SHARE: a takeover's UPDATE changes no key column, so it takes
    a FOR NO KEY UPDATE lock, which conflicts with FOR SHARE but not with FOR KEY SHARE;
    only FOR SHARE makes the takeover wait for the write group in flight.
    """
    idle_ms = max(1000, int(lease_s * 1000))
    row = database.execute_sql(
        f"SET LOCAL idle_in_transaction_session_timeout = {idle_ms}; "
        "SELECT term FROM leader_lease WHERE id = 1 FOR SHARE"
    ).fetchone()
    found = int(row[0]) if row else None
    if found != term:
        raise LeadershipLost(
            f"this orchestrator's term {term} is over (the lease now has term {found}): "
            "another orchestrator is active, so this one refuses to write and steps down"
        )


# --- the thread that claims and keeps the lease ----------------------------------------


class LeaseKeeper:
    """Claims the lease (standby) and then renews it (active), on its own thread and
    connection. `on_acquired(term)` and `on_lost(reason)` are called on that thread, once
    each at most; after `on_lost` the keeper stops (a process steps down by exiting)."""

    def __init__(
        self,
        config: DatabaseConfig,
        *,
        holder: str,
        advertise_url: str | None,
        lease_s: float = DEFAULT_LEASE_S,
        on_acquired: Callable[[int], None],
        on_lost: Callable[[str], None],
        on_observed: Callable[[LeaseView | None], None] = lambda view: None,
    ) -> None:
        if config.backend != "postgresql":
            raise ValueError("leadership needs PostgreSQL")
        self.config = config
        self.holder = holder
        self.advertise_url = advertise_url
        self.lease_s = lease_s
        self.term: int | None = None
        self._on_acquired = on_acquired
        self._on_lost = on_lost
        self._on_observed = on_observed
        self._stop = threading.Event()
        self._db: pw.Database | None = None
        self._thread = threading.Thread(target=self._run, name="tunefleet-lease", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, *, release_lease: bool = True) -> None:
        """Stop renewing; a graceful stop expires our lease so a standby takes over at once."""
        self._stop.set()
        self._thread.join(timeout=self.lease_s + 5)
        if release_lease and self.term is not None:
            with contextlib.suppress(Exception):
                release(self._connection(), self.holder, self.term)
        if self._db is not None:
            with contextlib.suppress(Exception):
                self._db.close()

    def _connection(self) -> pw.Database:
        if self._db is None:
            self._db = build_peewee_database(self.config)
        if not self._db.is_closed() and not self._db.is_connection_usable():
            with contextlib.suppress(Exception):
                self._db.close()
        if self._db.is_closed():
            self._db.connect()
            self._db.autocommit = True  # type: ignore[attr-defined]
            # A renewal stuck behind a lock must fail in time to be retried, not hang.
            timeout_ms = max(500, int(self.lease_s * 1000 / 3))
            self._db.execute_sql(f"SET statement_timeout = {timeout_ms}")
        return self._db

    def _run(self) -> None:
        renewed_at = 0.0  # monotonic time of the start of the last successful claim/renewal
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                db = self._connection()
                if self.term is None:
                    term = try_acquire(db, self.holder, self.advertise_url, self.lease_s)
                    if term is None:
                        self._on_observed(read_lease(db))
                    else:
                        self.term, renewed_at = term, started
                        log.info("leadership.acquired", term=term, holder=self.holder)
                        self._on_acquired(term)
                elif renew(db, self.holder, self.term, self.lease_s):
                    renewed_at = started
                else:
                    self._lose("another orchestrator took over the lease")
                    return
            except Exception as exc:  # the database is unreachable: keep trying
                log.warning("leadership.lease_error", error=str(exc).strip()[:200])
                with contextlib.suppress(Exception):
                    if self._db is not None:
                        self._db.close()
            if self.term is not None and time.monotonic() - renewed_at >= self.lease_s:
                # Our lease may have expired by the database's clock: a standby may be
                # active already. Step down before it could matter (the fence is the proof).
                self._lose(f"the lease was not renewed for {self.lease_s:g} s")
                return
            interval = self.lease_s / (3 if self.term is not None else 5)
            self._stop.wait(max(0.0, interval - (time.monotonic() - started)))

    def _lose(self, reason: str) -> None:
        log.error("leadership.lost", term=self.term, holder=self.holder, reason=reason)
        self._on_lost(reason)
