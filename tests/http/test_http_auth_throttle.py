"""The failed sign-in throttle as a policy: windows per address, the credentials that pass
while their address is throttled, and the summaries it hands the audit log."""

from __future__ import annotations

import pytest

from tunefleet.actors.clock import FakeClock, FakeTimer, TimerCallback
from tunefleet.http.auth_throttle import AuthThrottle, FailureWindow, client_key

ATTACKER = "203.0.113.7"
NEIGHBOUR = "203.0.113.8"
TARGET = "GET /api/queue"


class Closed(list[FailureWindow]):
    def __call__(self, window: FailureWindow) -> None:
        self.append(window)


def make(
    limit: int = 3, window_s: float = 60.0, **kw: int
) -> tuple[AuthThrottle, FakeClock, Closed]:
    clock, closed = FakeClock(), Closed()
    return AuthThrottle(limit, window_s, clock, closed, **kw), clock, closed


def fail(throttle: AuthThrottle, address: str = ATTACKER, kind: str = "api", **kw: str) -> bool:
    reason = kw.get("reason", "unknown or revoked API token")
    return throttle.failed(address, kind, reason, kw.get("target", TARGET), kw.get("hash"))


def test_past_the_budget_an_unknown_credential_waits_out_the_window() -> None:
    throttle, _, _ = make(limit=3)
    for _ in range(3):
        assert throttle.wait_s(ATTACKER, "h_guess") == 0
        fail(throttle)
    assert throttle.wait_s(ATTACKER, "h_guess") == 60.0
    assert throttle.wait_s(ATTACKER, None) == 60.0  # no credential at all
    assert throttle.wait_s(NEIGHBOUR, "h_guess") == 0  # another address


async def test_the_wait_shrinks_and_ends_with_the_window() -> None:
    throttle, clock, _ = make(limit=1)
    fail(throttle)
    await clock.advance(45)
    assert throttle.wait_s(ATTACKER, "h_guess") == pytest.approx(15.0)
    await clock.advance(15)
    assert throttle.wait_s(ATTACKER, "h_guess") == 0


def test_a_credential_that_authenticated_passes_while_its_address_is_throttled() -> None:
    throttle, _, _ = make(limit=1)
    throttle.succeeded("h_good")
    fail(throttle)
    assert throttle.wait_s(ATTACKER, "h_good") == 0
    assert throttle.wait_s(ATTACKER, "h_other") > 0


def test_a_good_credential_that_fails_later_loses_its_pass() -> None:
    """Revoked since it last authenticated: no longer a way past the throttle."""
    throttle, _, _ = make(limit=1)
    throttle.succeeded("h_revoked")
    fail(throttle, hash="h_revoked")
    assert throttle.wait_s(ATTACKER, "h_revoked") > 0


def test_the_good_credentials_kept_are_bounded_least_recently_used_first() -> None:
    throttle, _, _ = make(limit=1, good_kept=2)
    throttle.succeeded("h_a")
    throttle.succeeded("h_b")
    throttle.succeeded("h_a")  # used again: now the most recent
    throttle.succeeded("h_c")  # forgets h_b
    fail(throttle)
    assert throttle.wait_s(ATTACKER, "h_a") == 0
    assert throttle.wait_s(ATTACKER, "h_c") == 0
    assert throttle.wait_s(ATTACKER, "h_b") > 0


def test_the_first_failure_of_each_kind_is_recorded_the_rest_summed_up() -> None:
    throttle, _, _ = make(limit=100)
    assert fail(throttle, kind="api") is True
    assert fail(throttle, kind="api") is False
    assert fail(throttle, kind="worker", target="POST /api/workers/register") is True
    assert fail(throttle, kind="worker") is False
    assert fail(throttle, NEIGHBOUR, kind="api") is True  # each address its own window
    window = throttle.window_of(ATTACKER)
    assert window is not None
    assert (window.failures, window.recorded, window.unrecorded) == (4, 2, 2)
    assert window.credentials == ["api", "worker"]
    assert window.targets == [TARGET, "POST /api/workers/register"]


async def test_a_window_is_summed_up_when_it_closes_by_its_timer() -> None:
    throttle, clock, closed = make(limit=2)
    for _ in range(5):
        if throttle.wait_s(ATTACKER, "h_guess") == 0:
            fail(throttle)
        else:
            throttle.refused_unchecked(ATTACKER, "api", TARGET)
    await clock.advance(59)
    assert closed == []
    await clock.advance(1)
    (window,) = closed
    assert (window.address, window.attempts, window.failures, window.throttled) == (
        ATTACKER,
        5,
        2,
        3,
    )
    assert window.unrecorded == 4
    assert window.first_at == clock.time() - 60
    assert len(throttle) == 0
    assert clock.pending_timers() == 0  # nothing left to wake for


async def test_a_lone_failure_needs_no_summary() -> None:
    throttle, clock, closed = make()
    fail(throttle)
    await clock.advance(60)
    assert closed == [] and len(throttle) == 0


class LateTimers(FakeClock):
    """Timers that never fire: a loop too busy to run them before the next request."""

    def call_at(self, when_monotonic: float, callback: TimerCallback) -> FakeTimer:
        timer = super().call_at(when_monotonic, callback)
        timer.cancel()
        return timer


async def test_a_window_past_its_end_closes_on_the_addresss_next_attempt() -> None:
    clock, closed = LateTimers(), Closed()
    throttle = AuthThrottle(1, 60.0, clock, closed)
    fail(throttle)
    fail(throttle)
    await clock.advance(61)
    assert throttle.wait_s(ATTACKER, "h_guess") == 0  # closed it
    assert [w.failures for w in closed] == [2]
    assert fail(throttle) is True  # a new window: recorded on its own again
    fail(throttle)
    await clock.advance(61)
    assert fail(throttle) is True
    assert [w.failures for w in closed] == [2, 2]


def test_close_sums_up_every_open_window() -> None:
    throttle, _, closed = make()
    fail(throttle)
    fail(throttle)
    fail(throttle, NEIGHBOUR)
    fail(throttle, NEIGHBOUR)
    throttle.close()
    assert sorted(w.address for w in closed) == [ATTACKER, NEIGHBOUR]
    assert len(throttle) == 0


def test_the_addresses_tracked_are_bounded_the_oldest_summed_up_first() -> None:
    throttle, _, closed = make(max_addresses=2)
    for address in ("198.51.100.1", "198.51.100.2", "198.51.100.3"):
        fail(throttle, address)
        fail(throttle, address)
    assert len(throttle) == 2
    assert [w.address for w in closed] == ["198.51.100.1"]


def test_a_zero_budget_never_refuses_but_still_sums_up() -> None:
    throttle, _, closed = make(limit=0)
    for _ in range(50):
        assert throttle.wait_s(ATTACKER, "h_guess") == 0
        fail(throttle)
    throttle.close()
    assert [w.failures for w in closed] == [50]


def test_what_a_summary_keeps_of_the_attempts_is_bounded() -> None:
    throttle, _, _ = make(limit=1000)
    for i in range(50):
        fail(throttle, reason=f"reason {i} " + "x" * 500, target=f"GET /api/{i}")
    window = throttle.window_of(ATTACKER)
    assert window is not None
    assert len(window.reasons) == 5 and len(window.targets) == 3
    assert all(len(text) <= 160 for text in window.reasons)


@pytest.mark.parametrize(
    ("remote", "key"),
    [
        ("192.0.2.1", "192.0.2.1"),
        ("2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64"),
        ("2001:db8:1:2:bbbb::9", "2001:db8:1:2::/64"),  # the same /64: one budget
        ("2001:db8:1:3::1", "2001:db8:1:3::/64"),
        ("::ffff:192.0.2.1", "192.0.2.1"),  # an IPv4 client on a dual-stack socket
        ("fe80::1%eth0", "fe80::/64"),
        (None, "-"),  # a Unix socket
    ],
)
def test_clients_are_counted_by_address_and_ipv6_by_its_64(remote: str | None, key: str) -> None:
    assert client_key(remote) == key


def test_lookups_in_flight_count_against_the_budget_until_they_end() -> None:
    throttle, _, _ = make(limit=3)
    fail(throttle)  # the window is open: 2 more may be looked up
    with throttle.lookup(ATTACKER), throttle.lookup(ATTACKER):
        assert throttle.wait_s(ATTACKER, "h_guess") > 0  # 1 failed + 2 under way
        assert throttle.wait_s(NEIGHBOUR, "h_guess") == 0
    assert throttle.wait_s(ATTACKER, "h_guess") == 0  # both ended without failing


def test_a_new_address_is_never_refused_for_lookups_alone() -> None:
    """A CI runner's burst of first requests with a good token has failed nothing."""
    throttle, _, _ = make(limit=1)
    with throttle.lookup(ATTACKER), throttle.lookup(ATTACKER):
        assert throttle.wait_s(ATTACKER, "h_new") == 0


async def test_quiet_until_an_address_fails_and_again_once_its_window_closed() -> None:
    """``quiet`` lets a request skip working out its address: it must be False whenever
    any window is open, or a throttled address would be let through."""
    throttle, clock, _ = make(limit=1, window_s=60.0)
    assert throttle.quiet
    fail(throttle)
    assert not throttle.quiet
    assert throttle.wait_s(ATTACKER, "h_guess") > 0
    await clock.advance(60.0)  # its timer closes the window
    assert throttle.quiet


def test_a_lookup_that_raises_stops_counting() -> None:
    throttle, _, _ = make(limit=2)
    fail(throttle)
    with pytest.raises(RuntimeError), throttle.lookup(ATTACKER):
        assert throttle.wait_s(ATTACKER, "h_guess") > 0  # 1 failed + 1 under way
        raise RuntimeError("the lookup failed")
    assert throttle.wait_s(ATTACKER, "h_guess") == 0
