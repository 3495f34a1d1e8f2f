"""Which programs a job may make run: the environment names that change what a process
loads (choosing those is choosing the program), and the allowed-command globs that a
worker or the local runner checks a job's argument vector against.

Shared by the orchestrator (submit permissions, the scheduler's matching) and the agent
(the last word before anything starts), so both sides apply the same rule.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping, Sequence

# Environment names whose value decides which code a process loads or runs before (or
# instead of) the program named: the dynamic linker's, the interpreters' start-up hooks,
# shells' start-up files, PATH (which `python` is). Globs, matched case-sensitively.
LOADER_ENV_GLOBS: tuple[str, ...] = (
    "LD_*",  # LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT, ...
    "DYLD_*",
    "GLIBC_TUNABLES",
    "GCONV_PATH",
    "PATH",
    "IFS",
    "PYTHON*",  # PYTHONPATH, PYTHONSTARTUP, PYTHONHOME, PYTHONUSERBASE, ...
    "BASH_ENV",
    "ENV",
    "BASH_FUNC_*",
    "SHELLOPTS",
    "BASHOPTS",
    "PS4",
    "PROMPT_COMMAND",
    "PERL5OPT",
    "PERL5LIB",
    "PERLLIB",
    "RUBYOPT",
    "RUBYLIB",
    "NODE_OPTIONS",
    "NODE_PATH",
    "JAVA_TOOL_OPTIONS",
    "_JAVA_OPTIONS",
    "JDK_JAVA_OPTIONS",
)


def loader_env_names(env: Iterable[str]) -> list[str]:
    """The names in ``env`` that change how programs load, sorted; setting any of them
    needs the same permission as choosing the command."""
    return sorted(
        name
        for name in env
        if any(fnmatch.fnmatchcase(name, pattern) for pattern in LOADER_ENV_GLOBS)
    )


def chooses_program(command: Sequence[str] | None, env: Mapping[str, str]) -> str | None:
    """Why this job chooses the program it runs, or None when it leaves that to the
    worker (its default command, or the operator's named configuration)."""
    if command:
        return "a job that names its command"
    loaders = loader_env_names(env)
    if loaders:
        return f"env {', '.join(loaders)}, which changes how programs load"
    return None
