"""WaitReasons keeps, per requirements, what a wait reason needs of the fleet: its
answers are wait_reason's for every idle set, until a worker's view changes."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.actors.test_matching_properties import fleets, requirements
from tunefleet.actors.matching import Requirements, WorkerView
from tunefleet.actors.wait_reasons import WaitReasons, wait_reason


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleet=fleets(), reqs=st.lists(requirements(), min_size=1, max_size=3), data=st.data())
def test_a_kept_reason_is_the_reason_for_any_idle_set(
    fleet: list[WorkerView], reqs: list[Requirements], data: st.DataObject
) -> None:
    reasons = WaitReasons()
    ids = sorted({w.worker_id for w in fleet})
    walks: list[int] = []

    def views() -> list[WorkerView]:
        walks.append(1)
        return fleet

    for _ in range(3):
        idle = set(data.draw(st.lists(st.sampled_from(ids), unique=True) if ids else st.just([])))
        for req in reqs:
            assert reasons.reason(req, views, idle) == wait_reason(req, fleet, idle)
    assert len(walks) <= len(reqs)  # the fleet is walked once per requirements shape


def test_forget_walks_the_fleet_again() -> None:
    req = Requirements("worker", gpu_count=2)
    small = [WorkerView("w_1", gpu_count=1)]
    reasons = WaitReasons()
    assert "needs 2" in reasons.reason(req, lambda: small, set())
    big = [WorkerView("w_1", gpu_count=2)]
    assert "needs 2" in reasons.reason(req, lambda: big, set())  # kept: not told yet
    reasons.forget()
    assert reasons.reason(req, lambda: big, {"w_1"}) == wait_reason(req, big, {"w_1"})
    assert "imminent" in reasons.reason(req, lambda: big, {"w_1"})


def test_the_reason_quotes_the_gpu_name_as_each_job_wrote_it() -> None:
    fleet = [WorkerView("w_1", gpu_count=1, gpu_name="NVIDIA A100")]
    reasons = WaitReasons()
    for pattern in ("H100", "h100"):
        req = Requirements("worker", gpu_name=pattern)
        assert reasons.reason(req, lambda: fleet, set()) == wait_reason(req, fleet, set())
        assert repr(pattern) in reasons.reason(req, lambda: fleet, set())
