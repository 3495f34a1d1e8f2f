"""The hot INSERTs and compare-and-set UPDATEs, their SQL built once per shape.

Every job cycle runs a dozen of these on the DB thread. Built through peewee's query
objects, the SQL text costs 50-80 us a statement, more than SQLite takes to run it, and
was the largest share of the DB thread's time. For a given model, backend and set of
columns the text never changes, so it is built once here; each call converts its values
with the fields' own ``db_value`` (as peewee does) and runs the cached text. Statements
run on the calling thread's connection (``database_proxy``), inside its transaction.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, NoReturn

import peewee as pw

from tunefleet.storage.models import database_proxy, stored_as_is
from tunefleet.storage.postgres import DeferringConnection

_SQL: dict[tuple[Any, ...], str] = {}


def insert_row(
    model: type[pw.Model], values: Mapping[str, Any], *, encoded: Collection[str] = ()
) -> dict[str, Any]:
    """INSERT one row of ``model``: the given values (by field name), the model's default
    for the others. Returns every field as the database holds it (each field's
    ``db_value``; JSON as text), the new id included: rows.inserted reads it as a row.
    ``encoded`` names fields whose given values are already as the database holds them
    (JSON text the caller has encoded): stored without converting again."""
    db = _database()
    plan = _INSERTS.get((model, type(db)))
    if plan is None:
        plan = _INSERTS[model, type(db)] = _InsertPlan(db, model)
    stored = {}
    for name, kind, db_value, default, stored_default in plan.columns:
        value = values.get(name, _MISSING)
        if value is _MISSING:
            value = stored_default if stored_default is not _CALL else db_value(default())
        elif value is not None and value.__class__ is not kind and name not in encoded:
            value = db_value(value)
        stored[name] = value
    cursor = execute_planned(db, plan.sql, list(stored.values()))
    if plan.auto is not None:
        stored[plan.auto] = cursor.fetchone()[0] if db.returning_clause else cursor.lastrowid
    return stored


_MISSING: Any = object()
_CALL: Any = object()  # a default computed afresh per row


class _InsertPlan:
    """One model's INSERT on one backend, worked out once: a job cycle inserts half a
    dozen rows, and finding each field's default and converter again per row cost more
    than SQLite takes to store it."""

    __slots__ = ("auto", "columns", "sql")

    def __init__(self, db: pw.Database, model: type[pw.Model]) -> None:
        meta = model._meta
        auto = meta.primary_key if isinstance(meta.primary_key, pw.AutoField) else None
        fields = [f for f in meta.sorted_fields if f is not auto]
        self.auto = auto.name if auto is not None else None
        self.sql = _insert_sql(db, meta.table_name, fields, auto)
        # (name, the class a value is stored as it is, db_value, default, stored default)
        self.columns = tuple(
            (f.name, stored_as_is(f), f.db_value, f.default, _stored_default(f)) for f in fields
        )


_INSERTS: dict[tuple[type[pw.Model], type[pw.Database]], _InsertPlan] = {}


def _stored_default(field: pw.Field) -> Any:
    """The default as stored, encoded once when it never changes (JSON ``{}`` and ``[]``
    included); _CALL for one computed per row."""
    default = field.default
    if default in (dict, list):
        return field.db_value(default())
    return _CALL if callable(default) else field.db_value(default)


def savepoint() -> AbstractContextManager[Any]:
    """A savepoint around ONE INSERT that may hit a unique index, so the transaction
    survives the conflict (PostgreSQL aborts it otherwise). Plain SQL, one fixed name:
    peewee's own costs a uuid4 and its context objects per row, and savepoints of one
    name nest (each statement names the newest). On SQLite none: a failed statement is
    undone alone and its transaction goes on, which saves a job cycle four statements.
    Outside a transaction: peewee's atomic, which begins one."""
    db = _database()
    if not db.in_transaction():
        return db.atomic()
    if isinstance(db, pw.SqliteDatabase):
        return _NO_SAVEPOINT
    return Savepoint(db, "one_row")


_NO_SAVEPOINT = nullcontext()


class SavepointLost(pw.OperationalError):
    """A failed write's savepoint could not be rolled back to: what it wrote cannot be
    undone alone, so the whole transaction must be rolled back."""


class Savepoint:
    """A plain-SQL savepoint named ``name`` in ``db``'s open transaction: rolled back to
    when the block raises (the error goes on), released either way. One fixed name per
    use keeps the statement texts few in sqlite3's cache of prepared statements.

    On PostgreSQL (a DeferringConnection, storage/postgres.py) the savepoint is not sent
    on its own: it waits for the block's first statement and its release for the next
    statement after the block, each with a name of its own. A block that ran no
    statement costs none. If the rollback fails, SavepointLost is raised from the error.
    """

    __slots__ = ("_db", "_deferring", "_name", "lost")

    def __init__(self, db: pw.Database, name: str) -> None:
        self._db = db
        self._name = name
        self._deferring: DeferringConnection | None = None
        self.lost = False  # the rollback to it failed (SavepointLost was raised)

    def __enter__(self) -> None:
        conn = self._db.connection()
        if isinstance(conn, DeferringConnection):
            self._deferring = conn
            self._name = conn.savepoint_name(self._name)
            conn.pending.append(f"SAVEPOINT {self._name}")
            return
        execute(self._db, f"SAVEPOINT {self._name}")

    def __exit__(self, exc_type: type[BaseException] | None, exc: Any, _: object) -> None:
        conn = self._deferring
        if conn is not None and conn.withdraw(f"SAVEPOINT {self._name}"):
            return  # never sent: nothing ran inside, nothing to undo or release
        if exc_type is not None:
            try:
                execute(self._db, f"ROLLBACK TO SAVEPOINT {self._name}")
            except pw.PeeweeException as error:
                self.lost = True
                raise SavepointLost(f"cannot undo a failed write: {error}") from exc
        if conn is not None:
            conn.pending.append(f"RELEASE SAVEPOINT {self._name}")
        else:
            execute(self._db, f"RELEASE SAVEPOINT {self._name}")


def update_where(
    model: type[pw.Model],
    changes: Mapping[str, Any],
    *,
    equal: Mapping[str, Any],
    one_of: tuple[str, Sequence[Any]] | None = None,
    null: Collection[str] = (),
) -> int:
    """UPDATE ``model`` SET ``changes`` WHERE every ``equal`` field equals its value, the
    ``one_of`` field is one of its values and the ``null`` fields are NULL: the compare-
    and-set the repositories need. Returns the number of rows changed."""
    db = _database()
    in_name, in_values = one_of if one_of is not None else ("", ())
    if one_of is not None and not in_values:
        raise ValueError(f"{in_name} must be one of at least one value")
    key = ("update", model, type(db), tuple(changes), tuple(equal), in_name, len(in_values), *null)
    plan = _UPDATES.get(key)
    if plan is None:
        sql = _update_sql(db, model, changes, equal, in_name, len(in_values), null)
        names = (*changes, *equal, *[in_name] * len(in_values))
        plan = _UPDATES[key] = (sql, _converters(model, names))
    sql, converters = plan
    params = _bound(converters, (*changes.values(), *equal.values(), *in_values))
    return int(execute_planned(db, sql, params).rowcount)


_Converters = tuple[tuple[type | None, Any], ...]
_UPDATES: dict[tuple[Any, ...], tuple[str, _Converters]] = {}


def _converters(model: type[pw.Model], names: Sequence[str]) -> _Converters:
    """Per parameter, the class its field stores as it is and the field's db_value."""
    fields = model._meta.fields
    return tuple((stored_as_is(fields[n]), fields[n].db_value) for n in names)


def _bound(converters: _Converters, values: Iterable[Any]) -> list[Any]:
    """Each value through its field's db_value, but those it would store unchanged."""
    return [
        value if value is None or value.__class__ is kind else db_value(value)
        for (kind, db_value), value in zip(converters, values, strict=True)
    ]


def update_each(
    model: type[pw.Model], columns: Sequence[str], key: str, rows: Iterable[Sequence[Any]]
) -> int:
    """UPDATE ``model`` SET ``columns`` WHERE ``key`` equals, once per row (each row the
    columns' values, then the key's), as one statement run for all of them: many
    workers' heartbeats in one write. Returns the number of rows changed."""
    db = _database()
    sql_key = ("update", model, type(db), tuple(columns), (key,), "", 0)
    plan = _UPDATES.get(sql_key)
    if plan is None:
        sql = _update_sql(db, model, columns, (key,), "", 0, ())
        plan = _UPDATES[sql_key] = (sql, _converters(model, (*columns, key)))
    sql, converters = plan
    params = [_bound(converters, row) for row in rows]
    cursor = db.cursor()
    cursor.executemany(sql, params)
    return int(cursor.rowcount)


def select_where(
    model: type[pw.Model], columns: Sequence[str], *, equal: Mapping[str, Any]
) -> list[tuple[Any, ...]]:
    """SELECT ``columns`` of ``model`` WHERE every ``equal`` field equals its value: the
    rows as the database holds them (JSON as text), for a lookup on every report."""
    db = _database()
    fields = model._meta.fields
    key: tuple[Any, ...] = ("select", model, type(db), tuple(columns), tuple(equal))
    sql = _SQL.get(key)
    if sql is None:
        names = ", ".join(_quoted(db, fields[name].column_name) for name in columns)
        where = " AND ".join(f"{_quoted(db, fields[n].column_name)} = {db.param}" for n in equal)
        sql = _SQL[key] = f"SELECT {names} FROM {_quoted(db, model._meta.table_name)} WHERE {where}"
    params = [fields[name].db_value(value) for name, value in equal.items()]
    return list(execute_planned(db, sql, params).fetchall())


def delete_where(model: type[pw.Model], *, equal: Mapping[str, Any]) -> int:
    """DELETE FROM ``model`` WHERE every ``equal`` field equals its value."""
    db = _database()
    fields = model._meta.fields
    key: tuple[Any, ...] = ("delete", model, type(db), tuple(equal))
    sql = _SQL.get(key)
    if sql is None:
        where = " AND ".join(f"{_quoted(db, fields[n].column_name)} = {db.param}" for n in equal)
        sql = _SQL[key] = f"DELETE FROM {_quoted(db, model._meta.table_name)} WHERE {where}"
    params = [fields[name].db_value(value) for name, value in equal.items()]
    return int(execute_planned(db, sql, params).rowcount)


def execute(db: pw.Database, sql: str, params: Sequence[Any] = ()) -> Any:
    """Run ``sql`` on a new cursor of ``db``'s connection, within its transaction; the
    cursor. What peewee's execute_sql does, but its per-statement debug logging and
    query-hook checks (tunefleet uses neither): a job cycle runs some thirty statements.
    Errors come out as peewee's (IntegrityError...), which the callers catch."""
    try:
        cursor = db.connection().cursor()
        cursor.execute(sql, params)
    except Exception:
        _as_peewee_error()
    return cursor


def execute_planned(db: pw.Database, sql: str, params: Sequence[Any]) -> Any:
    """``execute`` for the SQL texts built once here: on PostgreSQL prepared once per
    connection and run by name (DeferringConnection.execute_prepared)."""
    try:
        conn = db.connection()
        cursor = conn.cursor()
        if isinstance(conn, DeferringConnection):
            conn.execute_prepared(cursor, sql, params)
        else:
            cursor.execute(sql, params)
    except Exception:
        _as_peewee_error()
    return cursor


_AS_PEEWEE_ERRORS = pw.__exception_wrapper__  # type: ignore[attr-defined]  # not in the stubs


def _as_peewee_error() -> NoReturn:
    """Raise the error being handled as peewee's wrapper does (IntegrityError...): only
    when there is one, since entering and leaving the wrapper on every statement costs
    two Python calls."""
    with _AS_PEEWEE_ERRORS:
        raise  # re-raised inside the wrapper, which converts it


def _database() -> pw.Database:
    db = database_proxy.obj
    if db is None:  # the same refusal as the models' own queries off the DB thread
        raise AttributeError(
            "storage statements only run on the database thread: go through Database or Store"
        )
    return db


def _value_or_default(field: pw.Field, values: Mapping[str, Any]) -> Any:
    if field.name in values:
        return values[field.name]
    return field.default() if callable(field.default) else field.default


def _quoted(db: pw.Database, name: str) -> str:
    return f"{db.quote[0]}{name}{db.quote[1]}"


def _insert_sql(db: pw.Database, table: str, fields: list[pw.Field], auto: pw.Field | None) -> str:
    columns = ", ".join(_quoted(db, f.column_name) for f in fields)
    marks = ", ".join([db.param] * len(fields))
    sql = f"INSERT INTO {_quoted(db, table)} ({columns}) VALUES ({marks})"
    if auto is not None and db.returning_clause:
        sql += f" RETURNING {_quoted(db, auto.column_name)}"
    return sql


def _update_sql(
    db: pw.Database,
    model: type[pw.Model],
    changes: Iterable[str],
    equal: Iterable[str],
    in_name: str,
    in_count: int,
    null: Collection[str],
) -> str:
    fields = model._meta.fields

    def column(name: str) -> str:
        return _quoted(db, fields[name].column_name)

    sets = ", ".join(f"{column(name)} = {db.param}" for name in changes)
    where = [f"{column(name)} = {db.param}" for name in equal]
    if in_name:
        where.append(f"{column(in_name)} IN ({', '.join([db.param] * in_count)})")
    where += [f"{column(name)} IS NULL" for name in null]
    return f"UPDATE {_quoted(db, model._meta.table_name)} SET {sets} WHERE {' AND '.join(where)}"
