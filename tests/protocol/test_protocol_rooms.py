"""The rooms' import rule: the agent, the CLI, the Python client and the actors know
nothing of the HTTP room.

The agent and the CLI talk to the orchestrator only through the wire (tunefleet/protocol/),
and the actors are driven by messages, not requests; so none of them imports
tunefleet.http. Walked with ast, so an import inside a function or under TYPE_CHECKING
counts too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "tunefleet"
FORBIDDEN = "tunefleet.http"
CHECKED_ROOMS = ("agent", "cli", "actors", "client")
# `tunefleet server` starts the orchestrator: the CLI's composition root, the one place
# outside http/ that must reach into it (run_server, ServerOptions).
COMPOSITION_ROOTS = frozenset({"cli/server.py"})


def imported_modules(path: Path, package_dir: Path = PACKAGE) -> list[str]:
    """Every module an ``import`` or ``from … import`` in the file names, relative
    imports resolved against the file's package."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = ".".join(path.relative_to(package_dir.parent).with_suffix("").parts[:-1])
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            names.append(module)
            # `from tunefleet import http` names the room as well.
            names.extend(f"{module}.{alias.name}" for alias in node.names)
    return names


def names(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def http_imports(room: str, package_dir: Path = PACKAGE) -> list[tuple[str, str]]:
    """(file, module) for each import of the HTTP room in ``room``, the composition root
    left out."""
    found = []
    for path in sorted((package_dir / room).rglob("*.py")):
        relative = path.relative_to(package_dir).as_posix()
        if relative in COMPOSITION_ROOTS:
            continue
        for module in imported_modules(path, package_dir):
            if names(module, FORBIDDEN):
                found.append((relative, module))
    return found


@pytest.mark.parametrize("room", CHECKED_ROOMS)
def test_room_imports_nothing_from_http(room: str) -> None:
    assert http_imports(room) == []


def test_the_walk_sees_every_kind_of_import(tmp_path: Path) -> None:
    """The rule cannot pass by not looking: each spelling of an http import is found."""
    room = tmp_path / "tunefleet" / "agent"
    room.mkdir(parents=True)
    (room / "probe.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "import tunefleet.http.app\n"
        "from tunefleet import http\n"
        "from ..http import tokens\n"
        "def later():\n"
        "    from tunefleet.http.tls import server_ssl_context\n"
        "if TYPE_CHECKING:\n"
        "    from tunefleet.http.metrics import Metrics\n",
        encoding="utf-8",
    )
    found = {module for _, module in http_imports("agent", tmp_path / "tunefleet")}
    assert {
        "tunefleet.http.app",
        "tunefleet.http",
        "tunefleet.http.tokens",
        "tunefleet.http.tls",
        "tunefleet.http.metrics",
    } <= found


def test_the_composition_root_still_exists() -> None:
    """An exemption for a file that no longer imports http/ is a stale hole in the rule."""
    for relative in COMPOSITION_ROOTS:
        assert any(m.startswith(FORBIDDEN) for m in imported_modules(PACKAGE / relative))


def test_the_protocol_room_imports_no_other_room() -> None:
    """Both ends import the protocol, so it may depend on neither: only on itself and
    the shared error base."""
    allowed = ("tunefleet.protocol", "tunefleet.errors")
    found = [
        (path.relative_to(PACKAGE).as_posix(), module)
        for path in sorted((PACKAGE / "protocol").rglob("*.py"))
        for module in imported_modules(path)
        if names(module, "tunefleet") and not any(names(module, room) for room in allowed)
    ]
    assert found == []
