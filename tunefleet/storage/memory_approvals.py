"""In-memory approval rules: store_approvals' repository over memory_tables, keeping its
contract (the contract test checks)."""

from __future__ import annotations

from collections.abc import Sequence

from tunefleet.storage.memory_tables import Tables, fresh
from tunefleet.storage.models import ApprovalRule
from tunefleet.storage.rows import ApprovalRuleRow
from tunefleet.storage.store_approvals import ApprovalRuleRepo
from tunefleet.storage.store_base import Now


class MemoryApprovalRuleRepo(ApprovalRuleRepo):
    def __init__(self, now: Now, tables: Tables) -> None:
        self._now = now
        self._t = tables

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
        return fresh(self._t.insert("approval_rules", ApprovalRuleRow, ApprovalRule, values))

    def rules(self) -> list[ApprovalRuleRow]:
        return [fresh(row) for _, row in sorted(self._t.approval_rules.items())]

    def delete_rule(self, rule_id: int) -> bool:
        return self._t.approval_rules.pop(rule_id, None) is not None
