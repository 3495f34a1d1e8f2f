"""Failed sign-ins per client address: a bound on guessing, and one audit event a window.

Before this, anyone who could reach the port could try 700 API tokens or 2,500 worker
tokens a second, and each wrong one was written twice (an audit row and a JSON line):
gigabytes an hour of someone else's disk (issue 23). Now each client address has a window
(``--auth-failure-window`` seconds, opened by its first failure) and a budget of failures in it
(``--auth-failures-per-window``). Past the budget a credential is refused with 429 before it
is looked up, unless it authenticated lately: the good clients behind the same address
(a NAT, a shared CI runner) keep working while their neighbour is throttled; other
addresses never notice. Tokens are 32 random bytes, so the bound is about the work and
the disk a guesser costs, not about the odds of guessing.

What the audit gets: the window's first failure of each credential kind (worker, API,
upload token) at once, as before (a typo is seen at once, reason and all; a failed
registration is still its own ``worker.register_failed``), and when the window closes,
if more came, one event that sums the window up (``auth.failed_window``: counts, first
and last time, the credential kinds, the first few reasons and targets). A window
closes at its end (a timer), when its address tries again after the end, when it is
evicted to make room, and at shutdown: no failure goes unrecorded.

Worker tokens are resolved in memory, so a known worker token passes even a throttled
address (auth.authenticate_worker): a worker behind a guesser's NAT keeps its place,
even after a restart. Lookups still in flight count against the budget as if they had
failed (``lookup``), so a client with many concurrent requests cannot overshoot it once
its address has failed: only the burst that is already in flight at its very first
failure can, because a new address is never refused before it has failed.

Memory is bounded: at most ``max_addresses`` windows (the oldest closes to make room) and
``good_kept`` recently good credential hashes (least recently used forgotten).
"""

from __future__ import annotations

import functools
import ipaddress
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from aiohttp import web

from tunefleet.actors.clock import Clock, Timer

MAX_TRACKED_ADDRESSES = 10_000
GOOD_CREDENTIALS_KEPT = 16_384
# What a window's summary keeps of what was tried: enough to tell a typo from a scan.
REASONS_KEPT = 5
TARGETS_KEPT = 3
_TEXT_KEPT = 160


@functools.lru_cache(maxsize=4096)
def client_key(remote: str | None) -> str:
    """The address a client is counted under: an IPv4 address as it is, an IPv6 one by its
    /64 (one host or site holds a whole /64, so one address each would be no bound)."""
    if not remote:
        return "-"  # a Unix socket: its clients share one budget
    if ":" not in remote:
        return remote
    try:
        address = ipaddress.IPv6Address(remote.split("%", 1)[0])
    except ValueError:
        return remote
    mapped = address.ipv4_mapped
    if mapped is not None:
        return str(mapped)
    return str(ipaddress.IPv6Network((address, 64), strict=False))


@dataclass(slots=True)
class FailureWindow:
    """One address's failures since its window opened."""

    address: str
    closes_at: float  # on the clock's monotonic scale
    first_at: float  # wall time
    last_at: float
    window_s: float
    failures: int = 0  # credentials looked up and refused (401)
    throttled: int = 0  # refused unchecked (429)
    recorded: int = 0  # of the failures, recorded one by one (the first of each kind)
    credentials: list[str] = field(default_factory=list)
    refused_kinds: list[str] = field(default_factory=list)  # each recorded on its own once
    reasons: list[str] = field(default_factory=list)
    targets: list[str] = field(default_factory=list)

    @property
    def attempts(self) -> int:
        return self.failures + self.throttled

    @property
    def unrecorded(self) -> int:
        return self.attempts - self.recorded

    def note(self, kind: str, reason: str | None, target: str, at: float) -> None:
        self.last_at = at
        if kind not in self.credentials:
            self.credentials.append(kind)
        _keep(self.reasons, reason, REASONS_KEPT)
        _keep(self.targets, target, TARGETS_KEPT)


def _keep(kept: list[str], text: str | None, most: int) -> None:
    if text is None or len(kept) >= most:
        return
    text = text[:_TEXT_KEPT]
    if text not in kept:
        kept.append(text)


WindowClosed = Callable[[FailureWindow], None]


class AuthThrottle:
    """The windows of failing addresses and the credentials that authenticated lately."""

    def __init__(
        self,
        failures_per_window: int,
        window_s: float,
        clock: Clock,
        on_closed: WindowClosed | None = None,
        *,
        max_addresses: int = MAX_TRACKED_ADDRESSES,
        good_kept: int = GOOD_CREDENTIALS_KEPT,
    ) -> None:
        self.failures_per_window = failures_per_window  # 0: count and sum up, never refuse
        self.window_s = window_s
        self.on_closed = on_closed
        self._clock = clock
        self._max_addresses = max_addresses
        self._good_kept = good_kept
        # Oldest window first: windows open in time order and all last window_s, so the
        # first one is also the first to close.
        self._windows: OrderedDict[str, FailureWindow] = OrderedDict()
        self._good: OrderedDict[str, None] = OrderedDict()
        self._timer: Timer | None = None
        # Credential lookups under way, per address: each may yet fail.
        self._in_flight: dict[str, int] = {}

    @property
    def quiet(self) -> bool:
        """No address has failed lately: every credential may be looked up, so a request
        need not work out its client's address to ask ``wait_s``."""
        return not self._windows

    def wait_s(self, address: str, credential_hash: str | None) -> float:
        """0 when the credential may be looked up; otherwise the seconds until the address
        may try again (then ``refused_unchecked``)."""
        window = self._windows.get(address)
        if window is None:  # the common case: an address that has not failed lately
            return 0.0
        now = self._clock.monotonic()
        if now >= window.closes_at:
            self._close(address)
            return 0.0
        budget = self.failures_per_window
        if not budget or window.failures + self._in_flight.get(address, 0) < budget:
            return 0.0
        if credential_hash is not None and credential_hash in self._good:
            return 0.0
        return window.closes_at - now

    def lookup(self, address: str) -> _Lookup:
        """Around a credential's lookup once ``wait_s`` let it through: while it runs it
        counts against its address's budget."""
        return _Lookup(self._in_flight, address)

    def refused_unchecked(self, address: str, kind: str, target: str) -> None:
        """Count a 429 in the address's window (which ``wait_s`` found open)."""
        window = self._windows.get(address)
        if window is not None:
            window.throttled += 1
            window.note(kind, None, target, self._clock.time())

    def failed(
        self, address: str, kind: str, reason: str, target: str, credential_hash: str | None
    ) -> bool:
        """Count a refused credential; True when it is the window's first of its kind
        (worker, API, upload token), and so is to be recorded on its own: the rest are
        summed up when the window closes."""
        if credential_hash is not None:
            self._good.pop(credential_hash, None)  # revoked since: no longer a way past
        now = self._clock.monotonic()
        window = self._windows.get(address)
        if window is not None and now >= window.closes_at:
            self._close(address)
            window = None
        if window is None:
            at = self._clock.time()
            window = FailureWindow(address, now + self.window_s, at, at, self.window_s)
            self._windows[address] = window
            if len(self._windows) > self._max_addresses:
                self._close(next(iter(self._windows)))
            self._arm()
        first_of_kind = kind not in window.refused_kinds
        window.failures += 1
        window.note(kind, reason, target, self._clock.time())
        if first_of_kind:
            window.recorded += 1
            window.refused_kinds.append(kind)
        return first_of_kind

    def succeeded(self, credential_hash: str) -> None:
        """A credential that authenticated: it passes while its address is throttled."""
        good = self._good
        if credential_hash in good:
            good.move_to_end(credential_hash)
            return
        good[credential_hash] = None
        if len(good) > self._good_kept:
            good.popitem(last=False)

    def close(self) -> None:
        """Close every window (the server is stopping)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        while self._windows:
            self._close(next(iter(self._windows)))

    def window_of(self, address: str) -> FailureWindow | None:
        return self._windows.get(address)

    def __len__(self) -> int:
        return len(self._windows)

    # --- closing windows ----------------------------------------------------------------

    def _close(self, address: str) -> None:
        window = self._windows.pop(address)
        if window.unrecorded and self.on_closed is not None:
            self.on_closed(window)

    def _arm(self) -> None:
        if self._timer is not None or not self._windows:
            return
        first = next(iter(self._windows.values()))
        self._timer = self._clock.call_at(first.closes_at, self._sweep)

    def _sweep(self) -> None:
        self._timer = None
        now = self._clock.monotonic()
        while self._windows:
            address, window = next(iter(self._windows.items()))
            if window.closes_at > now:
                break
            self._close(address)
        self._arm()


class _Lookup:
    """``AuthThrottle.lookup``'s context: a plain class, as every authenticated API
    request enters one (a generator-based context manager costs several calls more)."""

    __slots__ = ("_address", "_in_flight")

    def __init__(self, in_flight: dict[str, int], address: str) -> None:
        self._in_flight = in_flight
        self._address = address

    def __enter__(self) -> None:
        in_flight, address = self._in_flight, self._address
        in_flight[address] = in_flight.get(address, 0) + 1

    def __exit__(self, *_exc: object) -> None:
        in_flight, address = self._in_flight, self._address
        left = in_flight[address] - 1
        if left:
            in_flight[address] = left
        else:
            del in_flight[address]


AUTH_THROTTLE_KEY: web.AppKey[AuthThrottle] = web.AppKey("tunefleet_auth_throttle")


def throttle_of(request: web.Request) -> AuthThrottle | None:
    throttle = request.app.get(AUTH_THROTTLE_KEY)
    if throttle is None:
        throttle = request.config_dict.get(AUTH_THROTTLE_KEY)
    return throttle
