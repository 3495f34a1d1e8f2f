"""What a JobActor does with an attempt's end besides its lifecycle, kept out of
job_actor.py: the end's kind (fsm/failure_kinds.py), the poison verdict
(retry_policy.py), the job's failure history, and the word to the worker it ran on,
whose quarantine policy counts it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tunefleet.actors import messages as m
from tunefleet.actors.retry_policy import PastFailure, poison_verdict
from tunefleet.fsm.failure_kinds import Classified, Evidence, FailureKind, classify_failure

if TYPE_CHECKING:
    from tunefleet.actors.job_actor import JobActor


def classify_report(
    job: JobActor, error: str, failure: dict[str, Any] | None
) -> tuple[Classified, str | None]:
    """A failed report's kind and signature, and the job's error when it must fail now:
    poison (the same job error on another worker before), or a job no retry can help
    (refused by the worker, its command not started). None: it may be retried."""
    ended = classify_failure(error, Evidence.from_report(failure))
    verdict = poison_verdict(job.failures, PastFailure(job.worker_id, ended.kind, ended.signature))
    return ended, verdict if verdict is not None or ended.retry else error


def out_of_budget_error(job: JobActor, reason: str, ended: Classified) -> str:
    """The error of a job whose lost, undelivered or failed attempt was its last: which
    budget ran out, and what to do."""
    if ended.kind == FailureKind.UNDELIVERED and not job.deliveries_left():
        return (
            f"dispatched {job.undelivered} times and never acknowledged (last: {reason}); "
            "check the agents of the workers it was sent to (its attempt history): "
            "that they run, stay connected, and what their logs say about the job"
        )
    if not job.infra_retries_left():
        return (
            f"{reason}; no retries left for infrastructure failures "
            f"(infra_retries={job.infra_retries})"
        )
    if ended.kind == FailureKind.JOB_ERROR and job.max_retries == 0:
        return reason  # the trainer's own words, as a job never retried always had
    return f"{reason}; no retries left (max_retries={job.max_retries})"


def note_end(
    job: JobActor,
    worker_id: str | None,
    kind: FailureKind | None,
    signature: str | None,
    now: float,
) -> None:
    """Remember the end (``kind`` None: it completed) in the job's history, count it and
    tell its worker; on completion, tell the workers where this job failed with a job
    error that the fault was theirs after all."""
    if kind is not None:
        job.failures.append(PastFailure(worker_id, kind, signature))
        job.ctx.metrics.attempt_failures.labels(kind=str(kind)).inc()
    if worker_id is None:
        return
    if (worker := job.ctx.workers.get(worker_id)) is not None:
        worker.tell(m.AttemptEnded(job.job_id, kind, signature, now))
    if kind is None:
        for past in job.failures:
            if past.kind != FailureKind.JOB_ERROR or past.worker_id in (None, worker_id):
                continue
            if (failed_on := job.ctx.workers.get(str(past.worker_id))) is not None:
                failed_on.tell(m.SucceededElsewhere(job.job_id))
