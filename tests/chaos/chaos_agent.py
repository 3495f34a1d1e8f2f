"""An agent of the chaos fleet: tests/e2e's Agent, restartable, on loopback or inside
its own network namespace, that the fault injector can kill, pause or cut off."""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from unittest import mock

from tests.chaos import chaos_procs as procs
from tests.chaos.chaos_netns import NetnsLink
from tests.e2e import harness
from tests.e2e.harness import Agent

AGENT_ENV = {
    # Above the orchestrator's 15 s ping interval: a stream silent this long is dead.
    "TUNEFLEET_STREAM_TIMEOUT": "25",
    # Far beyond any outage a run injects; an agent left behind by a test process that
    # was killed outright gives up on its vanished orchestrator instead of retrying forever.
    "TUNEFLEET_RECONNECT_TIMEOUT": "120",
}


@dataclass
class ChaosAgent(Agent):
    """tests/e2e's Agent, restartable, on loopback or inside a network namespace."""

    worker_id: str = ""
    netns: NetnsLink | None = None
    launched_at: dict[int, float] = field(default_factory=dict)  # agent pid → unix time
    paused_trainers: list[int] = field(default_factory=list)

    def start(self) -> ChaosAgent:
        prefix = self.netns.exec_prefix() if self.netns is not None else []
        launched_at = time.time()
        # tests/e2e's start, unchanged but for the command's prefix and the environment.
        with (
            mock.patch.object(harness, "TUNEFLEET", [*prefix, *harness.TUNEFLEET]),
            mock.patch.dict(os.environ, AGENT_ENV),
        ):
            super().start()
        if self.process is not None:
            self.launched_at[self.process.pid] = launched_at
        return self

    @property
    def pid(self) -> int | None:
        if self.process is None or self.process.poll() is not None:
            return None
        return self.process.pid

    @property
    def in_netns(self) -> bool:
        return self.netns is not None

    def crash(self, *, with_jobs: bool) -> list[int]:
        """kill -9 the agent; ``with_jobs``: its trainers' process groups too (the machine
        died), else they are orphaned. Returns the trainers' pids."""
        if self.process is None:
            return []
        procs.signal_pid(self.process.pid, signal.SIGSTOP)  # no new child from now on
        trainers = procs.children_of(self.process.pid)
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)
        if with_jobs:
            for trainer in trainers:
                procs.signal_group(trainer, signal.SIGKILL)
            procs.wait_gone(trainers)
        return trainers

    def pause(self, *, with_jobs: bool) -> list[int]:
        if self.process is None:
            return []
        procs.signal_pid(self.process.pid, signal.SIGSTOP)
        self.paused_trainers = procs.children_of(self.process.pid) if with_jobs else []
        for trainer in self.paused_trainers:
            procs.signal_group(trainer, signal.SIGSTOP)
        return list(self.paused_trainers)

    def resume(self) -> None:
        for trainer in self.paused_trainers:
            procs.signal_group(trainer, signal.SIGCONT)
        self.paused_trainers = []
        if self.process is not None:
            procs.signal_pid(self.process.pid, signal.SIGCONT)

    def cut(self) -> None:
        if self.netns is not None:
            self.netns.down()

    def reconnect(self) -> None:
        if self.netns is not None and not self.netns.is_up:
            self.netns.up()

    def restart(self) -> None:
        self.start()

    def stop(self) -> None:
        self.resume()
        self.reconnect()
        pid = self.pid
        trainers = procs.children_of(pid) if pid is not None else []
        super().stop()
        procs.end_processes([pid for pid in trainers if procs.alive(pid)])
