"""Options every client command shares, and the one way commands call the API.

``--url``, ``--token``, ``--ca-cert`` and ``--ssl-no-verify`` (with their environment
variables) become one ``Connection``; ``call`` runs an API action on a fresh event loop
and turns its failures into a message on stderr and the documented exit code.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click

from tunefleet import __version__
from tunefleet.cli.exit_codes import ExitCode, exit_code_of
from tunefleet.client.connection import DEFAULT_URL, Connection, check_urls
from tunefleet.client.errors import (
    CLI_SPELLING,
    ENV_CA_CERT,
    ENV_SSL_NO_VERIFY,
    ENV_TOKEN,
    ENV_URL,
    ClientError,
    SettingsError,
)
from tunefleet.client.transport import Transport

T = TypeVar("T")
USER_AGENT = f"tunefleet-cli/{__version__}"
F = TypeVar("F", bound=Callable[..., Any])


def _check_url(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """One URL, or several separated by commas (an active orchestrator and its standbys)."""
    try:
        return check_urls(value)
    except SettingsError as error:
        raise click.BadParameter(str(error)) from None


def connection_options(func: F) -> F:
    """Add the connection options to a command; it receives them as ``conn``."""

    @functools.wraps(func)
    def wrapper(
        *args: Any,
        url: str,
        token: str | None,
        ca_cert: Path | None,
        ssl_no_verify: bool,
        **kwargs: Any,
    ) -> Any:
        conn = Connection(
            url=url, token=(token or "").strip() or None, ca_cert=ca_cert, verify=not ssl_no_verify
        )
        return func(*args, conn=conn, **kwargs)

    options = [
        click.option(
            "--url",
            envvar=ENV_URL,
            default=DEFAULT_URL,
            show_default=True,
            callback=_check_url,
            help=f"The orchestrator's base URL, or several separated by commas (or {ENV_URL}).",
        ),
        click.option(
            "--token",
            envvar=ENV_TOKEN,
            metavar="TOKEN",
            help=f"API token, tf_... (or {ENV_TOKEN}).",
        ),
        click.option(
            "--ca-cert",
            type=click.Path(exists=True, dir_okay=False, path_type=Path),
            envvar=ENV_CA_CERT,
            help=f"Trust this CA certificate (PEM) for an https:// URL (or {ENV_CA_CERT}).",
        ),
        click.option(
            "--ssl-no-verify",
            is_flag=True,
            envvar=ENV_SSL_NO_VERIFY,
            help="Do not verify the orchestrator's TLS certificate (development only).",
        ),
    ]
    decorated: Any = wrapper
    for option in reversed(options):
        decorated = option(decorated)
    return decorated


json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print JSON for scripts (times in ISO 8601)."
)


def fail(message: str, code: ExitCode) -> NoReturn:
    click.secho(f"Error: {message}", err=True, fg="red")
    raise click.exceptions.Exit(int(code))


def call(
    conn: Connection,
    action: Callable[[Transport], Awaitable[T]],
    *,
    interrupted: Callable[[], str | None] | None = None,
) -> T:
    """Run ``action`` with a client; errors exit with their code, Ctrl-C with 130
    after printing what ``interrupted`` says (e.g. that the job goes on)."""

    async def main() -> T:
        async with Transport(conn, CLI_SPELLING, user_agent=USER_AGENT) as api:
            return await action(api)

    try:
        return asyncio.run(main())
    except ClientError as error:
        fail(str(error), exit_code_of(error))
    except KeyboardInterrupt:
        message = interrupted() if interrupted is not None else None
        if message:
            click.echo(message, err=True)
        raise click.exceptions.Exit(int(ExitCode.INTERRUPTED)) from None


def parse_pairs(values: Iterable[str], option: str) -> dict[str, str]:
    """``KEY=VALUE`` options as a dict; a malformed one is a usage error (exit 2)."""
    pairs: dict[str, str] = {}
    for raw in values:
        key, sep, value = raw.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{raw!r} is not KEY=VALUE", param_hint=option)
        pairs[key.strip()] = value.strip()
    return pairs
