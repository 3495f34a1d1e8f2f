"""Approval rules, stored in the order they are evaluated (by id). Synchronous
repository for the DB thread, and the awaited facade the routes and the submit use."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from tunefleet.storage.models import ApprovalRule
from tunefleet.storage.rows import ApprovalRuleRow, inserted, rows_of
from tunefleet.storage.statements import insert_row
from tunefleet.storage.store_base import Connector, Now


class ApprovalRuleRepo:
    def __init__(self, now: Now) -> None:
        self._now = now

    def add_rule(
        self, condition: str, threshold: str, exempt_roles: Sequence[str], enabled: bool
    ) -> ApprovalRuleRow:
        values = {
            "condition": condition,
            "threshold": threshold,
            "exempt_roles": list(exempt_roles),
            "enabled": enabled,
            "created_at": self._now(),
        }
        return inserted(ApprovalRuleRow, ApprovalRule, insert_row(ApprovalRule, values))

    def rules(self) -> list[ApprovalRuleRow]:
        return rows_of(ApprovalRuleRow, ApprovalRule.select().order_by(ApprovalRule.id))

    def delete_rule(self, rule_id: int) -> bool:
        return bool(ApprovalRule.delete().where(ApprovalRule.id == rule_id).execute())


class ApprovalRuleRecords:
    """The rules, awaited from the event loop; every submit reads them, and they change
    only here, so the list read once is kept until a write."""

    def __init__(self, db: Connector, repo: ApprovalRuleRepo) -> None:
        self.db = db
        self.repo = repo
        self._kept: list[ApprovalRuleRow] | None = None

    async def rules(self) -> list[ApprovalRuleRow]:
        if self._kept is None:
            self._kept = await self.db.read(self.repo.rules)
        return list(self._kept)

    async def add_rule(
        self, condition: str, threshold: str, exempt_roles: Sequence[str], enabled: bool
    ) -> ApprovalRuleRow:
        self._kept = None
        add = partial(self.repo.add_rule, condition, threshold, exempt_roles, enabled)
        try:
            return await self.db.write(add)
        finally:
            self._kept = None

    async def delete_rule(self, rule_id: int) -> bool:
        self._kept = None
        try:
            return await self.db.write(partial(self.repo.delete_rule, rule_id))
        finally:
            self._kept = None
