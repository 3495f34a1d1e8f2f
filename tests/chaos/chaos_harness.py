"""A fleet to break: a real orchestrator (tests/e2e/harness.Orchestrator), restartable
agents on loopback or each in its own network namespace, jobs of the example trainer
(through tests/chaos/chaos_trainer.py), and the loop that injects faults while jobs
are submitted, then heals everything and lets the fleet settle.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from tests.chaos import chaos_procs as procs
from tests.chaos.chaos_agent import ChaosAgent
from tests.chaos.chaos_evidence import (
    load_executions,
    load_jobs,
    load_ledger,
    unfinished_trainers,
)
from tests.chaos.chaos_faults import AGENT_FAULTS, FaultInjector, FaultKind, FaultPlan
from tests.chaos.chaos_ha import OrchestratorGroup
from tests.chaos.chaos_invariants import Evidence, Findings
from tests.chaos.chaos_netns import NetnsLink
from tests.e2e.harness import ApiError, Orchestrator, wait_until

CHAOS_TRAINER = Path(__file__).with_name("chaos_trainer.py")


@dataclass(frozen=True)
class ChaosPlan:
    seconds: float  # how long faults are injected
    initial_jobs: int
    submit_gap_s: tuple[float, float]
    max_jobs: int
    fault_gap_s: tuple[float, float]
    kinds: Sequence[FaultKind]
    settle_timeout_s: float
    steps: tuple[int, int] = (30, 90)  # the example trainer's max_train_steps, drawn
    step_seconds: float = 0.03
    retries: Sequence[int] = (0, 1, 3, 6, 6, 10)  # max_retries, drawn per job
    max_live: int | None = None  # no new job while this many wait or run (long runs)


class ChaosFleet:
    def __init__(
        self,
        root: Path,
        agent_count: int,
        netns_links: Sequence[NetnsLink] = (),
        heartbeat_timeout_s: float = 4.0,
        database_url: str | None = None,
    ) -> None:
        self.root = root
        self.agent_count = agent_count
        self.netns_links = list(netns_links)
        self.markers_path = root / "markers.jsonl"
        self.ledger_path = root / "ledger.jsonl"
        (root / "configs").mkdir(parents=True, exist_ok=True)
        # Agents in namespaces reach the orchestrator on the host ends of their veths.
        listen = ["--host", "0.0.0.0"] if self.netns_links else []
        # With a PostgreSQL URL: two orchestrators, one active, one standing by.
        self.orchestrator: Any = (
            OrchestratorGroup(
                root, root / "configs", database_url, heartbeat_timeout_s=heartbeat_timeout_s
            )
            if database_url
            else Orchestrator(
                root / "data",
                root / "configs",
                heartbeat_timeout_s=heartbeat_timeout_s,
                extra_args=listen,
            )
        )
        self.agents: list[ChaosAgent] = []
        self.accepted: dict[str, float] = {}  # job id → when the orchestrator said yes
        self.refused_submits = 0
        self.agent_exits: list[str] = []
        self.settled = False
        self.unsettled: list[str] = []  # why the fleet did not come to rest, if it did not
        self.phases: dict[str, float] = {}  # how long each phase took

    # --- bringing it up and down ------------------------------------------------------

    def start(self) -> ChaosFleet:
        began = time.monotonic()
        orch = self.orchestrator.start()
        for index in range(self.agent_count):
            link = self.netns_links[index] if index < len(self.netns_links) else None
            name = f"chaos-{index}" + ("-ns" if link else "")
            created = orch.create_worker(name, "persistent")
            url = f"http://{link.host_addr}:{orch.port}" if link else orch.url
            agent = ChaosAgent(
                url,
                created["token"],
                self.root / f"work-{name}",
                name,
                persistent=True,
                # The chaos trainer is not among a worker's default allowed commands.
                extra_args=["--allowed-commands", f"python {CHAOS_TRAINER}"],
                worker_id=created["worker_id"],
                netns=link,
            )
            self.agents.append(agent.start())
        for agent in self.agents:
            wait_until(partial(self._agent_idle, agent), 60, 0.2, f"{agent.name} to be idle")
        self.phases["start_s"] = round(time.monotonic() - began, 1)
        return self

    def _agent_idle(self, agent: ChaosAgent) -> bool:
        if agent.process is not None and agent.process.poll() is not None:
            raise AssertionError(f"agent {agent.name} exited at start: {agent.log()[-3000:]}")
        worker = self.orchestrator.worker(agent.worker_id)
        return bool(worker["status"] == "idle" and worker["connected"])

    def stop(self) -> None:
        """Everything this fleet started ends, whatever state the run left it in."""
        for agent in self.agents:  # all at once: each may take a few seconds
            agent.resume()
            agent.reconnect()
            if agent.pid is not None:
                procs.signal_pid(agent.pid, signal.SIGTERM)
        for agent in self.agents:
            agent.stop()
        self.orchestrator.stop()
        self.end_stray_trainers()

    def end_stray_trainers(self) -> list[int]:
        """Trainers still running with no agent to answer to (orphans of kill -9)."""
        stray = [
            pid
            for pid in unfinished_trainers(self.markers_path)
            if procs.alive(pid) and CHAOS_TRAINER.name in procs.cmdline(pid)
        ]
        procs.end_processes(stray)
        return stray

    # --- jobs ----------------------------------------------------------------------------

    def submit(self, rng: random.Random, plan: ChaosPlan) -> str | None:
        config = {
            "max_train_steps": rng.randint(*plan.steps),
            "step_seconds": plan.step_seconds,
            "output_dir": "output",
            "log_every": 5,
            "ledger_path": str(self.ledger_path),
            "chaos_markers_path": str(self.markers_path),
        }
        body: dict[str, Any] = {
            "name": f"chaos-{len(self.accepted) + self.refused_submits}",
            "config": config,
            "command": ["python", str(CHAOS_TRAINER)],
            "target": "worker",
            "max_retries": rng.choice(list(plan.retries)),
            "priority": rng.choice((0, 0, 0, 5)),
        }
        try:
            job_id = str(self.orchestrator.submit(**body)["job_id"])
        except (OSError, ApiError, ValueError):
            self.refused_submits += 1  # the orchestrator is down: not accepted, not counted
            return None
        self.accepted[job_id] = time.time()
        return job_id

    def live_jobs(self) -> int | None:
        try:
            stats = self.orchestrator.request("GET", "/api/queue/stats")
        except (OSError, ApiError, ValueError):
            return None
        return int(stats["queue_depth"]) + int(stats["dispatched"]) + int(stats["running"])

    def unrest(self) -> list[str]:
        """What keeps the fleet from rest: live jobs, workers not idle and connected, or
        still holding a job. Empty once everything is done and every agent is back."""
        live = self.live_jobs()
        if live is None:
            return ["the orchestrator does not answer"]
        problems = [f"{live} jobs still pending, dispatched or running"] if live else []
        for worker in self.orchestrator.request("GET", "/api/admin/workers")["workers"]:
            if worker["status"] != "idle" or not worker["connected"] or worker["current_job_id"]:
                problems.append(
                    f"worker {worker['name']} is {worker['status']}, connected "
                    f"{worker['connected']}, holding {worker['current_job_id']}"
                )
        return problems

    def settle(self, timeout_s: float) -> bool:
        """Wait (bounded) until the fleet is at rest (see unrest)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.unsettled = self.unrest()
            if not self.unsettled:
                return True
            self.watch_agents()
            time.sleep(0.25)
        return False

    def watch_agents(self, impaired: set[str] | None = None) -> None:
        """A persistent agent never exits by itself: note it, and start it again."""
        for agent in self.agents:
            if agent.process is None or agent.name in (impaired or set()):
                continue
            code = agent.process.poll()
            if code is not None:
                self.agent_exits.append(
                    f"agent {agent.name} exited by itself with code {code}: {agent.log()[-1500:]}"
                )
                agent.start()

    # --- the run ---------------------------------------------------------------------------

    def run(self, plan: ChaosPlan, seed: int) -> FaultInjector:
        """Submit jobs and inject faults for ``plan.seconds``; heal all; settle."""
        jobs_rng = random.Random(f"{seed}-jobs")
        injector = FaultInjector(
            FaultPlan(
                plan.kinds,
                plan.fault_gap_s,
                self.orchestrator.heartbeat_timeout_s,
                max(1, len(self.agents) // 2),
            ),
            self.agents,
            self.orchestrator,
            random.Random(f"{seed}-faults"),
            self.root / "faults.jsonl",
        )
        for _ in range(plan.initial_jobs):
            self.submit(jobs_rng, plan)
        submitted = plan.initial_jobs
        next_submit = time.monotonic() + jobs_rng.uniform(*plan.submit_gap_s)
        began = time.monotonic()
        end, hard_end = began + plan.seconds, began + 2 * plan.seconds
        # Past ``seconds`` only while some kind was never injected (a slow restart or
        # every target busy can delay one), so that each run sees every kind.
        while time.monotonic() < end or (
            time.monotonic() < hard_end and set(injector.counts()) != set(map(str, plan.kinds))
        ):
            injector.step()
            self.watch_agents(injector.impaired)
            if isinstance(self.orchestrator, OrchestratorGroup):
                self.orchestrator.supervise(injector.killed_orchestrators())
            if time.monotonic() >= next_submit and submitted < plan.max_jobs:
                live = self.live_jobs() if plan.max_live is not None else None
                if live is None or plan.max_live is None or live < plan.max_live:
                    self.submit(jobs_rng, plan)
                    submitted += 1
                next_submit = time.monotonic() + jobs_rng.uniform(*plan.submit_gap_s)
            time.sleep(0.1)
        injector.heal_all()
        self.phases["chaos_s"] = round(time.monotonic() - began, 1)
        began = time.monotonic()
        self.settled = self.settle(plan.settle_timeout_s)
        self.phases["settle_s"] = round(time.monotonic() - began, 1)
        return injector

    def evidence(self, injector: FaultInjector) -> Evidence:
        """Read after the run: orphans are ended first, so their end markers are in."""
        self.end_stray_trainers()
        killed_at = {
            int(pid): float(fault.detail["killed_at"])
            for fault in injector.faults
            for pid in fault.detail.get("trainers_killed", [])
        }
        work_dirs = {agent.work_dir: agent.worker_id for agent in self.agents}
        return Evidence(
            jobs=load_jobs(self.orchestrator),
            accepted=set(self.accepted),
            executions=load_executions(self.markers_path, work_dirs, killed_at),
            ledger=load_ledger(self.ledger_path),
            killed_agent_pids=injector.killed_agent_pids(),
            agents_launched_at={
                pid: at for agent in self.agents for pid, at in agent.launched_at.items()
            },
            settled=self.settled,
            unrest=list(self.unsettled),
            agent_exits=list(self.agent_exits),
        )


SHORT_DEFAULT_SEED = 20240607


def usable_kinds(netns_unavailable: str | None, *, standbys: bool = False) -> list[FaultKind]:
    """Every fault kind for the fleet; without network namespaces, all but the network cut
    (and a warning that says why, in pytest's summary). One orchestrator: restarted;
    several on PostgreSQL (`standbys`): the active one killed, a standby taking over."""
    orchestrator = (
        FaultKind.KILL_ACTIVE_ORCHESTRATOR if standbys else FaultKind.RESTART_ORCHESTRATOR
    )
    kinds = [kind for kind in FaultKind if kind in AGENT_FAULTS or kind == orchestrator]
    if netns_unavailable is None:
        return kinds
    warnings.warn(
        f"chaos: network cuts not exercised: {netns_unavailable}", ChaosWarning, stacklevel=2
    )
    return [kind for kind in kinds if kind != FaultKind.CUT_NETWORK]


class ChaosWarning(UserWarning):
    pass


def env_seed(default: int | None) -> int:
    raw = os.environ.get("TUNEFLEET_CHAOS_SEED", "").strip()
    if raw:
        return int(raw)
    return default if default is not None else random.SystemRandom().randrange(1, 10**9)


def env_seconds(default: float) -> float:
    raw = os.environ.get("TUNEFLEET_CHAOS_SECONDS", "").strip()
    return float(raw) if raw else default


def report(
    fleet: ChaosFleet, injector: FaultInjector, findings: Findings, seed: int, started: float
) -> str:
    """The run's summary: printed, written to report.json, and the failure message."""
    summary = {
        "seed": seed,
        "wall_s": round(time.monotonic() - started, 1),
        "run_dir": str(fleet.root),
        "settled": fleet.settled,
        "phases": fleet.phases,
        "accepted": len(fleet.accepted),
        "refused_submits": fleet.refused_submits,
        "faults": injector.counts(),
        "stats": {key: round(value, 3) for key, value in sorted(findings.stats.items())},
        "violations": findings.violations[:40],
    }
    if isinstance(fleet.orchestrator, OrchestratorGroup):
        summary["takeovers_s"] = fleet.orchestrator.takeovers_s
        summary["orchestrator_exits"] = fleet.orchestrator.exits
    text = json.dumps(summary, indent=2)
    (fleet.root / "report.json").write_text(text + "\n")
    print(text)
    return (
        f"{len(findings.violations)} invariant violations (replay the fault choices with "
        f"TUNEFLEET_CHAOS_SEED={seed}; faults, markers, ledger and logs in {fleet.root}):\n" + text
    )
