"""The process's logging set-up, put back after each test that changes it: the tests of
configure_logging and of the lines it renders import ``restore_logging``."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import structlog


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    saved_handlers, saved_level = list(root.handlers), root.level
    saved_quiet = {n: logging.getLogger(n).level for n in ("transitions", "peewee")}
    saved_srcfile = logging._srcfile
    saved_fields = (logging.logThreads, logging.logProcesses, logging.logMultiprocessing)
    try:
        yield
    finally:
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)
        for name, level in saved_quiet.items():
            logging.getLogger(name).setLevel(level)
        logging.captureWarnings(False)
        logging._srcfile = saved_srcfile
        logging.logThreads, logging.logProcesses, logging.logMultiprocessing = saved_fields
        structlog.reset_defaults()
