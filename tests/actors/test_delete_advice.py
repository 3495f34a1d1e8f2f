"""The advice a refused worker delete gives: it must be advice that works. Draining takes
only an ephemeral worker offline (its agent exits); a persistent one stays draining."""

from __future__ import annotations

import pytest

from tunefleet.actors.delete_advice import API_FORCE, CLI_FORCE, refused_delete_advice

CLI = "tunefleet workers delete w_1 --force"


@pytest.mark.parametrize("status", ["idle", "draining"])
def test_an_idle_persistent_worker_is_told_to_force_not_to_wait(status: str) -> None:
    advice = refused_delete_advice("w_1", status, "persistent", None, CLI_FORCE)
    assert advice.startswith(f"worker w_1 is {status} and runs no job")
    assert f"delete it with {CLI}" in advice and "no job is lost" in advice
    assert "wait" not in advice and "drain it" not in advice


def test_an_idle_ephemeral_worker_may_be_drained_or_forced() -> None:
    advice = refused_delete_advice("w_1", "idle", "ephemeral", None, CLI_FORCE)
    assert f"delete it with {CLI} (no job is lost)" in advice
    assert "drain it: its ephemeral agent then exits and the worker goes offline" in advice


def test_a_drained_ephemeral_worker_goes_offline_by_itself() -> None:
    advice = refused_delete_advice("w_1", "draining", "ephemeral", None, CLI_FORCE)
    assert "goes offline when it disconnects" in advice and CLI in advice


def test_a_busy_persistent_worker_finishes_its_job_then_is_forced() -> None:
    advice = refused_delete_advice("w_1", "busy", "persistent", "j_9", CLI_FORCE)
    assert advice.startswith("worker w_1 is busy with job j_9: drain it to let the job finish")
    assert f"then delete it with {CLI}" in advice
    assert f"or use {CLI} now and the job goes back to the queue" in advice


def test_a_draining_worker_with_a_job_is_not_told_to_drain_again() -> None:
    persistent = refused_delete_advice("w_1", "draining", "persistent", "j_9", CLI_FORCE)
    ephemeral = refused_delete_advice("w_1", "draining", "ephemeral", "j_9", CLI_FORCE)
    for advice in (persistent, ephemeral):
        assert "j_9: the job finishes first" in advice and "drain it" not in advice
    assert "goes offline; delete it then" in ephemeral


def test_the_api_names_its_own_force() -> None:
    advice = refused_delete_advice("w_1", "idle", "persistent", None, API_FORCE)
    assert "delete it with ?force=true" in advice and "--force" not in advice


def test_the_longest_api_advice_fits_the_detail_limit() -> None:
    # The API cuts a detail at MAX_DETAIL_CHARS: the advice must survive whole.
    from tunefleet.http.errors import MAX_DETAIL_CHARS

    for status in ("idle", "busy", "draining"):
        for kind in ("persistent", "ephemeral"):
            for job in (None, "j_ae5ca632d41f77a9"):
                advice = refused_delete_advice("w_691a1ac0c896", status, kind, job, API_FORCE)
                assert len(advice) <= MAX_DETAIL_CHARS
