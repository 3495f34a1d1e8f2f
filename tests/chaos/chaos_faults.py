"""The fault injector: a seeded RNG picks each fault, its target and its length; every
fault is logged (faults.jsonl in the run directory, and stdout) when it is injected and
when it is healed.

The same seed gives the same sequence of choices. What the faults then hit (which job
an agent was running when it died) depends on timing, which no seed can fix; the
invariants hold for every interleaving, so that does not make the suites flaky.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

from tests.chaos.chaos_procs import alive
from tests.e2e.harness import Orchestrator


class FaultKind(StrEnum):
    # kill -9 of the agent process alone: its trainer is orphaned and runs on until its
    # next output line hits the closed pipe.
    KILL_AGENT = "kill_agent"
    # kill -9 of the agent and its trainers' process groups: the machine died.
    CRASH_HOST = "crash_host"
    # SIGSTOP of the agent alone, SIGCONT later: its trainer runs on meanwhile.
    PAUSE_AGENT = "pause_agent"
    # SIGSTOP of the agent and its trainers: a frozen VM.
    PAUSE_HOST = "pause_host"
    # kill -9 of the orchestrator, then the same command again (same port, same data).
    RESTART_ORCHESTRATOR = "restart_orchestrator"
    # the agent's veth link down, then up (agents in their own network namespace only).
    CUT_NETWORK = "cut_network"
    # kill -9 of the active one of several orchestrators on PostgreSQL
    # (tests/chaos/chaos_ha.OrchestratorGroup): a standby takes over; the killed one is
    # started again later and stands by.
    KILL_ACTIVE_ORCHESTRATOR = "kill_active_orchestrator"


ORCHESTRATOR_FAULTS = frozenset(
    {FaultKind.RESTART_ORCHESTRATOR, FaultKind.KILL_ACTIVE_ORCHESTRATOR}
)
AGENT_FAULTS = frozenset(FaultKind) - ORCHESTRATOR_FAULTS


class FaultTarget(Protocol):
    """What the injector needs of an agent (tests.chaos.chaos_harness.ChaosAgent)."""

    name: str

    @property
    def pid(self) -> int | None: ...
    @property
    def in_netns(self) -> bool: ...
    def crash(self, *, with_jobs: bool) -> list[int]: ...
    def pause(self, *, with_jobs: bool) -> list[int]: ...
    def resume(self) -> None: ...
    def cut(self) -> None: ...
    def reconnect(self) -> None: ...
    def restart(self) -> None: ...


@dataclass
class Fault:
    seq: int
    kind: str
    target: str
    injected_at: float  # unix time, comparable with the orchestrator's records
    heal_after_s: float
    healed_at: float | None = None
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class FaultPlan:
    kinds: Sequence[FaultKind]
    gap_s: tuple[float, float]  # between two injections
    heartbeat_timeout_s: float
    max_impaired_agents: int


class FaultInjector:
    def __init__(
        self,
        plan: FaultPlan,
        agents: Sequence[FaultTarget],
        orchestrator: Orchestrator,
        rng: random.Random,
        log_path: Path,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.plan = plan
        self.agents = {agent.name: agent for agent in agents}
        self.orchestrator = orchestrator
        self.rng = rng
        self.log_path = log_path
        self.clock = clock
        self.faults: list[Fault] = []
        self._heals: list[tuple[float, Fault, Callable[[], object]]] = []
        self._round: list[FaultKind] = []
        self._next_at = clock() + rng.uniform(*plan.gap_s)

    # --- the loop's calls ------------------------------------------------------------

    def step(self) -> None:
        """Heal what is due, then inject the next fault when its time has come."""
        now = self.clock()
        for due in [h for h in self._heals if h[0] <= now]:
            self._heals.remove(due)
            self._heal(due[1], due[2])
        if now >= self._next_at:
            self._inject()
            self._next_at = self.clock() + self.rng.uniform(*self.plan.gap_s)

    def heal_all(self) -> None:
        """End every fault still in force (the run's chaos phase is over)."""
        for _, fault, heal in sorted(self._heals, key=lambda h: h[0]):
            self._heal(fault, heal)
        self._heals.clear()

    @property
    def impaired(self) -> set[str]:
        return {fault.target for _, fault, _ in self._heals}

    def killed_agent_pids(self) -> set[int]:
        return {
            int(f.detail["agent_pid"])
            for f in self.faults
            if f.kind in (FaultKind.KILL_AGENT, FaultKind.CRASH_HOST)
        }

    def killed_orchestrators(self) -> set[str]:
        """URLs of orchestrator processes killed by a fault and not started again yet."""
        return {
            str(fault.detail.get("victim"))
            for _, fault, _ in self._heals
            if fault.kind == FaultKind.KILL_ACTIVE_ORCHESTRATOR
        }

    def counts(self) -> dict[str, int]:
        counted: dict[str, int] = {}
        for fault in self.faults:
            counted[fault.kind] = counted.get(fault.kind, 0) + 1
        return counted

    # --- choosing -------------------------------------------------------------------------

    def _inject(self) -> None:
        """The next kind from a shuffled round of all kinds (so a short run still sees
        each one); a kind with no target now waits for the next injection."""
        if not self._round:
            self._round = list(self.plan.kinds)
            self.rng.shuffle(self._round)
        for kind in list(self._round):
            targets = self._targets(kind)
            if targets:
                self._round.remove(kind)
                target = self.rng.choice(targets)
                if kind == FaultKind.RESTART_ORCHESTRATOR:
                    self._restart_orchestrator()
                elif kind == FaultKind.KILL_ACTIVE_ORCHESTRATOR:
                    self._kill_active_orchestrator()
                else:
                    self._hit_agent(kind, self.agents[target])
                return

    def _targets(self, kind: FaultKind) -> list[str]:
        if kind in ORCHESTRATOR_FAULTS:
            if kind == FaultKind.KILL_ACTIVE_ORCHESTRATOR and not hasattr(
                self.orchestrator, "kill_active"
            ):
                return []  # one orchestrator: nothing stands by
            return [] if "orchestrator" in self.impaired else ["orchestrator"]
        impaired = self.impaired
        if len(impaired - {"orchestrator"}) >= self.plan.max_impaired_agents:
            return []
        return sorted(
            name
            for name, agent in self.agents.items()
            if name not in impaired
            and agent.pid is not None
            and alive(agent.pid)
            and (kind != FaultKind.CUT_NETWORK or agent.in_netns)
        )

    def _outage_s(self) -> float:
        """Shorter than the heartbeat timeout a third of the time, longer otherwise."""
        hb = self.plan.heartbeat_timeout_s
        if self.rng.random() < 1 / 3:
            return round(self.rng.uniform(0.2, 0.6) * hb, 2)
        return round(hb + self.rng.uniform(0.5, 3.0), 2)

    # --- doing ----------------------------------------------------------------------------

    def _hit_agent(self, kind: FaultKind, agent: FaultTarget) -> None:
        detail: dict[str, Any] = {"agent_pid": agent.pid}
        heal: Callable[[], object]
        if kind in (FaultKind.KILL_AGENT, FaultKind.CRASH_HOST):
            down_s = round(self.rng.uniform(0.3, 2.0 * self.plan.heartbeat_timeout_s), 2)
            fault = self._record(kind, agent.name, down_s, detail)
            whole = kind == FaultKind.CRASH_HOST
            detail["trainers_killed" if whole else "trainers_orphaned"] = agent.crash(
                with_jobs=whole
            )
            detail["killed_at"] = time.time()  # everything named above is dead by now
            heal = agent.restart
        elif kind in (FaultKind.PAUSE_AGENT, FaultKind.PAUSE_HOST):
            fault = self._record(kind, agent.name, self._outage_s(), detail)
            detail["trainers_paused"] = agent.pause(with_jobs=kind == FaultKind.PAUSE_HOST)
            heal = agent.resume
        else:
            fault = self._record(kind, agent.name, self._outage_s(), detail)
            agent.cut()
            heal = agent.reconnect
        self._log("inject", fault)
        self._heals.append((self.clock() + fault.heal_after_s, fault, heal))

    def _restart_orchestrator(self) -> None:
        down_s = round(self.rng.uniform(0.0, 1.5), 2)
        fault = self._record(FaultKind.RESTART_ORCHESTRATOR, "orchestrator", down_s, {})
        if self.orchestrator.process is not None:
            fault.detail["pid"] = self.orchestrator.process.pid
        self.orchestrator.kill()
        self._log("inject", fault)
        self._heals.append((self.clock() + down_s, fault, self.orchestrator.start))

    def _kill_active_orchestrator(self) -> None:
        down_s = round(self.rng.uniform(0.5, 3.0), 2)
        fault = self._record(FaultKind.KILL_ACTIVE_ORCHESTRATOR, "orchestrator", down_s, {})
        group: Any = self.orchestrator
        fault.detail.update(group.kill_active())  # returns once a standby is active
        self._log("inject", fault)
        self._heals.append((self.clock() + down_s, fault, group.restart_dead))

    def _record(
        self, kind: FaultKind, target: str, heal_after_s: float, detail: dict[str, Any]
    ) -> Fault:
        fault = Fault(
            len(self.faults) + 1, str(kind), target, time.time(), heal_after_s, None, detail
        )
        self.faults.append(fault)
        return fault

    def _heal(self, fault: Fault, heal: Callable[[], object]) -> None:
        heal()
        fault.healed_at = time.time()
        self._log("heal", fault)

    def _log(self, event: str, fault: Fault) -> None:
        entry = {"event": event, **asdict(fault)}
        with self.log_path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(entry) + "\n")
        print(f"chaos {event}: #{fault.seq} {fault.kind} {fault.target} {fault.detail}", flush=True)
