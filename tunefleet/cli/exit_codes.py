"""What every ``tunefleet`` client command exits with (docs/cli.md), and which exit code
each of the client's errors (tunefleet/client/errors.py) means."""

from __future__ import annotations

from enum import IntEnum

from tunefleet.client.errors import (
    ClientError,
    Forbidden,
    NotTheOrchestrator,
    StreamFailed,
    TlsFailure,
    Unauthorized,
    Unreachable,
)


class ExitCode(IntEnum):
    OK = 0
    FAILED = 1  # the job failed, or the orchestrator refused the request
    USAGE = 2  # click's own code for usage errors
    CANCELLED = 3
    CONNECTION = 4  # unreachable, TLS, 401, 403, 503
    INTERRUPTED = 130  # Ctrl-C: 128 + SIGINT, what a shell reports


# Errors where the command could not talk to the orchestrator as this token: 4, not 1.
_CONNECTION = (Unreachable, TlsFailure, Unauthorized, Forbidden, NotTheOrchestrator, StreamFailed)


def exit_code_of(error: ClientError) -> ExitCode:
    return ExitCode.CONNECTION if isinstance(error, _CONNECTION) else ExitCode.FAILED
