"""One human sentence per event, for chat (``format: slack``): Slack's incoming-webhook
body, ``{"text": ..., "blocks": [...]}``, which Mattermost and others also accept."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_VERBS = {
    "job.submitted": "was submitted",
    "job.started": "started",
    "job.completed": "completed",
    "job.failed": "failed",
    "job.cancelled": "was cancelled",
    "job.retried": "is being retried",
    "job.preempted": "was preempted",
    "approval.required": "needs approval",
    "approval.granted": "was approved",
    "approval.rejected": "was rejected",
}
# Metrics named first when a job reports them; others follow by name, up to three in all.
_FIRST_METRICS = ("loss", "train_loss", "val_loss", "accuracy")


def duration(seconds: float) -> str:
    """``2 h 14 min``, ``5 min``, ``40 s``."""
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes} min"
    if minutes:
        return f"{minutes} min"
    return f"{secs} s"


def _metrics(values: Mapping[str, Any]) -> list[str]:
    names = [n for n in _FIRST_METRICS if n in values]
    names += sorted(n for n in values if n not in names and n != "step")
    return [
        f"{name} {values[name]:.4g}" for name in names[:3] if isinstance(values[name], int | float)
    ]


def sentence(kind: str, data: Mapping[str, Any]) -> str:
    """``j_12 tiny-example completed on gpu-worker-1 in 2 h 14 min, loss 0.031, 3
    checkpoints``."""
    if kind.startswith(("job.", "approval.")):
        who = " ".join(str(p) for p in (data.get("job_id"), data.get("name")) if p)
        text = f"{who} {_VERBS.get(kind, kind)}"
        worker = data.get("worker_name") or data.get("worker_id")
        if worker and kind in ("job.started", "job.completed", "job.failed", "job.preempted"):
            text += f" on {worker}"
        if data.get("duration_s") is not None:
            text += f" in {duration(float(data['duration_s']))}"
        parts = [text]
        parts += _metrics(data.get("final_metrics") or {})
        if data.get("checkpoints"):
            count = int(data["checkpoints"])
            parts.append(f"{count} checkpoint{'s' if count != 1 else ''}")
        reason = data.get("error") or (data.get("detail") or {}).get("reason")
        if reason and kind != "job.completed":
            parts.append(str(reason))
        return ", ".join(parts)
    if kind.startswith("worker."):
        state = kind.split(".", 1)[1]
        text = f"worker {data.get('name') or data.get('worker_id')} is {state}"
        return f"{text}: {data['reason']}" if data.get("reason") else text
    if kind.startswith("budget."):
        message = data.get("message") or (data.get("detail") or {}).get("message")
        who = f"{data['job_id']} " if data.get("job_id") else ""
        return f"{who}{message or kind}"
    if kind == "orchestrator.takeover":
        return (
            f"orchestrator {data.get('url')} took over as the active one (term {data.get('term')})"
        )
    return str(data.get("message") or kind)


def slack_body(kind: str, data: Mapping[str, Any]) -> dict[str, Any]:
    text = sentence(kind, data)
    blocks: list[dict[str, Any]] = [{"type": "section", "text": {"type": "mrkdwn", "text": text}}]
    link = (data.get("links") or {}).get("job")
    if link:
        blocks.append(
            {"type": "context", "elements": [{"type": "mrkdwn", "text": f"<{link}|Open the job>"}]}
        )
    return {"text": text, "blocks": blocks}
