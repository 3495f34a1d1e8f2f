"""The long-lived responses people and scripts hold open, by whose credential opened them.

A credential checked once when a stream opens would otherwise keep it open for as long as
the client likes: an API token revoked while its ``/api/events`` feed or a job's
``/logs?follow=true`` is open went on receiving events and log lines (issue 23). So each
such response is held here under its owners, and revoking (or narrowing) a credential
ends every stream held under it, at once: the handler stops before its next write.

Owners are ``(kind, id)`` pairs so that more than one thing can own a stream: the API
token (``("api_token", "7")``) and the user it acts for (``("user", "3")``, by the
user's id), so disabling a user, lowering their role or taking them out of a team ends
every stream any of their tokens holds (http/routes_users.py).

Narrowing a token's permissions (no route does it yet) should ``end`` its owner too, even
where the narrower token could still open the stream: what a stream sends was decided
from the permissions it opened with (``/api/events`` leaves worker events out without
admin.workers), so the client reconnects and the one place that decides, the route's
authorization, decides again.

A stream can open while its credential is being revoked: authenticated just before the
revoke committed, registered just after the revoke looked for streams to end. Each
request notes the registry's ``mark`` before its credential is looked up; ``hold`` ends at
once a stream whose owner was ended after that mark.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from tunefleet.http.auth import ApiPrincipal

StreamOwner = tuple[str, str]

# Ended owners remembered for the race above; one that was forgotten (this many ends
# later) is treated as ended, which only costs the stream a reconnect.
_ENDED_KEPT = 4096


def api_token_owner(token_id: str) -> StreamOwner:
    return ("api_token", str(token_id))


def user_owner(user_id: int | str) -> StreamOwner:
    return ("user", str(user_id))


def owners_of(principal: ApiPrincipal) -> tuple[StreamOwner, ...]:
    """Whose streams a principal's are: ended when any of these is (its token; its user,
    when it acts for one)."""
    token = api_token_owner(principal.token_id)
    if principal.user_id is None:
        return (token,)
    return (token, user_owner(principal.user_id))


class HeldStream:
    """One open response: ended once any of its owners is (then it sends nothing more)."""

    __slots__ = ("_wake", "ended", "owners")

    def __init__(self, owners: tuple[StreamOwner, ...], wake: Callable[[], None]) -> None:
        self.owners = owners
        self.ended = False
        self._wake = wake

    def end(self) -> None:
        if not self.ended:
            self.ended = True
            self._wake()  # the handler may be waiting for its next event: wake it now


class PrincipalStreams:
    """The open streams by owner, and which owners were ended lately."""

    def __init__(self, ended_kept: int = _ENDED_KEPT) -> None:
        self._held: dict[StreamOwner, set[HeldStream]] = {}
        self._generation = 0
        self._ended: OrderedDict[StreamOwner, int] = OrderedDict()
        self._ended_kept = ended_kept
        self._forgotten_before = 0  # ends up to this generation are no longer known

    def mark(self) -> int:
        """Note this before looking a credential up; hand it to ``hold``."""
        return self._generation

    @contextmanager
    def hold(
        self, owners: Iterable[StreamOwner], mark: int, wake: Callable[[], None]
    ) -> Iterator[HeldStream]:
        """Hold a stream while the block runs; ``wake`` is called (once) if it is ended."""
        stream = HeldStream(tuple(owners), wake)
        for owner in stream.owners:
            self._held.setdefault(owner, set()).add(stream)
        if self._ended_since(stream.owners, mark):
            stream.end()
        try:
            yield stream
        finally:
            for owner in stream.owners:
                streams = self._held.get(owner)
                if streams is not None:
                    streams.discard(stream)
                    if not streams:
                        del self._held[owner]

    def end(self, owner: StreamOwner) -> int:
        """End every stream ``owner`` holds (its credential was revoked or narrowed, its
        user disabled); how many were open."""
        self._generation += 1
        self._ended[owner] = self._generation
        self._ended.move_to_end(owner)
        while len(self._ended) > self._ended_kept:
            _, generation = self._ended.popitem(last=False)
            self._forgotten_before = generation
        streams = self._held.pop(owner, set())
        for stream in streams:
            stream.end()
        return len(streams)

    def held_by(self, owner: StreamOwner) -> int:
        return len(self._held.get(owner, ()))

    def __len__(self) -> int:
        return len({stream for streams in self._held.values() for stream in streams})

    def _ended_since(self, owners: tuple[StreamOwner, ...], mark: int) -> bool:
        if mark < self._forgotten_before:
            return True  # cannot tell: end it, and the client reconnects
        return any(self._ended.get(owner, 0) > mark for owner in owners)


PRINCIPAL_STREAMS_KEY: web.AppKey[PrincipalStreams] = web.AppKey("tunefleet_principal_streams")
STREAM_MARK_KEY = web.RequestKey("tunefleet_stream_mark", int)


def principal_streams(request: web.Request) -> PrincipalStreams | None:
    streams = request.app.get(PRINCIPAL_STREAMS_KEY)
    if streams is None:
        streams = request.config_dict.get(PRINCIPAL_STREAMS_KEY)
    return streams


@contextmanager
def held_stream(
    request: web.Request, principal: ApiPrincipal, wake: Callable[[], None]
) -> Iterator[HeldStream]:
    """Hold this request's stream under its principal's owners while the block runs (an
    app without the registry holds nothing: its streams are never ended from outside)."""
    streams = principal_streams(request)
    owners = owners_of(principal)
    if streams is None:
        yield HeldStream(owners, wake)
        return
    with streams.hold(owners, request.get(STREAM_MARK_KEY, streams.mark()), wake) as stream:
        yield stream
