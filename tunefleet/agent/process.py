"""The `tunefleet worker` process around the Agent: the real executor and GPUs, and
SIGTERM/SIGINT wired to a clean stop."""

from __future__ import annotations

import asyncio
import signal

import structlog

from tunefleet.agent.agent import Agent
from tunefleet.agent.executor import JobExecutor
from tunefleet.agent.gpu import probe_from_environment
from tunefleet.agent.settings import AgentSettings

log = structlog.get_logger(__name__)


async def run_worker(settings: AgentSettings) -> None:
    """The `tunefleet worker` process: real executor and GPUs, signals wired to a clean stop."""
    probe = probe_from_environment()
    executor = JobExecutor(
        settings.work_dir,
        list(settings.train_command),
        allowed_commands=settings.allowed_commands,
        withheld_secrets=(settings.worker_token,),
    )
    agent = Agent(settings, executor=executor, gpu=probe)
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, agent.handle_signal, sig.name)
        except (ValueError, RuntimeError, NotImplementedError):
            # Not the main thread (embedded, tests) or no signal support: stop() still works.
            log.debug("signal handler not installed", signal=sig.name)
        else:
            installed.append(sig)
    try:
        await agent.run()
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
        probe.close()
