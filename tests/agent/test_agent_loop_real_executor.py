"""The agent with the real JobExecutor: a real process's output, progress and cancel
reach the orchestrator through the agent's reports (the contract between them)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from agent_loop_testkit import ProtocolServer, eventually, make_agent, running

from tunefleet.agent.agent import Agent
from tunefleet.agent.executor import JobExecutor

pytestmark = pytest.mark.timeout(30)

WRITE_PROGRESS_AND_PRINT = (
    "import json, os, sys\n"
    "with open(os.environ['TUNEFLEET_PROGRESS_FILE'], 'a') as f:\n"
    "    f.write(json.dumps({'step': 3, 'total': 3}) + '\\n')\n"
    "print('hello from the trainer', flush=True)\n"
    "print('a warning', file=sys.stderr, flush=True)\n"
)


@pytest.fixture
async def proto(aiohttp_server: Any) -> tuple[ProtocolServer, str]:
    server = ProtocolServer()
    test_server = await aiohttp_server(server.app())
    return server, str(test_server.make_url("")).rstrip("/")


def real_agent(url: str, work_dir: Path) -> Agent:
    executor = JobExecutor(
        work_dir, [sys.executable, "-c", "pass"], grace_s=2.0, log_interval_s=0.05
    )
    return make_agent(url, executor=executor)


async def test_a_real_job_reports_output_progress_and_completion(
    proto: tuple[ProtocolServer, str], tmp_path: Path
) -> None:
    server, url = proto
    agent = real_agent(url, tmp_path)
    async with running(agent):
        await eventually(lambda: server.stream_opens, "the stream to open")
        command = [sys.executable, "-c", WRITE_PROGRESS_AND_PRINT]
        server.push("job_submit", job_id="j_real", attempt=1, config={"x": 1}, command=command)
        await eventually(
            lambda: (
                agent.current_job_id is None
                and server.statuses("j_real")
                and server.status_words("j_real")[-1] == "completed"
            ),
            "the completion",
            timeout_s=15,
        )
    words = server.status_words("j_real")
    assert words[0] == "starting" and words[-1] == "completed"
    assert server.statuses("j_real")[-1]["progress"]["step"] == 3
    lines = {(line["stream"], line["line"]) for line in server.log_lines("j_real")}
    assert ("stdout", "hello from the trainer") in lines
    assert ("stderr", "a warning") in lines


async def test_a_real_job_is_cancelled_from_the_stream(
    proto: tuple[ProtocolServer, str], tmp_path: Path
) -> None:
    server, url = proto
    agent = real_agent(url, tmp_path)
    async with running(agent):
        await eventually(lambda: server.stream_opens, "the stream to open")
        sleeper = [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"]
        server.push("job_submit", job_id="j_sleep", config={}, command=sleeper)
        await eventually(
            lambda: "running" in server.status_words("j_sleep"), "the job to run", timeout_s=15
        )
        server.push("job_cancel", job_id="j_sleep", reason="no longer needed")
        await eventually(
            lambda: "cancelled" in server.status_words("j_sleep"), "the cancel", timeout_s=15
        )
    assert server.statuses("j_sleep")[-1]["error"] == "no longer needed"
