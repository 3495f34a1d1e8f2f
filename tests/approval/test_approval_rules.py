"""The approval rules, directly: each condition against its own wording, evaluation order,
exemptions, disabled rules, validation, and the wait reason."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tunefleet.approval_rules import (
    CONDITIONS,
    ApprovalRule,
    Submission,
    check_rule,
    holding_rule,
    matches,
    wait_reason,
)
from tunefleet.http.roles import ROLES

GPU_MODELS = ["A100-80GB", "a100-40gb", "H100", "RTX 4090", "L40S"]
CONFIGS = ["flux-lora", "sdxl-full", "flux-full", "wan-video"]

submissions = st.builds(
    Submission,
    role=st.sampled_from(ROLES),
    gpu_count=st.integers(min_value=1, max_value=16),
    gpu_name=st.none() | st.sampled_from(GPU_MODELS),
    config_name=st.none() | st.sampled_from(CONFIGS),
    timeout_minutes=st.none() | st.floats(min_value=1, max_value=10_000),
    jobs_before=st.integers(min_value=0, max_value=50),
    jobs_today=st.integers(min_value=0, max_value=50),
).filter(lambda job: job.jobs_today <= job.jobs_before)


def thresholds(condition: str) -> st.SearchStrategy[str]:
    if condition in ("gpus_exceed", "daily_jobs_exceed", "gpu_hours_exceed"):
        return st.integers(min_value=0, max_value=100).map(str)
    if condition == "hardware_type":
        return st.sampled_from(["a100*", "H100", "*", "rtx*"])
    if condition == "config_pattern":
        return st.sampled_from(["flux-*", "*full", "*", "sdxl-full"])
    return st.just("")


rules = st.sampled_from(CONDITIONS).flatmap(
    lambda condition: st.builds(
        ApprovalRule,
        condition=st.just(condition),
        threshold=thresholds(condition),
        exempt_roles=st.frozensets(st.sampled_from(ROLES), max_size=2),
        enabled=st.booleans(),
    )
)


def expected_match(rule: ApprovalRule, job: Submission) -> bool:
    """The issue's wording, written apart from the module."""
    import fnmatch

    n = float(rule.threshold) if rule.threshold.isdigit() else 0.0
    return {
        "gpus_exceed": lambda: job.gpu_count > n,
        "hardware_type": lambda: (
            job.gpu_name is not None
            and fnmatch.fnmatchcase(job.gpu_name.lower(), rule.threshold.lower())
        ),
        "config_pattern": lambda: (
            job.config_name is not None and fnmatch.fnmatchcase(job.config_name, rule.threshold)
        ),
        "first_job": lambda: job.jobs_before == 0,
        "daily_jobs_exceed": lambda: job.jobs_today + 1 > n,
        "gpu_hours_exceed": lambda: (
            job.timeout_minutes is None or job.gpu_count * job.timeout_minutes / 60 > n
        ),
    }[rule.condition]()


@given(rule=rules, job=submissions)
def test_each_condition_matches_as_worded(rule: ApprovalRule, job: Submission) -> None:
    assert matches(rule, job) == expected_match(rule, job)


@given(ruleset=st.lists(rules, max_size=6), job=submissions)
def test_the_first_applicable_rule_in_order_holds_the_job(
    ruleset: list[ApprovalRule], job: Submission
) -> None:
    applicable = [
        rule
        for rule in ruleset
        if rule.enabled and job.role not in rule.exempt_roles and expected_match(rule, job)
    ]
    assert holding_rule(ruleset, job) == (applicable[0] if applicable else None)


@given(ruleset=st.lists(rules, max_size=6), job=submissions)
def test_a_role_exempt_from_every_rule_is_never_held(
    ruleset: list[ApprovalRule], job: Submission
) -> None:
    exempt = [
        ApprovalRule(r.condition, r.threshold, r.exempt_roles | {job.role}, r.enabled)
        for r in ruleset
    ]
    assert holding_rule(exempt, job) is None


@given(ruleset=st.lists(rules, max_size=6), job=submissions)
def test_disabled_rules_never_hold(ruleset: list[ApprovalRule], job: Submission) -> None:
    disabled = [ApprovalRule(r.condition, r.threshold, r.exempt_roles, False) for r in ruleset]
    assert holding_rule(disabled, job) is None


@given(rule=rules)
def test_every_generated_rule_is_valid(rule: ApprovalRule) -> None:
    assert check_rule(rule.condition, rule.threshold) is None


@pytest.mark.parametrize(
    ("condition", "threshold", "detail"),
    [
        ("cost_exceeds", "50", "condition: unknown 'cost_exceeds'; use one of"),
        ("gpus_exceed", "four", "threshold: gpus_exceed needs a number, got 'four'"),
        ("gpu_hours_exceed", "-1", "threshold: gpu_hours_exceed needs a number from 0 to"),
        ("gpus_exceed", "nan", "threshold: gpus_exceed needs a number from 0 to"),
        ("daily_jobs_exceed", "1e400", "threshold: daily_jobs_exceed needs a number from 0 to"),
        ("hardware_type", "", "threshold: hardware_type needs a glob"),
    ],
)
def test_invalid_rules_are_refused_with_what_to_send(
    condition: str, threshold: str, detail: str
) -> None:
    refused = check_rule(condition, threshold)
    assert refused is not None and refused.startswith(detail)


def test_the_wait_reason_names_the_team_and_the_rule() -> None:
    rule = ApprovalRule("gpus_exceed", "4")
    assert wait_reason(rule, "vision") == (
        "awaiting approval by a lead of team vision (rule: more than 4 GPUs)"
    )
    assert wait_reason(rule, None) == "awaiting approval by an admin (rule: more than 4 GPUs)"


def test_an_unbounded_job_exceeds_any_gpu_hours_threshold() -> None:
    job = Submission("researcher", 1, None, None, None, jobs_before=3, jobs_today=0)
    assert matches(ApprovalRule("gpu_hours_exceed", "1000"), job)
