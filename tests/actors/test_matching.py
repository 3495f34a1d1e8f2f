"""Unit tests for the pure matching core: one rule or one wording per test."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import pytest

from tunefleet.actors.matching import (
    InvalidRequirements,
    PendingJob,
    Requirements,
    WorkerView,
    job_gpu_count_from_config,
    plan,
    unmet,
)
from tunefleet.actors.wait_reasons import wait_reason
from tunefleet.errors import TunefleetError


def worker(
    worker_id: str,
    gpus: int = 1,
    vram: float | None = 24.0,
    name: str | None = "NVIDIA A10",
    labels: Mapping[str, str] | None = None,
    *,
    local: bool = False,
) -> WorkerView:
    return WorkerView(worker_id, local, dict(labels or {}), gpus, vram, name)


def job(job_id: str, req: Requirements, priority: int = 0, seq: int = 0) -> PendingJob:
    return PendingJob(job_id, priority, seq, req)


REMOTE = Requirements("worker")
LOCAL_RUNNER = worker("local", gpus=1, local=True)


# --- Requirements ------------------------------------------------------------------------


def test_requirements_defaults_ask_for_one_gpu_and_nothing_else() -> None:
    req = Requirements("auto")
    assert (req.gpu_count, req.labels, req.min_vram_gb, req.gpu_name) == (1, {}, None, None)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"target": "cloud"}, "target must be one of worker, local, auto; got 'cloud'"),
        ({"target": "worker", "gpu_count": -1}, "gpu_count must be 0 or more; got -1"),
        ({"target": "worker", "min_vram_gb": -2.0}, "min_vram_gb must be 0 or more; got -2.0"),
    ],
)
def test_malformed_requirements_are_refused_with_a_400(
    kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(InvalidRequirements) as caught:
        Requirements(**kwargs)  # type: ignore[arg-type]
    assert str(caught.value) == message
    assert isinstance(caught.value, TunefleetError)
    assert caught.value.status == 400


def test_requirements_keep_their_own_copy_of_the_labels() -> None:
    labels = {"team": "nlp"}
    req = Requirements("worker", labels=labels)
    labels["team"] = "cv"
    assert req.labels == {"team": "nlp"}


def test_equal_requirements_share_a_key_whatever_the_spelling() -> None:
    a = Requirements("auto", {"b": "1", "a": "2"}, 2, 0.0, "H100*")
    b = Requirements("auto", {"a": "2", "b": "1"}, 2, None, "h100*")
    assert a.key() == b.key()
    assert hash(a.key()) == hash(b.key())
    assert Requirements("auto", gpu_count=3).key() != Requirements("auto").key()


# --- unmet: one worker against one job ---------------------------------------------------


def test_target_worker_never_takes_the_local_runner() -> None:
    assert unmet(REMOTE, LOCAL_RUNNER) == (
        "is the orchestrator's local runner; target worker needs a remote worker"
    )
    assert unmet(REMOTE, worker("w_a")) is None


def test_target_local_takes_only_the_local_runner() -> None:
    req = Requirements("local")
    assert unmet(req, worker("w_a")) == (
        "is a remote worker; target local runs only on the orchestrator"
    )
    assert unmet(req, LOCAL_RUNNER) is None


def test_target_auto_takes_either() -> None:
    req = Requirements("auto")
    assert unmet(req, worker("w_a")) is None
    assert unmet(req, LOCAL_RUNNER) is None


def test_gpu_count_must_suffice() -> None:
    assert unmet(Requirements("worker", gpu_count=4), worker("w_a", gpus=2)) == (
        "has 2 GPUs, needs 4"
    )
    assert unmet(Requirements("worker", gpu_count=2), worker("w_a", gpus=1)) == (
        "has 1 GPU, needs 2"
    )
    assert unmet(Requirements("worker", gpu_count=2), worker("w_a", gpus=8)) is None


def test_a_cpu_job_fits_a_worker_without_gpus() -> None:
    assert unmet(Requirements("worker", gpu_count=0), worker("w_cpu", gpus=0, vram=None)) is None
    assert unmet(Requirements("worker"), worker("w_cpu", gpus=0)) == "has 0 GPUs, needs 1"


def test_min_vram_is_per_gpu_and_inclusive() -> None:
    req = Requirements("worker", min_vram_gb=40)
    assert unmet(req, worker("w_a", gpus=8, vram=24)) == "has 24 GB VRAM per GPU, needs 40 GB"
    assert unmet(req, worker("w_a", vram=40)) is None
    assert unmet(Requirements("worker", min_vram_gb=79.5), worker("w_a", vram=79.4)) == (
        "has 79.4 GB VRAM per GPU, needs 79.5 GB"
    )


def test_min_vram_needs_a_worker_that_reports_it() -> None:
    req = Requirements("worker", min_vram_gb=16)
    assert unmet(req, worker("w_a", vram=None)) == "does not report its VRAM, needs 16 GB"


def test_zero_min_vram_asks_for_nothing() -> None:
    assert unmet(Requirements("worker", min_vram_gb=0), worker("w_a", vram=None)) is None


def test_gpu_name_glob_ignores_case_and_matches_the_whole_name() -> None:
    h100 = worker("w_a", name="NVIDIA H100 80GB HBM3")
    assert unmet(Requirements("worker", gpu_name="*h100*"), h100) is None
    assert unmet(Requirements("worker", gpu_name="NVIDIA H100*"), h100) is None
    assert unmet(Requirements("worker", gpu_name="H100*"), h100) == (
        "has GPU 'NVIDIA H100 80GB HBM3', which does not match 'H100*'"
    )


def test_gpu_name_needs_a_worker_that_reports_it() -> None:
    assert unmet(Requirements("worker", gpu_name="*A100*"), worker("w_a", name=None)) == (
        "does not report a GPU name, needs '*A100*'"
    )


def test_missing_label() -> None:
    req = Requirements("worker", labels={"team": "nlp"})
    assert unmet(req, worker("w_a", labels={"zone": "eu"})) == "has no label team"


def test_label_value_must_match_the_glob() -> None:
    req = Requirements("worker", labels={"gpu_type": "a100*"})
    assert unmet(req, worker("w_a", labels={"gpu_type": "h100"})) == (
        "label gpu_type=h100 does not match a100*"
    )
    assert unmet(req, worker("w_b", labels={"gpu_type": "a100-80g"})) is None
    assert unmet(req, worker("w_c", labels={"gpu_type": "a100"})) is None


def test_label_globs_are_case_sensitive_and_support_classes() -> None:
    req = Requirements("worker", labels={"zone": "us-[ew]*"})
    assert unmet(req, worker("w_a", labels={"zone": "us-west"})) is None
    assert unmet(req, worker("w_b", labels={"zone": "US-west"})) is not None
    assert unmet(req, worker("w_c", labels={"zone": "us-central"})) is not None


def test_a_numeric_label_sent_by_an_agent_is_compared_as_text() -> None:
    agent_labels: dict[str, str] = {"rack": 7}  # type: ignore[dict-item]
    rack = worker("w_a", labels=agent_labels)
    assert unmet(Requirements("worker", labels={"rack": "7"}), rack) is None
    assert unmet(Requirements("worker", labels={"rack": "[0-6]"}), rack) == (
        "label rack=7 does not match [0-6]"
    )
    assert plan([job("j1", Requirements("worker", labels={"rack": "7"}))], [rack]) == [
        ("j1", "w_a")
    ]


def test_every_label_must_match() -> None:
    req = Requirements("worker", labels={"team": "nlp", "zone": "eu*"})
    assert unmet(req, worker("w_a", labels={"team": "nlp", "zone": "eu-1"})) is None
    assert unmet(req, worker("w_a", labels={"team": "nlp", "zone": "us-1"})) == (
        "label zone=us-1 does not match eu*"
    )


# --- plan: the matching pass ------------------------------------------------------------


def test_plan_with_nothing_to_do() -> None:
    assert plan([], [worker("w_a")]) == []
    assert plan([job("j1", REMOTE)], []) == []


def test_higher_priority_goes_first_then_submission_order() -> None:
    pending = [
        job("j_old_low", REMOTE, priority=0, seq=1),
        job("j_new_high", REMOTE, priority=5, seq=3),
        job("j_old_high", REMOTE, priority=5, seq=2),
    ]
    assert plan(pending, [worker("w_a"), worker("w_b")]) == [
        ("j_old_high", "w_a"),
        ("j_new_high", "w_b"),
    ]


def test_a_job_nothing_fits_does_not_block_the_ones_behind_it() -> None:
    pending = [
        job("j_big", Requirements("worker", gpu_count=8), priority=9, seq=1),
        job("j_small", REMOTE, seq=2),
    ]
    assert plan(pending, [worker("w_a", gpus=2)]) == [("j_small", "w_a")]


def test_best_fit_takes_the_fewest_gpus_that_suffice() -> None:
    idle = [worker("w_8", gpus=8), worker("w_2", gpus=2), worker("w_4", gpus=4)]
    assert plan([job("j1", Requirements("worker", gpu_count=2))], idle) == [("j1", "w_2")]
    assert plan([job("j1", Requirements("worker", gpu_count=3))], idle) == [("j1", "w_4")]


def test_best_fit_keeps_the_big_machine_for_the_big_job() -> None:
    # First come takes the small one, so the 8-GPU job behind it still runs.
    idle = [worker("w_big", gpus=8), worker("w_small", gpus=1)]
    pending = [
        job("j_small", REMOTE, seq=1),
        job("j_big", Requirements("worker", gpu_count=8), seq=2),
    ]
    assert plan(pending, idle) == [("j_small", "w_small"), ("j_big", "w_big")]


def test_equal_gpu_counts_prefer_less_vram_then_worker_id() -> None:
    idle = [worker("w_a", vram=80), worker("w_c", vram=24), worker("w_b", vram=24)]
    pending = [job(f"j{i}", REMOTE, seq=i) for i in range(3)]
    assert plan(pending, idle) == [("j0", "w_b"), ("j1", "w_c"), ("j2", "w_a")]


def test_unknown_vram_counts_as_least_so_known_vram_stays_free() -> None:
    idle = [worker("w_a", vram=24), worker("w_b", vram=None)]
    assert plan([job("j1", REMOTE)], idle) == [("j1", "w_b")]


def test_min_vram_equal_to_the_worker_vram_is_placed() -> None:
    idle = [worker("w_a", vram=24), worker("w_b", vram=40)]
    pending = [job("j1", Requirements("worker", min_vram_gb=40))]
    assert plan(pending, idle) == [("j1", "w_b")]


def test_auto_prefers_a_remote_worker_even_when_the_local_runner_fits_better() -> None:
    idle = [worker("local", gpus=1, local=True), worker("w_a", gpus=4)]
    assert plan([job("j1", Requirements("auto"))], idle) == [("j1", "w_a")]


def test_auto_falls_back_to_the_local_runner() -> None:
    idle = [worker("local", gpus=1, local=True), worker("w_a", gpus=4)]
    pending = [job("j1", Requirements("auto"), seq=1), job("j2", Requirements("auto"), seq=2)]
    assert plan(pending, idle) == [("j1", "w_a"), ("j2", "local")]


def test_target_local_and_worker_stay_on_their_side() -> None:
    idle = [worker("local", local=True), worker("w_a")]
    pending = [
        job("j_local", Requirements("local"), seq=1),
        job("j_local_2", Requirements("local"), seq=2),
        job("j_remote", REMOTE, seq=3),
    ]
    assert plan(pending, idle) == [("j_local", "local"), ("j_remote", "w_a")]


def test_jobs_with_the_same_requirements_fill_identical_workers_in_id_order() -> None:
    idle = [worker(f"w_{i:02}") for i in reversed(range(10))]
    pending = [job(f"j{i}", REMOTE, seq=i) for i in range(12)]
    assert plan(pending, idle) == [(f"j{i}", f"w_{i:02}") for i in range(10)]


def test_exact_label_absent_from_the_fleet_places_nothing_and_globs_still_match() -> None:
    idle = [worker("w_a", labels={"team": "nlp-2"})]
    assert plan([job("j1", Requirements("worker", labels={"team": "nlp"}))], idle) == []
    assert plan([job("j1", Requirements("worker", labels={"team": "nlp*"}))], idle) == [
        ("j1", "w_a")
    ]


def test_gpu_name_and_vram_requirements_are_honoured() -> None:
    idle = [
        worker("w_a10", vram=24, name="NVIDIA A10"),
        worker("w_h100", vram=80, name="NVIDIA H100 80GB HBM3"),
    ]
    pending = [
        job("j_h100", Requirements("worker", gpu_name="*h100*"), seq=1),
        job("j_big", Requirements("worker", min_vram_gb=48), seq=2),
        job("j_any", REMOTE, seq=3),
    ]
    assert plan(pending, idle) == [("j_h100", "w_h100"), ("j_any", "w_a10")]


def test_a_worker_listed_twice_is_used_once_and_a_job_listed_twice_placed_once() -> None:
    idle = [worker("w_a"), worker("w_a")]
    pending = [job("j1", REMOTE, seq=1), job("j1", REMOTE, seq=1)]
    assert plan(pending, idle) == [("j1", "w_a")]


# --- wait_reason ------------------------------------------------------------------------


def test_reason_no_worker_connected() -> None:
    assert wait_reason(REMOTE, [], set()) == (
        "no worker is connected (start one with `tunefleet worker`)"
    )
    assert wait_reason(Requirements("auto"), [], set()).startswith("no worker is connected")


def test_reason_only_the_local_runner_for_a_remote_job() -> None:
    assert wait_reason(REMOTE, [LOCAL_RUNNER], {"local"}) == (
        "no remote worker is connected; target worker never uses the orchestrator's "
        "local runner (use target auto to allow it)"
    )


def test_reason_no_local_runner() -> None:
    assert wait_reason(Requirements("local"), [worker("w_a")], {"w_a"}) == (
        "target local but the orchestrator has no local runner "
        "(start the server with --local-runner, or submit with target worker or auto)"
    )


def test_reason_not_enough_gpus_anywhere() -> None:
    fleet = [worker("w_a", gpus=2), worker("w_b", gpus=1)]
    assert wait_reason(Requirements("worker", gpu_count=4), fleet, set()) == (
        "needs 4 GPUs; the largest remote worker has 2"
    )
    assert wait_reason(Requirements("auto", gpu_count=4), fleet, set()) == (
        "needs 4 GPUs; the largest worker has 2"
    )
    assert wait_reason(Requirements("auto", gpu_count=4), fleet[:1], set()) == (
        "needs 4 GPUs; the only worker has 2"
    )
    assert wait_reason(Requirements("local"), [worker("local", 0, local=True)], set()) == (
        "needs 1 GPU; the local runner has 0"
    )


def test_reason_labels_nobody_has_names_the_closest_worker() -> None:
    fleet = [
        worker("w_a", labels={"gpu_type": "h100"}),
        worker("w_b", labels={"gpu_type": "a10"}),
        worker("w_c", labels={"zone": "eu"}),
    ]
    assert wait_reason(Requirements("worker", {"gpu_type": "a100*"}), fleet, set()) == (
        "no worker matches label gpu_type=a100* (closest: w_b has gpu_type=a10)"
    )
    assert wait_reason(Requirements("worker", {"team": "nlp"}), fleet, set()) == (
        "no worker matches label team=nlp (closest: w_a has no label team)"
    )


def test_reason_labels_that_only_fail_together() -> None:
    fleet = [
        worker("w_a", labels={"team": "nlp", "zone": "us"}),
        worker("w_b", labels={"team": "cv", "zone": "eu"}),
    ]
    req = Requirements("worker", {"team": "nlp", "zone": "eu"})
    assert wait_reason(req, fleet, set()) == (
        "no worker matches labels team=nlp, zone=eu together (closest: w_a has zone=us)"
    )


def test_reason_not_enough_vram() -> None:
    fleet = [worker("w_a", vram=40), worker("w_b", vram=24)]
    assert wait_reason(Requirements("worker", min_vram_gb=80), fleet, set()) == (
        "min VRAM 80 GB; the largest remote worker has 40 GB"
    )
    unknown = [worker("w_a", vram=None)]
    assert wait_reason(Requirements("worker", min_vram_gb=80), unknown, set()) == (
        "min VRAM 80 GB; no worker reports its VRAM"
    )


def test_reason_no_such_gpu_name_suggests_a_wider_glob() -> None:
    fleet = [worker("w_a", name="NVIDIA H100 80GB HBM3"), worker("w_b", name="NVIDIA A10")]
    assert wait_reason(Requirements("worker", gpu_name="H100*"), fleet, set()) == (
        "no GPU named 'H100*' (workers have: NVIDIA A10, NVIDIA H100 80GB HBM3); "
        "the name must match whole, try '*H100*'"
    )
    assert wait_reason(Requirements("worker", gpu_name="*B200*"), fleet, set()) == (
        "no GPU named '*B200*' (workers have: NVIDIA A10, NVIDIA H100 80GB HBM3)"
    )
    nameless = [worker("w_a", name=None)]
    assert wait_reason(Requirements("worker", gpu_name="*B200*"), nameless, set()) == (
        "no GPU named '*B200*' (no worker reports a GPU name)"
    )


def test_reason_lists_every_fleet_wide_problem() -> None:
    fleet = [worker("w_a", gpus=2, vram=40)]
    req = Requirements("worker", gpu_count=4, min_vram_gb=80)
    assert wait_reason(req, fleet, set()) == (
        "needs 4 GPUs; the only remote worker has 2; "
        "min VRAM 80 GB; the only remote worker has 40 GB"
    )


def test_reason_no_single_worker_meets_everything() -> None:
    fleet = [worker("w_a", gpus=4, vram=24), worker("w_b", gpus=1, vram=80)]
    req = Requirements("worker", gpu_count=4, min_vram_gb=80)
    assert wait_reason(req, fleet, set()) == (
        "no single worker meets every requirement "
        "(closest is w_a: has 24 GB VRAM per GPU, needs 80 GB)"
    )


def test_reason_names_a_quarantined_worker_and_why() -> None:
    sick = replace(worker("w_sick"), quarantine_reason="GPU health: Xid 79 on GPU 1")
    assert wait_reason(REMOTE, [sick], set()) == "w_sick quarantined: GPU health: Xid 79 on GPU 1"
    assert wait_reason(REMOTE, [sick, worker("w_1")], set()) == (
        "qualifying workers busy or draining: w_1; w_sick quarantined: GPU health: Xid 79 on GPU 1"
    )
    # One that does not fit the job anyway is not named.
    big = Requirements("worker", gpu_count=2)
    assert wait_reason(big, [sick, worker("w_2", gpus=2)], set()) == (
        "every qualifying worker is busy or draining: w_2"
    )
    many = [
        replace(worker(f"w_{i}"), quarantine_reason="3 infrastructure failures in 1 min")
        for i in range(7)
    ]
    assert wait_reason(REMOTE, many, set()).endswith("; 2 more quarantined")


def test_reason_qualifying_workers_are_busy() -> None:
    fleet = [worker(f"w_{i}") for i in range(7)] + [worker("w_small", gpus=0)]
    assert wait_reason(REMOTE, fleet, {"w_small"}) == (
        "every qualifying worker is busy or draining: w_0, w_1, w_2, w_3, w_4 and 2 more"
    )
    assert wait_reason(REMOTE, fleet[:2], set()) == (
        "every qualifying worker is busy or draining: w_0, w_1"
    )


def test_reason_when_a_qualifying_worker_is_idle() -> None:
    fleet = [worker("w_a"), worker("w_b")]
    assert wait_reason(REMOTE, fleet, {"w_b"}) == (
        "qualifying worker w_b is idle; dispatch is imminent"
    )


# --- num_processes from the training config ----------------------------------------------


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({}, None),
        ({"--learning_rate": 1e-4}, None),
        ({"--num_processes": None}, None),
        ({"num_processes": ""}, None),
        ({"--num_processes": 2}, 2),
        ({"num_processes": 4}, 4),
        ({"--num_processes": "8"}, 8),
        ({"--num_processes": " 2 "}, 2),
        ({"--num_processes": 2.0}, 2),
        ({"--num_processes": "2", "num_processes": 2}, 2),
    ],
)
def test_num_processes_gives_the_gpu_count(config: dict[str, object], expected: int | None) -> None:
    assert job_gpu_count_from_config(config) == expected


@pytest.mark.parametrize("bad", ["two", "2.5", "-1", 0, -3, 2.5, True, "²", [2], float("nan")])
def test_num_processes_that_is_not_a_positive_whole_number_is_refused(bad: object) -> None:
    with pytest.raises(InvalidRequirements) as caught:
        job_gpu_count_from_config({"--num_processes": bad})
    assert str(caught.value) == (
        f"--num_processes must be a whole number of at least 1; got {bad!r}"
    )


def test_num_processes_spelled_twice_with_different_values_is_refused() -> None:
    with pytest.raises(InvalidRequirements, match=r"config sets --num_processes=2 and "):
        job_gpu_count_from_config({"--num_processes": 2, "num_processes": "4"})


def test_a_worker_that_would_refuse_the_command_does_not_qualify_and_says_why() -> None:
    picky = WorkerView("w_picky", allowed_commands=("python -m simpletuner.train",))
    open_minded = WorkerView("w_any")  # did not say: SimpleTuner's agent, say
    shell = Requirements("worker", gpu_count=0, command=("sh", "-c", "id"))
    assert unmet(shell, picky) == (
        "would refuse the job: command 'sh -c id' is not among the allowed commands "
        "('python -m simpletuner.train')"
    )
    assert unmet(shell, open_minded) is None
    assert plan([job("j1", shell)], [picky, open_minded]) == [("j1", "w_any")]
    assert plan([job("j1", shell)], [picky]) == []
    assert "would refuse the job" in wait_reason(shell, [picky], {"w_picky"})
    # The worker's default command is its own to allow; loader env is refused all the same.
    default = Requirements("worker", gpu_count=0)
    assert unmet(default, picky) is None
    loader = Requirements("worker", gpu_count=0, loader_env=("LD_PRELOAD",))
    assert (unmet(loader, picky) or "").startswith("would refuse the job: env LD_PRELOAD")
