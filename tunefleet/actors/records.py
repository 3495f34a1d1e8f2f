"""In-memory copies of the worker and job rows that actors keep, and their API views."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from tunefleet.actors.matching import Requirements, WorkerView
from tunefleet.actors.retry_policy import PastFailure
from tunefleet.commands import loader_env_names
from tunefleet.fsm.worker import WorkerState
from tunefleet.gpu_health import Health, HealthSample, assess

if TYPE_CHECKING:
    from tunefleet.actors import messages as m


def iso(ts: float | None) -> str | None:
    """Unix seconds → ISO 8601 UTC with a Z, as the seed's examples show."""
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(slots=True)
class WorkerRecord:
    worker_id: str
    name: str
    worker_type: str
    state: str
    drain_requested: bool = False
    is_local: bool = False
    labels: dict[str, str] = field(default_factory=dict)
    agent_labels: dict[str, str] = field(default_factory=dict)
    gpu_info: dict[str, Any] = field(default_factory=dict)
    gpu_count: int = 0
    gpu_name: str | None = None
    gpu_vram_gb: float | None = None
    accelerator_type: str | None = None
    provider: str | None = None
    current_job_id: str | None = None
    persistent_agent: bool | None = None
    hostname: str | None = None
    client_address: str | None = None
    last_event_id: int = 0
    gpu_utilization: list[float] = field(default_factory=list)
    vram_used_gb: list[float] = field(default_factory=list)
    last_heartbeat_at: float | None = None
    connected_at: float | None = None
    last_seen_at: float | None = None
    offline_at: float | None = None
    created_at: float = 0.0
    job_progress: dict[str, Any] | None = None
    # From the agent's last registration (not stored: it says again when it reconnects).
    allowed_commands: tuple[str, ...] | None = None
    agent_name: str | None = None
    # Why it is quarantined (None: it is not) and since when (actors/worker_quarantine.py).
    quarantine_reason: str | None = None
    quarantined_at: float | None = None
    # GPU health from the agent's heartbeats (worker_health.py); not stored. An unhealthy
    # reading quarantines the worker; the quarantine is what is stored.
    health: Health | None = None
    gpu_health: HealthSample | None = None
    # The last reading judged and its verdict: a heartbeat is judged once, not twice.
    _judged: tuple[HealthSample, Health] | None = None

    def effective_labels(self) -> dict[str, str]:
        # What an admin assigned wins over what the agent claims about itself.
        return {**self.agent_labels, **self.labels}

    def view(self, *, connected: bool = True, draining: bool = False) -> WorkerView:
        return WorkerView(
            worker_id=self.worker_id,
            is_local=self.is_local,
            labels=self.effective_labels(),
            gpu_count=self.gpu_count,
            gpu_vram_gb=self.gpu_vram_gb,
            gpu_name=self.gpu_name,
            connected=connected,
            allowed_commands=self.allowed_commands,
            hardware_known=self.connected_at is not None,  # set by the first registration
            quarantine_reason=self.quarantine_reason,
            draining=draining,
        )

    def apply_registration(self, msg: m.Register, now: float) -> None:
        self.allowed_commands = msg.allowed_commands
        gpu = msg.gpu
        self.gpu_info = dict(gpu)
        self.gpu_count = int(gpu.get("count") or 0)
        self.gpu_name = gpu.get("name")
        self.gpu_vram_gb = gpu.get("vram_gb")
        self.accelerator_type = gpu.get("accelerator")
        self.agent_labels = dict(msg.agent_labels)
        self.persistent_agent = msg.persistent
        self.agent_name = msg.name
        self.provider = msg.provider
        self.hostname = msg.hostname
        self.client_address = msg.client_address
        self.connected_at = now
        self.last_heartbeat_at = now
        self.last_seen_at = now
        self.offline_at = None

    def registration_fields(self) -> dict[str, Any]:
        return {
            "gpu_info": self.gpu_info,
            "gpu_count": self.gpu_count,
            "gpu_name": self.gpu_name,
            "gpu_vram_gb": self.gpu_vram_gb,
            "accelerator_type": self.accelerator_type,
            "agent_labels": self.agent_labels,
            "persistent_agent": self.persistent_agent,
            "agent_name": self.agent_name,
            "provider": self.provider,
            "hostname": self.hostname,
            "client_address": self.client_address,
            "offline_at": None,
        }

    def apply_heartbeat(self, msg: m.HeartbeatReceived, now: float) -> None:
        self.last_heartbeat_at = now
        self.last_seen_at = now
        if msg.gpu_utilization is not None:
            self.gpu_utilization = list(msg.gpu_utilization)
        if msg.vram_used_gb is not None:
            self.vram_used_gb = list(msg.vram_used_gb)
        if msg.gpu_health is not None:
            self.gpu_health = msg.gpu_health
            self.health = self.judge(msg.gpu_health)
        self.job_progress = msg.job_progress

    def judge(self, sample: HealthSample | None) -> Health | None:
        """The health a heartbeat's reading makes this worker's (unchanged without one)."""
        if sample is None:
            return self.health
        if self._judged is None or self._judged[0] is not sample:
            self._judged = (sample, assess(sample))
        return self._judged[1]

    def public(
        self,
        *,
        state: str,
        drain_requested: bool,
        current_job_id: str | None,
        connected: bool,
        now: float,
    ) -> dict[str, Any]:
        online = (
            state not in (WorkerState.OFFLINE, WorkerState.CONNECTING)
            and self.connected_at is not None
        )
        return {
            "id": self.worker_id,
            "worker_id": self.worker_id,
            "name": self.name,
            "status": state,
            "worker_type": self.worker_type,
            "is_local": self.is_local,
            "drain_requested": drain_requested,
            "gpu_count": self.gpu_count,
            "gpu_name": self.gpu_name,
            "gpu_vram_gb": self.gpu_vram_gb,
            "accelerator_type": self.accelerator_type,
            "gpu_info": self.gpu_info,
            "gpu_utilization": self.gpu_utilization,
            "vram_used_gb": self.vram_used_gb,
            "labels": self.effective_labels(),
            "admin_labels": self.labels,
            "agent_labels": self.agent_labels,
            "provider": self.provider,
            "hostname": self.hostname,
            "client_address": self.client_address,
            "allowed_commands": (
                list(self.allowed_commands) if self.allowed_commands is not None else None
            ),
            "current_job_id": current_job_id,
            "job_progress": self.job_progress if current_job_id else None,
            "last_heartbeat": iso(self.last_heartbeat_at),
            "last_seen": iso(self.last_seen_at),
            "connected_at": iso(self.connected_at),
            "offline_at": iso(self.offline_at),
            "created_at": iso(self.created_at),
            "connected": connected,
            "uptime_seconds": (
                round(now - self.connected_at, 1) if online and self.connected_at else 0.0
            ),
            "agent_name": self.agent_name,
            "warnings": self.agent_warnings(),
            "quarantined": self.quarantine_reason is not None,
            "quarantine_reason": self.quarantine_reason,
            "quarantined_at": iso(self.quarantined_at),
            "health": self.health.level.value if self.health is not None else None,
            "health_reason": self.health.reason if self.health is not None else None,
            "health_problems": list(self.health.problems) if self.health is not None else [],
            "gpu_health": asdict(self.gpu_health) if self.gpu_health is not None else None,
        }

    def agent_warnings(self) -> list[str]:
        """Where the agent's own settings disagree with the administrator's. The
        administrator's worker_type and name are the ones in force: tunefleet's agent
        follows them; another agent (SimpleTuner's) runs as it was started."""
        warnings: list[str] = []
        typed_persistent = self.worker_type == "persistent"
        if self.persistent_agent is not None and self.persistent_agent != typed_persistent:
            started = "persistent" if self.persistent_agent else "ephemeral"
            fix = "with --persistent" if typed_persistent else "without --persistent"
            other = "exits after one job" if typed_persistent else "stays after its job"
            warnings.append(
                f"worker_type is {self.worker_type} but its agent was started {started} "
                "(--persistent / SIMPLETUNER_WORKER_PERSISTENT): tunefleet's agent follows "
                f"worker_type, another agent {other}. Start the agent {fix}."
            )
        if self.agent_name and self.agent_name != self.name:
            warnings.append(
                f"the agent calls itself {self.agent_name!r} (--name / "
                f"SIMPLETUNER_WORKER_NAME); this worker's name is {self.name!r}"
            )
        return warnings


@dataclass(slots=True)
class JobRecord:
    job_id: str
    seq: int
    state: str
    target: str
    config: dict[str, Any]
    config_name: str | None = None
    name: str | None = None
    dataloader: Any = None
    command: list[str] | None = None
    env: dict[str, str] = field(default_factory=dict)
    worker_labels: dict[str, str] = field(default_factory=dict)
    gpu_count: int = 0
    min_vram_gb: float | None = None
    gpu_name: str | None = None
    priority: int = 0
    max_retries: int = 3
    attempts: int = 0
    undelivered: int = 0  # attempts that never reached their worker (loaded from the timeline)
    # Its ended attempts' workers, kinds and signatures, and how many were infrastructure
    # failures (loaded from its attempts): the retry policy's history.
    failures: list[PastFailure] = field(default_factory=list)
    infra_failures: int = 0
    preempted: int = 0  # attempts that ended preempted (loaded from the timeline)
    timeout_minutes: float | None = None
    worker_id: str | None = None
    submitted_by: str | None = None
    submitted_at: float = 0.0
    dispatched_at: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    progress: dict[str, Any] | None = None
    error: str | None = None
    wait_reason: str | None = None
    # Whose job it is (issue 24): recorded at submit, never changed.
    user_name: str | None = None
    team_name: str | None = None
    # A stop (cancel or run timeout) asked of the agent for the current attempt and not
    # confirmed yet; loaded from the timeline so that it outlives a restart.
    stop_reason: str | None = None
    stop_is_timeout: bool = False
    # A preemption asked of the agent for the current attempt and not confirmed yet, and
    # whether the job waits at the head of its priority band (its last attempt was
    # preempted); both loaded from the timeline.
    preempt_reason: str | None = None
    preempted_last: bool = False
    # Decided at submit: its submitter controls the orchestrator, so a local run may be as
    # the orchestrator's own user (tunefleet/actors/local_isolation.py).
    local_unisolated: bool = False

    def requirements(self) -> Requirements:
        return Requirements(
            target=self.target,
            labels=self.worker_labels,
            gpu_count=self.gpu_count,
            min_vram_gb=self.min_vram_gb,
            gpu_name=self.gpu_name,
            command=tuple(self.command) if self.command else None,
            loader_env=tuple(loader_env_names(self.env)),
        )
