"""Approval rules: which submitted jobs wait for a lead's or an admin's decision.

Pure functions over plain values, so the policy is tested directly (tests/approval).
Rules are evaluated at submit in their order; the first enabled rule that matches the
submission and does not exempt the submitter's role holds the job in ``pending_approval``.
Condition names follow SimpleTuner's approval rules engine where one fits
(``hardware_type``, ``config_pattern``, ``first_job``, ``daily_jobs_exceed``,
``exempt_levels`` there; ``exempt_roles`` here, since tunefleet calls them roles).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Final, Literal, TypeAlias, get_args

Condition: TypeAlias = Literal[
    "gpus_exceed",  # more than N GPUs
    "hardware_type",  # gpu_name matches a glob
    "config_pattern",  # config name matches a glob
    "first_job",  # the user's first job ever
    "daily_jobs_exceed",  # the user's jobs today (this one not counted) over N
    "gpu_hours_exceed",  # estimated GPU-hours (GPUs x timeout) over N
]
CONDITIONS: Final[tuple[str, ...]] = get_args(Condition)
# Conditions whose threshold is a number, and those whose threshold is a glob.
NUMERIC: Final = frozenset({"gpus_exceed", "daily_jobs_exceed", "gpu_hours_exceed"})
GLOB: Final = frozenset({"hardware_type", "config_pattern"})
# Past any real fleet; keeps every threshold a finite number the evaluation can count to.
MAX_THRESHOLD: Final = 1e9


@dataclass(frozen=True)
class ApprovalRule:
    """One admin-defined rule. ``threshold`` is a number for NUMERIC conditions, a glob for
    GLOB ones and empty for ``first_job``."""

    condition: str
    threshold: str = ""
    exempt_roles: frozenset[str] = field(default_factory=frozenset)
    enabled: bool = True
    rule_id: int = 0


@dataclass(frozen=True)
class Submission:
    """What the rules read of a submitted job and its submitter."""

    role: str
    gpu_count: int
    gpu_name: str | None
    config_name: str | None
    timeout_minutes: float | None
    jobs_before: int  # the user's jobs submitted before this one, ever
    jobs_today: int  # of those, the ones submitted today (UTC)


def check_rule(condition: str, threshold: str) -> str | None:
    """Why (condition, threshold) is not a valid rule, as a one-line detail; None if it is."""
    if condition not in CONDITIONS:
        return f"condition: unknown {condition!r}; use one of {', '.join(CONDITIONS)}"
    if condition in NUMERIC:
        try:
            value = float(threshold)
        except ValueError:
            return f"threshold: {condition} needs a number, got {threshold!r}"
        if not 0 <= value <= MAX_THRESHOLD:  # refuses nan and inf too
            return (
                f"threshold: {condition} needs a number from 0 to {MAX_THRESHOLD:.0f}, "
                f"got {threshold!r}"
            )
    if condition in GLOB and not threshold:
        return f"threshold: {condition} needs a glob such as 'a100*'"
    return None


def matches(rule: ApprovalRule, job: Submission) -> bool:
    """Whether ``rule`` holds ``job`` (exemption and enablement aside)."""
    if rule.condition == "gpus_exceed":
        return job.gpu_count > float(rule.threshold)
    if rule.condition == "hardware_type":
        # A job asking for no particular GPU model matches no model glob.
        return job.gpu_name is not None and fnmatchcase(
            job.gpu_name.lower(), rule.threshold.lower()
        )
    if rule.condition == "config_pattern":
        return job.config_name is not None and fnmatchcase(job.config_name, rule.threshold)
    if rule.condition == "first_job":
        return job.jobs_before == 0
    if rule.condition == "daily_jobs_exceed":
        return job.jobs_today + 1 > float(rule.threshold)
    if rule.condition == "gpu_hours_exceed":
        # A job without a timeout runs unbounded: its estimate exceeds every threshold.
        if job.timeout_minutes is None:
            return True
        return job.gpu_count * job.timeout_minutes / 60 > float(rule.threshold)
    raise ValueError(f"unknown approval condition {rule.condition!r}")


def holding_rule(rules: Iterable[ApprovalRule], job: Submission) -> ApprovalRule | None:
    """The first enabled rule, in order, that matches ``job`` and does not exempt its
    submitter's role; None when the job goes straight to the queue."""
    for rule in rules:
        if rule.enabled and job.role not in rule.exempt_roles and matches(rule, job):
            return rule
    return None


def describe(rule: ApprovalRule) -> str:
    """The rule in words, for wait reasons and the UI: "more than 4 GPUs"."""
    words = {
        "gpus_exceed": f"more than {rule.threshold} GPUs",
        "hardware_type": f"GPU model matches {rule.threshold}",
        "config_pattern": f"config name matches {rule.threshold}",
        "first_job": "the user's first job",
        "daily_jobs_exceed": f"more than {rule.threshold} jobs today",
        "gpu_hours_exceed": f"more than {rule.threshold} estimated GPU-hours",
    }
    return words.get(rule.condition, rule.condition)


def wait_reason(rule: ApprovalRule, team: str | None) -> str:
    """Why a held job waits: "awaiting approval by a lead of team X (rule: more than 4 GPUs)"."""
    who = f"a lead of team {team}" if team else "an admin"
    return f"awaiting approval by {who} (rule: {describe(rule)})"


def ordered(rules: Sequence[ApprovalRule]) -> list[ApprovalRule]:
    """Rules in evaluation order (their ids are assigned in creation order)."""
    return sorted(rules, key=lambda rule: rule.rule_id)
