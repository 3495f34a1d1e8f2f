"""Approval rules on SQLite and PostgreSQL: stored as given, listed in id order, deleted."""

from __future__ import annotations

from tunefleet.storage.database import Database
from tunefleet.storage.store import Store


async def test_rules_round_trip_in_order_on_both_backends(db: Database) -> None:
    rules = Store(db).approval_rules
    held = await rules.add_rule("hardware_type", "a100*", ["lead", "admin"], True)
    later = await rules.add_rule("gpu_hours_exceed", "100", [], False)
    listed = await rules.rules()
    assert listed == [held, later]
    assert (listed[0].condition, listed[0].threshold, listed[0].exempt_roles) == (
        "hardware_type",
        "a100*",
        ["lead", "admin"],
    )
    assert await rules.delete_rule(held.id)
    assert await rules.rules() == [later]
