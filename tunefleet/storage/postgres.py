"""The PostgreSQL connection: transaction and savepoint statements ride with the next one.

Each statement sent to PostgreSQL is a round trip to its server, paid in latency and in
CPU on both sides. A write group used to send BEGIN, the fence, then per write SAVEPOINT,
its statements and RELEASE SAVEPOINT, and COMMIT: of a job cycle's 24 round trips, 11
carried no data. Here BEGIN, SAVEPOINT and RELEASE SAVEPOINT are not sent when asked for
but kept pending on the connection and sent in front of the next statement, in the same
string (psycopg2 sends a string of several statements as one simple query, one round
trip; its result is the last statement's). COMMIT and ROLLBACK drop what is still
pending (COMMIT releases every savepoint; a transaction that sent nothing has nothing to
end), and COMMIT checks the server's answer: a transaction that an error left aborted is
answered "ROLLBACK", never taken for committed.

A savepoint sent with the statement after it has a name of its own (``write_17``): when
that statement fails, ROLLBACK TO that name undoes exactly what followed the savepoint,
and if the savepoint itself was never run (PostgreSQL parses a whole string before it
runs any of it, so a syntax error runs none) the name does not exist and the rollback
fails loudly (statements.SavepointLost) instead of reaching an older savepoint.
"""

from __future__ import annotations

from typing import Any

import peewee as pw
import psycopg2.extensions  # type: ignore[import-untyped]

# What a connection keeps pending when nothing has been sent in its transaction yet.
BEGIN = "BEGIN"


class DeferringCursor(psycopg2.extensions.cursor):
    """Sends the connection's pending statements in front of the next one it runs."""

    def execute(self, query: Any, vars: Any = None) -> None:
        conn: DeferringConnection = self.connection
        pending = conn.pending
        if not pending:
            return super().execute(query, vars)
        # Bound here, as psycopg2 would: an unbindable value raises before anything is
        # sent, and the pending statements stay pending.
        sql = self.mogrify(query, vars)
        prefix = ";".join(pending).encode() + b";"
        pending.clear()  # sent, or on a connection that is gone
        return super().execute(prefix + sql)

    def executemany(self, query: Any, vars_list: Any) -> None:
        pending = self.connection.pending
        if pending:
            statements = ";".join(pending)
            pending.clear()
            super().execute(statements)  # one round trip for them, as before
        return super().executemany(query, vars_list)


class DeferringConnection(psycopg2.extensions.connection):
    """A psycopg2 connection with statements pending for the next round trip."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.cursor_factory = DeferringCursor
        self.pending: list[str] = []
        self.names_given = 0  # savepoint and statement names: each one new
        # statement text -> the EXECUTE that runs it, prepared on this connection
        self.prepared: dict[str, str] = {}

    def savepoint_name(self, prefix: str) -> str:
        self.names_given += 1
        return f"{prefix}_{self.names_given}"

    def execute_prepared(self, cursor: DeferringCursor, sql: str, params: Any) -> None:
        """Run ``sql`` (``%s`` placeholders) as a statement prepared on this connection:
        the server parses and plans its text once, not at every run (a quarter to a third
        of the server's CPU for a small INSERT, measured). The PREPARE goes with the first
        run. If that run fails, whether the PREPARE ran is unknown: the next run prepares
        it afresh under a new name (never reused, so an orphan is never run by mistake).
        Prepared statements live in the session: a pooler must not share the connection
        between sessions (pgbouncer's transaction pooling)."""
        run = self.prepared.get(sql)
        if run is not None:
            cursor.execute(run, params)
            return
        self.names_given += 1
        name = f"tf_{self.names_given}"
        parts = sql.split("%s")
        numbered = "".join(f"{part}${n}" for n, part in enumerate(parts[:-1], 1)) + parts[-1]
        prepare = f"PREPARE {name} AS {numbered}"
        marks = ", ".join(["%s"] * (len(parts) - 1))
        run = f"EXECUTE {name} ({marks})" if marks else f"EXECUTE {name}"
        self.pending.append(prepare)
        try:
            cursor.execute(run, params)
        except BaseException:
            self.withdraw(prepare)  # still pending when the values could not be bound
            raise
        self.prepared[sql] = run

    def withdraw(self, statement: str) -> bool:
        """Take back ``statement`` if it is the newest pending one: nothing ran after it."""
        pending = self.pending
        if pending and pending[-1] == statement:
            pending.pop()
            return True
        return False


class DeferringPostgresqlDatabase(pw.PostgresqlDatabase):
    """peewee's PostgreSQL database on a DeferringConnection: BEGIN waits for the
    transaction's first statement, and a transaction that sent none ends unsent."""

    def begin(self, isolation_level: Any = None) -> None:
        if isolation_level is not None or self._isolation_level:  # type: ignore[attr-defined]
            super().begin(isolation_level)
            return
        conn = self.connection()
        conn.pending[:] = [BEGIN]

    def commit(self) -> None:
        conn = self._pending_connection()
        if conn is None:
            return
        cursor = conn.cursor()
        with _AS_PEEWEE_ERRORS:
            cursor.execute("COMMIT")
        if cursor.statusmessage != "COMMIT":
            # An error aborted the transaction and nothing rolled it back to a
            # savepoint: the server rolled it all back. Nobody may hear "written".
            raise pw.OperationalError(
                f"the transaction was rolled back, not committed ({cursor.statusmessage})"
            )

    def rollback(self) -> None:
        conn = self._pending_connection()
        if conn is None or conn.closed:
            return  # never begun on the server, or ended there with the lost connection
        with _AS_PEEWEE_ERRORS:
            conn.cursor().execute("ROLLBACK")

    def _pending_connection(self) -> DeferringConnection | None:
        """The connection to end the transaction on; None when it never began on the
        server. What is pending is dropped either way: ending it ends its savepoints."""
        if self.is_closed():
            raise pw.InterfaceError("the database connection is not open")
        conn: DeferringConnection = self._state.conn  # type: ignore[attr-defined]
        began = not conn.pending or conn.pending[0] != BEGIN
        conn.pending.clear()
        return conn if began else None


_AS_PEEWEE_ERRORS = pw.__exception_wrapper__  # type: ignore[attr-defined]  # not in the stubs
