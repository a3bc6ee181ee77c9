"""A watch stream's requests: the JSON text frames a client sends (`subscribe`, `unsubscribe`,
`update_token`), checked and acted on for one stream (http_api.watch's `_Stream`, which sends
and closes). A malformed request closes the stream with 1008, too many topics with 4008, a
token that does not authenticate (or is another role's) with 4001; an invalid topic name is an
error for that name, the stream stays open.
"""

from __future__ import annotations

import json
from typing import Protocol

from pulsar_lookup_gateway.http_api.watch_stream import StreamState
from pulsar_lookup_gateway.listeners.auth import AuthenticationFailed, Credentials, Identity
from pulsar_lookup_gateway.listeners.routing import Route
from pulsar_lookup_gateway.lookup.errors import LookupFailure
from pulsar_lookup_gateway.lookup.ownership_changes import ErrorCode
from pulsar_lookup_gateway.lookup.topics import TopicName
from pulsar_lookup_gateway.lookup.untrusted import printable
from pulsar_lookup_gateway.serving.held_bytes import UNREAD, WATCH
from pulsar_lookup_gateway.serving.ownership_watch import OwnershipWatch

# Close codes (RFC 6455 leaves 4000-4999 to applications).
UNAUTHENTICATED = 4001
LIMIT_EXCEEDED = 4008
#: Invalid names of one subscribe told one by one; the rest are counted in one more error.
INVALID_TOLD = 16
#: What a watched topic holds besides its name, for each stream that watches it: the
#: watched-topic object, its slots in the index and the stream's set, its filing by the keys
#: that may change it, its shared state (measured in a child gateway: ~490 bytes a topic).
TOPIC_BYTES = 512


def topic_bytes(full: str) -> int:
    """What watching the topic `full` holds for a stream (its name's UTF-8 bytes)."""
    return (len(full) if full.isascii() else len(full.encode())) + TOPIC_BYTES


class Stream(Protocol):
    """What requests act on: the stream's topics, route and role, and its way to the client."""

    state: StreamState
    route: Route
    role: str | None

    @property
    def closing(self) -> bool: ...
    def deliver(self, topic: str, message: str) -> None: ...
    def deliver_many(self, messages: list[tuple[str, str]]) -> None: ...
    def watching(self, topic: str) -> None: ...
    def charge(self, size: int, pool: str = UNREAD) -> bool: ...
    def release(self, size: int, pool: str = UNREAD) -> None: ...
    def parsing(self) -> bool: ...
    def names_taken(self) -> None: ...
    def control(self, body: dict[str, object]) -> None: ...
    def reauthenticated(self, identity: Identity) -> None: ...
    async def fail(self, code: str, message: str, close_code: int) -> None: ...


class WatchRequests:
    def __init__(self, stream: Stream, hub: OwnershipWatch) -> None:
        self.stream = stream
        self.hub = hub

    async def handle(self, text: str) -> None:
        stream = self.stream
        await self.hub.turns.take()  # (its JSON parsed in its turn)
        if stream.closing or not stream.parsing():
            return
        try:
            request = json.loads(text)
        except ValueError:
            return await stream.fail("bad_request", "a request is a JSON object", 1008)
        kind = request.get("type") if isinstance(request, dict) else None
        if kind in ("subscribe", "unsubscribe"):
            topics = request.get("topics")
            if not isinstance(topics, list) or not all(isinstance(t, str) for t in topics):
                return await stream.fail(
                    "bad_request", f"{kind}: 'topics' is a list of topic names", 1008
                )
            if kind == "unsubscribe":
                return self._unsubscribe(topics)
            del topics  # (the names go on in the request alone: freed once taken in)
            return await self._subscribe(request)
        if kind == "update_token":
            token = request.get("token")
            if not isinstance(token, str):
                return await stream.fail("bad_request", "update_token: 'token' is a string", 1008)
            return await self._update_token(token)
        shown = printable(str(kind), 40) if isinstance(kind, str) else "none"
        await stream.fail(
            "bad_request",
            f"unknown request type '{shown}' (subscribe, unsubscribe, update_token)",
            1008,
        )

    async def _subscribe(self, request: dict[str, list[str]]) -> None:
        names = request.pop("topics")
        stream = self.stream
        state = stream.state
        limit = state.max_topics
        if len(names) > limit:  # (refused before any work per name)
            return await self._too_many(limit)
        topics: dict[str, TopicName] = {}
        invalid = 0
        untold: tuple[str, str] | None = None  # the first invalid name not told on its own
        turns = self.hub.turns
        for name in names:
            if not turns.more():  # (the rest in the stream's next turns)
                await turns.take()
                if stream.closing:
                    return
            try:
                topic = TopicName.parse(name)
            except LookupFailure as failure:
                invalid += 1
                if invalid <= INVALID_TOLD:
                    self._invalid(name, failure.message)
                elif untold is None:
                    untold = (name, failure.message)
                continue
            topics.setdefault(topic.full, topic)
        if untold is not None:
            name, message = untold
            more = invalid - INVALID_TOLD - 1
            if more:
                message += f"; and {more} more invalid names in this subscribe, not told one by one"
            self._invalid(name, message)
        if stream.closing:
            return
        if not state.room_for(topics):
            return await self._too_many(limit)
        # The names it will watch, charged to the budget's watch pool before the hub takes any
        # in (given back when unsubscribed or the stream closes): over it, the stream closes.
        new = sum(topic_bytes(full) for full in topics if full not in state.topics)
        if not stream.charge(new, WATCH):
            return
        # (the hub adds each to the stream's topics; topics watched already are told again:
        # one message per topic after a subscribe)
        waiting = await self.hub.subscribe(
            stream, topics.values(), stream.route.choice, stream.role
        )
        # The parsed names are dropped while the first answers are made: only the request's
        # text is held then (charged REQUEST_HOLDS x its text: the rest is given back).
        del names, topics
        stream.names_taken()
        await self.hub.first_answers(waiting)

    def _invalid(self, name: str, message: str) -> None:
        # (the name as given, cut short: an invalid name may be any size)
        self.stream.control(
            {"type": "error", "topic": printable(name), "code": ErrorCode.INVALID_TOPIC.value,
             "message": message}
        )  # fmt: skip

    async def _too_many(self, limit: int) -> None:
        await self.stream.fail(
            "limit_exceeded",
            f"a stream watches at most {limit} topics (watchMaxTopicsPerStream)",
            LIMIT_EXCEEDED,
        )

    def _unsubscribe(self, names: list[str]) -> None:
        stream = self.stream
        gone = []
        for name in names:
            try:
                full = TopicName.parse(name).full
            except LookupFailure:
                continue  # (never watched)
            if stream.state.remove(full):
                gone.append(full)
                stream.release(topic_bytes(full), WATCH)
        self.hub.unsubscribe(stream, gone, stream.route.choice, stream.role)

    async def _update_token(self, token: str) -> None:
        stream = self.stream
        guard = stream.route.guard
        if guard.required:
            try:
                identity = guard.authenticate(Credentials(data=token.encode("ascii", "replace")))
            except AuthenticationFailed as failed:
                return await stream.fail(
                    "unauthenticated", f"Unable to authenticate: {failed.reason}",
                    UNAUTHENTICATED,
                )  # fmt: skip
            if identity is None or identity.role != stream.role:
                # As Pulsar's brokers refresh credentials: the role may not change.
                return await stream.fail(
                    "unauthenticated", "the new token is for another role",
                    UNAUTHENTICATED,
                )  # fmt: skip
            stream.reauthenticated(identity)
        stream.control({"type": "update_token_response"})
