"""The artifact tests use the in-process orchestrator of the server tests."""

from tests.server.conftest import make_server  # noqa: F401 - a fixture
