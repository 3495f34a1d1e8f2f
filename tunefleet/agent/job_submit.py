"""What a ``job_submit`` asks a worker to run, read the same way by every worker.

tunefleet's agent and the orchestrator's local runner both turn the event into the
executor's JobSpec here, so a job runs with the same command, environment and
artifact plan wherever it lands.
"""

from __future__ import annotations

from tunefleet.agent.job_artifacts import artifact_plan, upload_env
from tunefleet.agent.job_events import JobSpec
from tunefleet.protocol.events import JobSubmitEvent


def job_spec(event: JobSubmitEvent, base_url: str) -> JobSpec:
    """The JobSpec a job_submit describes. Upload and Hugging Face credentials reach the
    trainer as SimpleTuner's agent passes them (SIMPLETUNER_UPLOAD_*, HF_TOKEN) and as
    TUNEFLEET_UPLOAD_*; with an upload endpoint and token the worker stores the job's
    outputs itself (``artifacts``). ``base_url`` is the orchestrator's URL, put in front
    of an ``upload_endpoint`` that is a path."""
    env: dict[str, object] = dict(event.env)
    plan = artifact_plan(event, base_url)
    env.update(upload_env(plan))
    if event.hf_token:
        env["HF_TOKEN"] = event.hf_token
    return JobSpec(
        job_id=event.job_id,
        attempt=event.attempt,
        config=event.config,
        dataloader=event.dataloader,
        command=event.command,
        env=env,
        artifacts=plan,
    )
