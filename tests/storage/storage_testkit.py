"""Helpers shared by the storage tests (imported by conftest and the test modules)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import peewee as pw

from tunefleet.storage.urls import build_peewee_database, parse_database_url


@dataclass(frozen=True)
class DbTarget:
    """Where a test's database lives: what to pass to open_database."""

    backend: str
    url: str | None
    data_dir: Path

    def raw(self) -> pw.Database:
        """A peewee database for this target on the calling thread (to build fixtures)."""
        return build_peewee_database(parse_database_url(self.url, self.data_dir))
