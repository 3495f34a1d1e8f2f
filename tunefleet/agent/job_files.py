"""What a job finds on disk and in its environment (docs/job-contract.md)."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tunefleet.errors import TunefleetError

CONFIG_FILE = "config.json"
DATALOADER_FILE = "multidatabackend.json"
PROGRESS_FILE = "progress.jsonl"
LOG_FILE = "output.log"

# Job ids become directory names: nothing that could climb out of the work dir.
_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_PYTHONS = frozenset({"python", "python3"})


class JobSetupError(TunefleetError):
    """The job could not be prepared (bad id, unwritable work dir, empty command)."""


@dataclass(frozen=True, slots=True)
class RunAs:
    """Another user to run trainers as (the local runner's isolation)."""

    name: str
    uid: int
    gid: int

    def process_user(self) -> dict[str, object]:
        """Popen's arguments that start a process as this user, with no extra groups."""
        return {"user": self.uid, "group": self.gid, "extra_groups": []}


def hand_over(files: JobFiles, run_as: RunAs) -> None:
    """Give the attempt's directory and the files the trainer writes to ``run_as``;
    output.log stays the agent's."""
    try:
        # The folders above it only need to be passable, whatever the umask made them.
        for folder in (files.job_dir.parent, files.job_dir.parent.parent):
            os.chmod(folder, 0o755)
        for path in (files.job_dir, files.config_path, files.progress_path, files.dataloader_path):
            if path is not None:
                os.chown(path, run_as.uid, run_as.gid)
    except OSError as error:
        raise JobSetupError(
            f"cannot hand {files.job_dir} to user {run_as.name}: {error}"
        ) from error


@dataclass(frozen=True, slots=True)
class JobFiles:
    job_dir: Path
    config_path: Path
    dataloader_path: Path | None
    progress_path: Path
    log_path: Path


def attempt_dir(work_dir: Path, job_id: str, attempt: int) -> Path:
    if not _SAFE_ID.match(job_id):
        raise JobSetupError(f"job id {job_id!r} is not a safe directory name")
    if attempt < 1:
        raise JobSetupError(f"attempt must be 1 or more, got {attempt}")
    return work_dir / "jobs" / job_id / f"attempt-{attempt}"


def _config_with_dataloader(config: Mapping[str, Any], dataloader_path: Path) -> dict[str, Any]:
    result = dict(config)
    if "data_backend_config" in result or "--data_backend_config" in result:
        return result
    # SimpleTuner configs spell keys either `name` or `--name`; follow the config's style.
    dashed = any(isinstance(key, str) and key.startswith("--") for key in result)
    result["--data_backend_config" if dashed else "data_backend_config"] = str(dataloader_path)
    return result


def prepare_job_dir(
    work_dir: Path,
    job_id: str,
    attempt: int,
    config: Mapping[str, Any],
    dataloader: object | None,
) -> JobFiles:
    """Create `<work_dir>/jobs/<job_id>/attempt-<n>/` with the files the trainer reads.

    A re-run of the same attempt starts with an empty progress file (stale progress
    would be reported as new) and appends to the same output.log.
    """
    job_dir = attempt_dir(work_dir, job_id, attempt)
    try:
        job_dir.mkdir(parents=True, exist_ok=True)
        dataloader_path: Path | None = None
        if dataloader is not None:
            dataloader_path = job_dir / DATALOADER_FILE
            dataloader_path.write_text(json.dumps(dataloader, indent=2, default=str) + "\n")
            config = _config_with_dataloader(config, dataloader_path)
        config_path = job_dir / CONFIG_FILE
        config_path.write_text(json.dumps(dict(config), indent=2, default=str) + "\n")
        progress_path = job_dir / PROGRESS_FILE
        progress_path.write_text("")
    except (OSError, TypeError, ValueError) as error:
        raise JobSetupError(f"cannot prepare job directory {job_dir}: {error}") from error
    return JobFiles(job_dir, config_path, dataloader_path, progress_path, job_dir / LOG_FILE)


def with_keys(config: Mapping[str, Any], **values: Any) -> dict[str, Any]:
    """``config`` with these keys set, spelled as its own keys are (``--name`` or ``name``)."""
    result = dict(config)
    dashed = any(isinstance(key, str) and key.startswith("--") for key in result)
    for name, value in values.items():
        result.pop(name, None)
        result.pop("--" + name, None)
        result[("--" + name) if dashed else name] = value
    return result


def update_config(files: JobFiles, **values: Any) -> None:
    """Set keys in the attempt's config.json (a resume adds ``resume_from_checkpoint``)."""
    try:
        config = json.loads(files.config_path.read_text())
        updated = with_keys(config, **values)
        files.config_path.write_text(json.dumps(updated, indent=2, default=str) + "\n")
    except (OSError, TypeError, ValueError) as error:
        raise JobSetupError(f"cannot update {files.config_path}: {error}") from error


def output_path(files: JobFiles, config: Mapping[str, Any]) -> Path:
    """The trainer's output directory: the config's ``output_dir``, relative to the job
    directory (the trainer's current directory) unless absolute."""
    raw = config.get("output_dir") or config.get("--output_dir") or "output"
    return files.job_dir / Path(str(raw)).expanduser()


def chosen_command(command: Sequence[str] | str | None, default: Sequence[str]) -> list[str]:
    """The job's own command when it names one, else the executor's default, as named:
    what --allowed-commands is checked against."""
    if isinstance(command, str):
        try:
            argv = shlex.split(command)
        except ValueError as error:
            raise JobSetupError(f"cannot parse command {command!r}: {error}") from error
    else:
        argv = [str(part) for part in command or ()]
    if not argv:
        argv = [str(part) for part in default]
    if not argv:
        raise JobSetupError("no command to run: the job names none and no default is set")
    return argv


def resolve_command(command: Sequence[str] | str | None, default: Sequence[str]) -> list[str]:
    """The command to start. A leading `python`/`python3` becomes this interpreter, so
    the job runs in the agent's environment (where tunefleet and the trainer are
    installed)."""
    argv = chosen_command(command, default)
    if argv[0] in _PYTHONS:
        argv[0] = sys.executable
    return argv


# The agent's own credentials are not the job's: a trainer holding the worker token could
# act as its worker (take other jobs, report on them), one holding an API token as its
# operator. Globs over variable names; the job's `env` may still set these names (its
# TUNEFLEET_UPLOAD_TOKEN is the one credential a trainer needs).
AGENT_CREDENTIALS_ENV = ("SIMPLETUNER_WORKER_TOKEN", "TUNEFLEET_*TOKEN*")


def without_credentials(environ: Mapping[str, str], withheld: Sequence[str]) -> dict[str, str]:
    """``environ`` less the variables AGENT_CREDENTIALS_ENV names (any case) and those
    whose value contains one of the non-empty ``withheld`` secrets."""
    secrets = [secret for secret in withheld if secret]
    return {
        name: value
        for name, value in environ.items()
        if not any(fnmatch.fnmatchcase(name.upper(), glob) for glob in AGENT_CREDENTIALS_ENV)
        and not any(secret in value for secret in secrets)
    }


def job_environment(
    files: JobFiles,
    job_id: str,
    attempt: int,
    extra: Mapping[str, object],
    cuda_visible_devices: str | None,
    base: Mapping[str, str] | None = None,
    run_as: RunAs | None = None,
    withheld: Sequence[str] = (),
) -> dict[str, str]:
    """The agent's environment (or ``base``) less the agent's credentials (the variables
    AGENT_CREDENTIALS_ENV names, and any holding one of the ``withheld`` values, such as
    a --worker-token, under whatever name), then the job's `env`, then tunefleet's own
    variables. tunefleet's variables come last because the trainer relies on them being
    true. A trainer run as another user gets that user's name and the job directory as
    its home (the agent's home is not its to read)."""
    env = without_credentials(os.environ if base is None else base, withheld)
    if run_as is not None:
        env.update({"USER": run_as.name, "LOGNAME": run_as.name, "HOME": str(files.job_dir)})
    env.setdefault("PYTHONUNBUFFERED", "1")  # progress and logs arrive as they happen
    env.update({str(key): str(value) for key, value in extra.items()})
    env.update(
        {
            "CONFIG_PATH": str(files.config_path),
            "SIMPLETUNER_CONFIG_BACKEND": "json",
            "TUNEFLEET_JOB_ID": job_id,
            "TUNEFLEET_ATTEMPT": str(attempt),
            "TUNEFLEET_PROGRESS_FILE": str(files.progress_path),
            "TUNEFLEET_JOB_DIR": str(files.job_dir),
        }
    )
    if cuda_visible_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = cuda_visible_devices
    return env
