"""The first-start banner says who the local runner runs jobs as, and its suggested
submission works on the machine that printed it: the sample configuration where the
configs directory has it, the same trainer inline where it does not."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from tunefleet.actors.local_access import Blocked
from tunefleet.actors.local_isolation import LocalIsolation, LocalMode
from tunefleet.agent.job_files import RunAs
from tunefleet.http.app import ServerOptions
from tunefleet.http.bootstrap import startup_banner

NOBODY = RunAs("nobody", 65534, 65534)
REPO_CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def local(mode: LocalMode, run_as: RunAs | None, blocked: Blocked | None) -> LocalIsolation:
    work = Path("/var/tmp/tunefleet-local-runner")
    return LocalIsolation(mode, "root", run_as, blocked, work, work / "own-user")


def submitted_body(banner: str) -> dict[str, object]:
    text = banner.replace("\\\n", " ")
    (line,) = [ln for ln in text.splitlines() if "/api/queue/submit" in ln]
    args = shlex.split(line)
    return json.loads(args[args.index("-d") + 1])  # type: ignore[no-any-return]


def test_with_the_local_runner_on_for_admins_the_example_runs_here(tmp_path: Path) -> None:
    options = ServerOptions(data_dir=tmp_path, configs_dir=REPO_CONFIGS)
    blocked = Blocked("user 'nobody' cannot execute /x/python: /x is closed", "run `chmod o+x /x`")
    banner = startup_banner(options, "tf_new", local(LocalMode.PER_SUBMITTER, None, blocked))
    assert (
        "  local runner: ON for admins (as root); others' local jobs are refused: user "
        "'nobody' cannot execute /x/python: /x is closed; to run them isolated, run "
        "`chmod o+x /x`"
    ) in banner.splitlines()
    assert (
        "  Submit a job (with no worker connected, it runs here, on the local runner):"
        in banner.splitlines()
    )
    assert submitted_body(banner) == {"config_name": "tiny-example", "target": "auto"}


def test_with_the_local_runner_off_the_example_waits_for_a_worker(tmp_path: Path) -> None:
    options = ServerOptions(data_dir=tmp_path, configs_dir=REPO_CONFIGS)
    blocked = Blocked("the orchestrator is not root", "start it as root")
    banner = startup_banner(options, None, local(LocalMode.ISOLATED_ONLY, None, blocked))
    assert "  local runner: OFF, the orchestrator is not root (--local-runner-isolated-only); " in (
        banner
    )
    assert "  Submit a job (it waits for a worker: the local runner is off):" in banner
    assert "waits for a worker" in startup_banner(options, None, None)


def test_without_the_sample_configuration_the_example_is_inline(tmp_path: Path) -> None:
    options = ServerOptions(data_dir=tmp_path, configs_dir=tmp_path / "empty")
    banner = startup_banner(options, "tf_new", local(LocalMode.PER_SUBMITTER, NOBODY, None))
    assert submitted_body(banner) == {
        "config": {
            "tunefleet_command": ["python", "-m", "tunefleet.examples.tiny_trainer"],
            "max_train_steps": 50,
        },
        "target": "auto",
    }
