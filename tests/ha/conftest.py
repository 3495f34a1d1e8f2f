"""High-availability fixtures: a private PostgreSQL schema per test, or a clear skip."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.ha.pg import private_schema, unreachable_reason

_reason: list[str | None] = []


@pytest.fixture
def pg_url() -> Iterator[str]:
    if not _reason:
        _reason.append(unreachable_reason())
    if _reason[0] is not None:
        pytest.skip(_reason[0])
    with private_schema() as url:
        yield url
