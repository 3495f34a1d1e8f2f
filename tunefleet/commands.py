"""Which programs a job may make run: the environment names that change what a process
loads (choosing those is choosing the program), and the allowed-command globs that a
worker or the local runner checks a job's argument vector against.

Shared by the orchestrator (submit permissions, the scheduler's matching) and the agent
(the last word before anything starts), so both sides apply the same rule.
"""

from __future__ import annotations

import fnmatch
import shlex
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache

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


# --- allowed commands -------------------------------------------------------------------

# As a whole pattern: any command. As a pattern's last word: any further arguments.
ANY = "**"
# What a worker runs when its operator names nothing: SimpleTuner's trainer and the
# example trainer tunefleet ships (plus the worker's own --train-command).
DEFAULT_ALLOWED: tuple[str, ...] = (
    "python -m simpletuner.train",
    "python -m tunefleet.examples.tiny_trainer",
)


class BadPattern(ValueError):
    """An allowed-command pattern that cannot be read (the message says why)."""


def parse_patterns(raw: Iterable[str]) -> tuple[str, ...]:
    """Check ``--allowed-commands`` values (each a command line of globs, split like a
    shell); they are kept as given, without surrounding spaces and duplicates."""
    patterns: list[str] = []
    for value in raw:
        try:
            words = shlex.split(value)
        except ValueError as error:
            raise BadPattern(f"allowed command {value!r} cannot be split: {error}") from error
        if not words:
            raise BadPattern("an allowed command is empty; give the program to allow")
        if ANY in words[:-1]:
            raise BadPattern(f"allowed command {value!r}: ** may only be the last word")
        patterns.append(value.strip())
    return tuple(dict.fromkeys(patterns))


def default_patterns(train_command: Sequence[str]) -> tuple[str, ...]:
    own = (shlex.join(train_command),) if train_command else ()
    return tuple(dict.fromkeys((*own, *DEFAULT_ALLOWED)))


@lru_cache(maxsize=1024)
def _words(pattern: str) -> tuple[str, ...]:
    return tuple(shlex.split(pattern))


def _matches(argv: Sequence[str], words: Sequence[str]) -> bool:
    if words and words[-1] == ANY:
        fixed = words[:-1]
        return len(argv) >= len(fixed) and all(map(fnmatch.fnmatchcase, argv, fixed))
    return len(argv) == len(words) and all(map(fnmatch.fnmatchcase, argv, words))


def command_allowed(argv: Sequence[str], patterns: Sequence[str]) -> bool:
    """Whether ``argv`` (the job's command as it names it, before the agent swaps a
    leading ``python`` for its own interpreter) matches one pattern word for word."""
    return any(_matches(argv, _words(pattern)) for pattern in patterns)


def refusal(
    argv: Sequence[str] | None, env: Iterable[str], patterns: Sequence[str] | None
) -> str | None:
    """Why a worker allowing ``patterns`` (None: anything) will not run this job; None
    when it will. ``argv`` None is the worker's own default command, which the scheduler
    cannot see (the agent checks it). Loader env names are refused too unless anything
    is allowed: they would run other code under an allowed command's name."""
    if patterns is None or ANY in patterns:
        return None
    allowed = ", ".join(repr(p) for p in patterns)
    if argv is not None and not command_allowed(argv, patterns):
        return f"command {shlex.join(argv)!r} is not among the allowed commands ({allowed})"
    loaders = loader_env_names(env)
    if loaders:
        return (
            f"env {', '.join(loaders)} changes how programs load, and only the allowed "
            f"commands ({allowed}) may run here"
        )
    return None
