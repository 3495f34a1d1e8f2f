"""The audit table as a hash chain. Synchronous: these run on the DB thread.

Each event's hash = sha256(prev_hash + canonical JSON of its fields), prev_hash being the
hash of the event before it (GENESIS_HASH for the first). Appends run on the one DB
thread inside write transactions, so the chain is built serially. Editing, deleting or
reordering a stored event breaks the chain at that event; `verify` finds the first break.
Truncating the newest events is not detectable from the table alone, which is why the
audit log is also written as JSON lines on disk.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from json.encoder import encode_basestring
from typing import Any, NamedTuple

from tunefleet.storage.models import AuditEvent, canonical_json
from tunefleet.storage.rows import AuditEventRow, rows_of
from tunefleet.storage.statements import insert_row
from tunefleet.storage.store_base import Now, page

GENESIS_HASH = "0" * 64
_DETAIL = frozenset({"detail"})


def event_hash(prev_hash: str, fields: dict[str, Any]) -> str:
    return hashlib.sha256((prev_hash + canonical_json(fields)).encode()).hexdigest()


def hashed_fields(
    at: float,
    kind: str,
    actor: str | None,
    client_address: str | None,
    target: str | None,
    outcome: str,
    detail: dict[str, Any] | None,
) -> dict[str, Any]:
    """What an event's hash covers."""
    return {
        "at": at,
        "kind": kind,
        "actor": actor,
        "client_address": client_address,
        "target": target,
        "outcome": outcome,
        "detail": detail,
    }


def chained_values(prev_hash: str, event: dict[str, Any]) -> dict[str, Any]:
    """A new event's columns (but its id): `event`, its hashed_fields, chained to `prev_hash`.

    Normalised first, so the hash covers exactly what a later read gives back: a float
    `at` (an int would come back as float) and JSON-shaped detail.
    """
    detail = event["detail"] or {}
    fields = {
        **event,
        "at": float(event["at"]),
        "detail": _read_back(detail, canonical_json(detail)),
    }
    return {**fields, "prev_hash": prev_hash, "hash": event_hash(prev_hash, fields)}


# Values JSON gives back as they went in (same class, same value).
_JSON_SCALARS = frozenset({str, int, float, bool, type(None)})


def _read_back(detail: dict[str, Any], text: str) -> dict[str, Any]:
    """What a read of `detail` stored as `text` gives back. Audit detail is nearly always
    flat (ids, reasons, counts), which JSON returns as it was, its keys sorted: copied in
    that order, not parsed again."""
    if _is_flat(detail):
        return dict(sorted(detail.items()))
    return dict(json.loads(text))


def _is_flat(detail: dict[str, Any]) -> bool:
    """String keys and scalar values only: read back as it went in, and its canonical
    text is that of its read-back copy."""
    for key, value in detail.items():
        if key.__class__ is not str or value.__class__ not in _JSON_SCALARS:
            return False
    return True


def _flat_event_hash(
    prev_hash: str,
    at: float,
    kind: str,
    actor: str | None,
    client_address: str | None,
    target: str | None,
    outcome: str,
    detail_text: str,
) -> str | None:
    """event_hash of an event whose detail is flat (its canonical text `detail_text`) and
    whose other fields are plain strings or None and a finite float: the same canonical
    JSON, spelled field by field (its keys are fixed and sorted), not encoded whole again
    with the detail inside. None for any other event: the caller encodes it whole."""
    texts = []
    for value in (actor, client_address, kind, outcome, target):
        if value is None:
            texts.append("null")
        elif value.__class__ is str:
            texts.append(encode_basestring(value))
        else:
            return None
    if at.__class__ is not float or not math.isfinite(at):
        return None
    actor_, client_, kind_, outcome_, target_ = texts
    text = (
        f'{{"actor":{actor_},"at":{float.__repr__(at)},"client_address":{client_},'
        f'"detail":{detail_text},"kind":{kind_},"outcome":{outcome_},"target":{target_}}}'
    )
    return hashlib.sha256((prev_hash + text).encode()).hexdigest()


class AuditLink(NamedTuple):
    """A stored event's id and hash: what its line in the audit file names."""

    id: int
    hash: str


@dataclass(frozen=True, slots=True)
class ChainCheck:
    """One verified stretch of the chain; verification continues from last_id/last_hash."""

    first_bad_id: int | None
    last_id: int
    last_hash: str
    checked: int


def check_rows(rows: Iterable[AuditEventRow], after_id: int, prev_hash: str) -> ChainCheck:
    """Verify `rows`, the events after `after_id` in id order, `prev_hash` being the hash
    before them: stops at the first whose link or hash is wrong."""
    last_id, last_hash, checked = after_id, prev_hash, 0
    for row in rows:
        fields = hashed_fields(
            row.at, row.kind, row.actor, row.client_address, row.target, row.outcome, row.detail
        )
        if row.prev_hash != last_hash or row.hash != event_hash(last_hash, fields):
            return ChainCheck(row.id, last_id, last_hash, checked)
        last_id, last_hash, checked = row.id, row.hash, checked + 1
    return ChainCheck(None, last_id, last_hash, checked)


class AuditRepo:
    def __init__(self, now: Now) -> None:
        self._now = now
        # The newest event's hash, so an append need not read it back. Only this DB
        # thread appends; the Store makes it forget on any rollback (see Database).
        self._chain_head: str | None = None

    def forget_chain_head(self) -> None:
        self._chain_head = None

    def append(
        self,
        kind: str,
        *,
        actor: str | None = None,
        client_address: str | None = None,
        target: str | None = None,
        outcome: str = "ok",
        detail: dict[str, Any] | None = None,
        at: float | None = None,
    ) -> AuditEventRow:
        stored, read_back = self._insert(
            kind, actor, client_address, target, outcome, detail, at, read_back=True
        )
        return AuditEventRow(
            stored["id"],
            stored["at"],
            stored["kind"],
            stored["actor"],
            stored["client_address"],
            stored["target"],
            stored["outcome"],
            read_back,
            stored["prev_hash"],
            stored["hash"],
        )

    def add(
        self,
        kind: str,
        *,
        actor: str | None = None,
        client_address: str | None = None,
        target: str | None = None,
        outcome: str = "ok",
        detail: dict[str, Any] | None = None,
        at: float | None = None,
    ) -> AuditLink:
        """`append` for a caller that needs only the new event's id and hash (its audit
        file line): the same row stored, no row built back."""
        stored, _ = self._insert(
            kind, actor, client_address, target, outcome, detail, at, read_back=False
        )
        return AuditLink(stored["id"], stored["hash"])

    def _insert(
        self,
        kind: str,
        actor: str | None,
        client_address: str | None,
        target: str | None,
        outcome: str,
        detail: dict[str, Any] | None,
        at: float | None,
        *,
        read_back: bool,
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The stored columns, and (when ``read_back`` or the hash needs it) the detail as a
        read gives it back; {} otherwise."""
        when = self._now() if at is None else at
        prev_hash = self._chain_head
        if prev_hash is None:
            last = AuditEvent.select(AuditEvent.hash).order_by(AuditEvent.id.desc()).limit(1)
            prev_hash = last.scalar() or GENESIS_HASH
        at_ = float(when)
        given = detail or {}
        text = canonical_json(given)
        digest = None
        if _is_flat(given):
            digest = _flat_event_hash(
                prev_hash, at_, kind, actor, client_address, target, outcome, text
            )
        back: dict[str, Any] = {}
        if read_back or digest is None:  # not on a step's hot path: `add` of a flat event
            back = _read_back(given, text)
        if digest is None:
            fields = hashed_fields(at_, kind, actor, client_address, target, outcome, back)
            digest = event_hash(prev_hash, fields)
        # The detail goes in as the text just hashed, and comes back as the dict that text
        # reads as: neither encoded nor parsed again.
        values = {
            "at": at_,
            "kind": kind,
            "actor": actor,
            "client_address": client_address,
            "target": target,
            "outcome": outcome,
            "detail": text,
            "prev_hash": prev_hash,
            "hash": digest,
        }
        stored = insert_row(AuditEvent, values, encoded=_DETAIL)
        self._chain_head = digest
        return stored, back

    def find(
        self,
        *,
        kind: str | None = None,
        actor: str | None = None,
        target: str | None = None,
        outcome: str | None = None,
        since: float | None = None,
        until: float | None = None,
        newest_first: bool = True,
        limit: int = 100,
        offset: int = 0,
    ) -> list[AuditEventRow]:
        """Events matching every filter; `since` inclusive, `until` exclusive."""
        limit, offset = page(limit, offset)
        query = AuditEvent.select()
        if kind is not None:
            query = query.where(AuditEvent.kind == kind)
        if actor is not None:
            query = query.where(AuditEvent.actor == actor)
        if target is not None:
            query = query.where(AuditEvent.target == target)
        if outcome is not None:
            query = query.where(AuditEvent.outcome == outcome)
        if since is not None:
            query = query.where(AuditEvent.at >= since)
        if until is not None:
            query = query.where(AuditEvent.at < until)
        ordering = AuditEvent.id.desc() if newest_first else AuditEvent.id.asc()
        query = query.order_by(ordering).limit(limit).offset(offset)
        return rows_of(AuditEventRow, query)

    def check_chain(self, after_id: int, prev_hash: str, limit: int) -> ChainCheck:
        """Verify up to `limit` events after `after_id`, `prev_hash` being the hash before."""
        query = (
            AuditEvent.select().where(AuditEvent.id > after_id).order_by(AuditEvent.id).limit(limit)
        )
        return check_rows(rows_of(AuditEventRow, query), after_id, prev_hash)
