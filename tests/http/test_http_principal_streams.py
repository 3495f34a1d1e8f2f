"""The registry of open streams by owner: ending an owner ends its streams, and only its."""

from __future__ import annotations

from tunefleet.http.auth import ApiPrincipal
from tunefleet.http.principal_streams import (
    PrincipalStreams,
    api_token_owner,
    owners_of,
    user_owner,
)

ALICE = api_token_owner("1")
BOB = api_token_owner("2")


class Wakes:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


def test_ending_an_owner_ends_and_wakes_its_streams_only() -> None:
    streams = PrincipalStreams()
    alice_wakes, bob_wakes = Wakes(), Wakes()
    with (
        streams.hold([ALICE], streams.mark(), alice_wakes) as alices,
        streams.hold([ALICE], streams.mark(), alice_wakes) as alices_second,
        streams.hold([BOB], streams.mark(), bob_wakes) as bobs,
    ):
        assert len(streams) == 3
        assert streams.end(ALICE) == 2
        assert (alices.ended, alices_second.ended, bobs.ended) == (True, True, False)
        assert (alice_wakes.count, bob_wakes.count) == (2, 0)
        assert streams.end(ALICE) == 0  # ending again: nothing open, no second wake
        assert alice_wakes.count == 2
    assert len(streams) == 0
    assert streams.held_by(BOB) == 0


def test_a_stream_closed_by_its_client_is_forgotten() -> None:
    streams = PrincipalStreams()
    with streams.hold([ALICE], streams.mark(), Wakes()):
        assert streams.held_by(ALICE) == 1
    assert streams.held_by(ALICE) == 0
    assert streams.end(ALICE) == 0


def test_a_stream_owned_twice_ends_when_either_owner_does() -> None:
    """Room for a user owning tokens: a stream held under both ends with either."""
    streams = PrincipalStreams()
    user = ("user", "u_1")
    wakes = Wakes()
    with streams.hold([ALICE, user], streams.mark(), wakes) as stream:
        assert streams.end(user) == 1
        assert stream.ended and wakes.count == 1
    assert streams.held_by(ALICE) == 0


def test_a_stream_opening_during_its_revoke_is_ended_at_once() -> None:
    """Authenticated before the revoke committed, held after it looked for streams: the
    mark taken before the lookup tells."""
    streams = PrincipalStreams()
    mark = streams.mark()  # the request looks its token up...
    streams.end(ALICE)  # ...the revoke commits and ends what is open (nothing yet)...
    wakes = Wakes()
    with streams.hold([ALICE], mark, wakes) as late:  # ...and the stream opens
        assert late.ended and wakes.count == 1
    with streams.hold([BOB], mark, Wakes()) as other:
        assert not other.ended
    with streams.hold([ALICE], streams.mark(), Wakes()) as after:  # a later lookup would
        assert not after.ended  # have refused a revoked token: this one is a new grant


def test_a_forgotten_end_errs_on_ending_the_stream() -> None:
    streams = PrincipalStreams(ended_kept=2)
    mark = streams.mark()
    for token_id in ("10", "11", "12"):  # ALICE's end is not among them...
        streams.end(api_token_owner(token_id))
    with streams.hold([ALICE], mark, Wakes()) as stream:
        assert stream.ended  # ...but "10" was forgotten, so whether it was cannot be told
    with streams.hold([ALICE], streams.mark(), Wakes()) as fresh:
        assert not fresh.ended


def test_a_principals_streams_are_owned_by_its_token() -> None:
    principal = ApiPrincipal("7", "ci", frozenset({"queue.submit"}))
    assert owners_of(principal) == (api_token_owner("7"),) == (("api_token", "7"),)


def test_a_users_principals_streams_are_owned_by_the_token_and_the_user() -> None:
    principal = ApiPrincipal("7", "laptop", frozenset(), user="alice", user_id=3)
    assert owners_of(principal) == (("api_token", "7"), ("user", "3"))
    assert user_owner(3) == user_owner("3") == ("user", "3")
