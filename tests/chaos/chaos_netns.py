"""Network namespaces for the chaos suites: an agent on its own host.

Each agent gets a namespace joined to the root namespace (the orchestrator's) by a veth
pair on a private /30 of 10.200.X.0/24 that the test creates and removes itself; cutting
the link is ``ip link set <host end> down``. Nothing here talks to any other address.

Namespaces are named ``tfchaos-<creator pid>-<index>``, so a run that died without
cleaning up is found and removed by the next one (its creator is gone).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field

PREFIX = "tfchaos-"
_IP_TIMEOUT_S = 10.0


class NetnsError(RuntimeError):
    pass


def ip(*args: str) -> str:
    """Run one ``ip`` command; its stdout, or NetnsError with its stderr."""
    try:
        done = subprocess.run(
            ["ip", *args], capture_output=True, text=True, timeout=_IP_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise NetnsError(f"ip {' '.join(args)}: {error}") from error
    if done.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)}: {done.stderr.strip() or done.returncode}")
    return done.stdout


@dataclass
class NetnsLink:
    """One agent host: a namespace and the veth pair that joins it to the orchestrator."""

    name: str
    host_if: str
    agent_if: str
    host_addr: str
    agent_addr: str
    is_up: bool = True

    def exec_prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.name]

    def down(self) -> None:
        ip("link", "set", self.host_if, "down")
        self.is_up = False

    def up(self) -> None:
        ip("link", "set", self.host_if, "up")
        self.is_up = True


def unavailable_reason() -> str | None:
    """Why network namespaces cannot be used here, or None when they can."""
    if not sys.platform.startswith("linux"):
        return "network namespaces need Linux"
    if shutil.which("ip") is None:
        return "iproute2 is not installed (the `ip` command); apt-get install iproute2"
    if os.geteuid() != 0:
        return "creating network namespaces (`ip netns add`) needs root"
    remove_stale()
    probe = NetnsPool(count=1, tag="probe")
    try:
        probe.create()
    except NetnsError as error:
        return f"network namespaces are not permitted here: {error}"
    finally:
        probe.close()
    return None


def remove_stale() -> None:
    """Remove namespaces left by chaos runs whose process is gone."""
    try:
        listing = ip("netns", "list")
    except NetnsError:
        return
    for line in listing.splitlines():
        name = line.split()[0] if line.split() else ""
        match = re.fullmatch(rf"{PREFIX}(\d+)-\w+", name)
        if match and not _pid_alive(int(match.group(1))):
            with contextlib.suppress(NetnsError):
                ip("netns", "delete", name)


@dataclass
class NetnsPool:
    """``count`` agent hosts; ``close()`` removes everything ``create()`` made, even half."""

    count: int
    tag: str = "a"
    links: list[NetnsLink] = field(default_factory=list)
    _made: list[tuple[str, str]] = field(default_factory=list)  # (kind, name)

    def create(self) -> list[NetnsLink]:
        atexit.register(self.close)
        subnet = _free_subnet()
        pid = os.getpid()
        for index in range(self.count):
            link = NetnsLink(
                name=f"{PREFIX}{pid}-{self.tag}{index}",
                host_if=f"tfc{pid % 100000}{self.tag[0]}{index}h",
                agent_if=f"tfc{pid % 100000}{self.tag[0]}{index}a",
                host_addr=f"10.200.{subnet}.{4 * index + 1}",
                agent_addr=f"10.200.{subnet}.{4 * index + 2}",
            )
            self._build(link)
            self.links.append(link)
        return self.links

    def _build(self, link: NetnsLink) -> None:
        ip("netns", "add", link.name)
        self._made.append(("netns", link.name))
        ip("link", "add", link.host_if, "type", "veth", "peer", "name", link.agent_if)
        self._made.append(("link", link.host_if))
        ip("link", "set", link.agent_if, "netns", link.name)
        ip("addr", "add", f"{link.host_addr}/30", "dev", link.host_if)
        ip("link", "set", link.host_if, "up")
        inside = ["netns", "exec", link.name, "ip"]
        ip(*inside, "addr", "add", f"{link.agent_addr}/30", "dev", link.agent_if)
        ip(*inside, "link", "set", link.agent_if, "up")
        ip(*inside, "link", "set", "lo", "up")

    def close(self) -> None:
        # Deleting either end of a veth pair deletes both; the namespace goes last.
        for kind, name in reversed(self._made):
            with contextlib.suppress(NetnsError):
                if kind == "link":
                    ip("link", "delete", name)
                else:
                    ip("netns", "delete", name)
        self._made.clear()
        self.links.clear()
        atexit.unregister(self.close)


def _free_subnet() -> int:
    """An X of 10.200.X.0/24 that no interface here uses yet."""
    used = set(re.findall(r"10\.200\.(\d+)\.", ip("-o", "-4", "addr", "show")))
    start = os.getpid() % 200 + 20
    for offset in range(230):
        candidate = (start + offset) % 250 + 1
        if str(candidate) not in used:
            return candidate
    raise NetnsError("no free 10.200.X.0/24 subnet for the chaos test's links")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
