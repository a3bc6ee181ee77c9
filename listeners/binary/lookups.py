"""LOOKUP: the full path through the lookup service, and the answers kept in the process's
answer memo (serving.memo, the service's).

A LOOKUP the socket has answered before with the same bytes (but for its request id), or one
of a bundle it has answered before (by bundle), is answered from the memo's tables of the
socket's listener choice (read at the byte level by listeners.protocol.lookup_frames) while the
service's admission has room (where it has none, the full path refuses it), and counted in the
service's tallies; anything else goes through LookupService.lookup(), whose answer is kept under
the request's key (a value handed from the frame reader to `lookup`)."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from time import perf_counter
from typing import Any

from pulsar_lookup_gateway.listeners.binary.bundles_ahead import BundlesAhead
from pulsar_lookup_gateway.listeners.binary.replies import SERVICE_NOT_READY, lookup_failed
from pulsar_lookup_gateway.listeners.binary.requests import RequestRunner
from pulsar_lookup_gateway.listeners.binary.session import Memo, Session
from pulsar_lookup_gateway.listeners.protocol import codec
from pulsar_lookup_gateway.listeners.protocol.codec import LookupType
from pulsar_lookup_gateway.listeners.protocol.lookup_frames import (
    AnswerFrames,
    AnswerTemplate,
    answer_run,
    split_lookup,
    topic_and_tail,
)
from pulsar_lookup_gateway.listeners.protocol.pulsar_api_pb2 import CommandLookupTopic
from pulsar_lookup_gateway.listeners.routing import Facts, Proof, Refusal, Route, Router
from pulsar_lookup_gateway.lookup.errors import LookupFailure, NodeNotLoaded
from pulsar_lookup_gateway.lookup.resolve import LookupAnswer, ResponseKind
from pulsar_lookup_gateway.lookup.selection import ListenerChoice
from pulsar_lookup_gateway.serving.memo import BundleAnswers, Place, SocketTables, place_of
from pulsar_lookup_gateway.serving.metrics import LookupTally
from pulsar_lookup_gateway.serving.service import LookupService

log = logging.getLogger(__package__)


def answer_may_be_shared(route: Route, session: Session) -> bool:
    """Whether the answer for `route` may be given from the memo to every session that shares
    this one's table: the session's own route (they all proved what it needs), or a named
    listener that needs no credentials and no client certificate (a session that proved
    neither would otherwise get from the memo what decide() refuses it)."""
    guard = route.guard
    return route is session.route or (not guard.required and guard.certificate_of is None)


def no_binary_url(answer: LookupAnswer) -> str | None:
    """Why a binary LOOKUP cannot be answered with `answer` (ServiceNotReady), or None: its
    owner advertises neither URL a binary client connects to."""
    urls = answer.urls
    if urls.service_url is None and urls.service_url_tls is None:
        return (
            "the topic's owner advertises no pulsar:// or pulsar+ssl:// URL for the "
            f"{answer.listener.name} listener"
        )
    return None


class Lookups:
    """The LOOKUPs of every connection of one socket."""

    def __init__(self, service: LookupService, router: Router) -> None:
        self._service = service
        self._admission = service.admission
        self._router = router
        self._frames = AnswerFrames()
        # The process's answer memo (the service's): this socket's tables in it, per choice.
        self.memo = service.memo
        self._tables = SocketTables(service.memo)
        # A namespace's other bundles, answered ahead once one of its bundles was.
        self.ahead = BundlesAhead(service, self._value)

    def tables(self, choice: ListenerChoice) -> tuple[Memo, BundleAnswers]:
        """The memo tables of this socket's unauthenticated connections of `choice`: warm
        LOOKUPs by their bytes, and cold ones by their bundle."""
        return self._tables.table(choice), self._tables.cold_table(choice)

    def close(self) -> None:
        """Give back what this socket's tables hold (the socket is closed)."""
        self.ahead.close()
        self._tables.release()

    # -- the full path ------------------------------------------------------------------

    def lookup(
        self,
        session: Session,
        body: CommandLookupTopic,
        runner: RequestRunner,
        out: list[bytes],
        memo_key: bytes | None = None,
    ) -> None:
        """`memo_key`: the request's key in the session's memo table, when its answer may be
        kept there (lookup_frames.split_lookup of a canonical request)."""
        route = session.route
        # "" when absent (the C++ and Go clients always send the field): the common case.
        if body.advertised_listener_name:
            # (what its CONNECT proved: a named listener may demand more)
            proof = Proof(session.identity, session.ssl_object)
            facts = Facts(
                route,
                "binary",
                session.origin,
                explicit=body.advertised_listener_name,
                topic=body.topic,
                proof=proof,
            )
            decided = self._router.decide(facts)
            if isinstance(decided, Refusal):
                out.append(lookup_failed(body.request_id, decided.failure))
                return
            route = decided
        frame = self._frame(session, body, route, memo_key)
        runner.run(frame, body.request_id, lookup_failed, out)

    async def _frame(
        self, session: Session, body: CommandLookupTopic, route: Route, memo_key: bytes | None
    ) -> bytes:
        """The LOOKUP_RESPONSE: the service's answer (kept under `memo_key` if given), or
        ServiceNotReady where the owner advertises no binary URL for the listener."""
        answer = await self._service.lookup(
            body.topic,
            route.choice,
            "binary",
            role=session.role,
            client=session.origin,
            properties=[(item.key, item.value) for item in body.properties],
            principal=session.principal,
        )
        unanswerable = no_binary_url(answer)
        if unanswerable is not None:
            return codec.lookup_response(
                body.request_id,
                response=LookupType.Failed,
                error=SERVICE_NOT_READY,
                message=unanswerable,
            )
        if (
            memo_key is not None
            and session.memo is not None
            and not answer.forwarded  # (kept apart: serving.forwarded_lookups)
            and answer_may_be_shared(route, session)
        ):
            self._remember(session, session.memo, memo_key, answer)
        return self._frames.frame(body.request_id, answer)

    def _remember(self, session: Session, memo: Memo, key: bytes, answer: LookupAnswer) -> None:
        """Keep the answer the full path just gave to the request whose key is `key`, with the
        tally it counts in; and keep it for the topic's bundle where every topic of that bundle
        gets the same answer. The answer was read from the current view (the service's last
        read of it was synchronous, and nothing awaited since), so it is kept as of now."""
        value = self._value(answer)
        place = value[2]
        self.memo.follow(self._service.source.view)  # (settles what lookups read of brokers)
        self.memo.remember(None, memo, key, value, place, len(key))
        if session.bundles is not None:
            self._remember_bundle(session.bundles, key, answer, value)

    def _value(
        self, answer: LookupAnswer
    ) -> tuple[AnswerTemplate, tuple[LookupTally, bool], Place]:
        """What the memo keeps of an answer: its frame's template, the tally it counts in and
        the place it is filed under."""
        tally = self._service.tally_for(answer.listener, "binary")
        connect = answer.response is ResponseKind.CONNECT
        place = place_of(str(answer.topic.namespace_name), answer.bundle.lower)
        return (self._frames.template(answer), (tally, connect), place)

    def _remember_bundle(
        self, bundles: BundleAnswers, key: bytes, answer: LookupAnswer, value: object
    ) -> None:
        """Keep `value` for the answer's bundle if the request named its topic in full form
        (then the cold table's mapping of the bytes to the bundle is the full path's) and the
        namespace is not deleted (there, system topics alone are answered)."""
        split = topic_and_tail(key)
        topic = answer.topic
        if split is None or split[0] != topic.full.encode() or not split[0].isascii():
            return
        view = self._service.source.view
        try:
            policies = view.policies(topic.namespace_name)
            boundaries = view.bundles(topic.namespace_name)
        except (LookupFailure, NodeNotLoaded):
            return
        if policies is None or policies.deleted or boundaries is None:
            return
        bundles.remember(split[0], split[1], boundaries.boundaries, answer.bundle.lower, value)
        self.ahead.ask(bundles, topic, split[1], answer.listener)

    # -- the memo of warm answers --------------------------------------------------------

    def usable_memo(self, session: Session) -> Memo | None:
        """The session's memo table, when its answers are what the full path would give for
        this batch of frames: what the view's writes since the last batch may have changed is
        dropped (the view changes only between batches, by ZooKeeper's callbacks), and answered
        lookups are not logged one by one."""
        memo = session.memo
        if memo is None:
            return None
        self.memo.follow(self._service.source.view)
        return None if self._service.logs_each_answer else memo

    def answer_read(
        self,
        data: bytes,
        memo: Memo,
        bundles: BundleAnswers | None,
        max_frame_size: int,
        out: list[bytes],
    ) -> int:
        """Answer the leading frames of a read that are memoised LOOKUPs straight from its
        bytes (the common case: the whole read); where they stop (the rest is for the frame
        decoder). Their time is taken once for the run and shared out among them."""
        if not self._admission.has_room():
            return 0  # the full path refuses lookups now
        hits: list[tuple[LookupTally, bool]] = []
        started = perf_counter()
        cold = self._promoting(memo, bundles) if bundles is not None else None
        pos = answer_run(data, 0, max_frame_size, memo, out, hits, cold)
        if hits:
            answered = len(hits)
            each = (perf_counter() - started) / answered
            first = hits[0]
            if hits.count(first) == answered:  # (the common case: one outcome for all)
                first[0].answered_together(answered, each, first[1])
            else:
                for (tally, connect), count in Counter(hits).items():
                    tally.answered_together(count, each, connect)
        return pos

    def _promoting(
        self, memo: Memo, bundles: BundleAnswers
    ) -> Callable[[bytes, bytes, bytes], Any]:
        """The cold answer to a LOOKUP the warm table lacks, kept by the request's own key too
        while the memo has room (the next time it is one dict read; the copy is filed under the
        same bundle, so a write drops it with the bundle's entry; a storm of distinct topics
        fills the memo once and pushes nothing out)."""
        entry_of, remember = bundles.entry, self.memo.remember_if_room

        def answer(key: bytes, topic: bytes, tail: bytes) -> Any:
            entry = entry_of(topic, tail)
            if entry is not None:
                remember(memo, key, entry, entry[2], len(key))
            return entry

        return answer

    def answer_body(
        self, body: bytes, memo: Memo, bundles: BundleAnswers | None, out: list[bytes]
    ) -> tuple[bool, bytes | None]:
        """Answer one frame's command body from the memo if it is a LOOKUP in the memo's shape
        and kept there: (True, None). Otherwise (False, its key, for `lookup` to keep the full
        path's answer under) for a LOOKUP in that shape, (False, None) for anything else."""
        split = split_lookup(body)
        if split is None:
            return False, None
        key = split[0]
        entry = memo.get(key)
        if entry is None and bundles is not None:
            cold = topic_and_tail(key)
            if cold is not None:
                entry = self._promoting(memo, bundles)(key, *cold)
        if entry is None:
            return False, key
        if not self._admission.has_room():
            return False, None  # (the full path refuses it)
        started = perf_counter()
        out.append(entry[0].frame(split[1]))
        tally, connect = entry[1]
        tally.answered(perf_counter() - started, connect)
        return True, None
