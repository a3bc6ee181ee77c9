"""Forwarded answers whose size is not known yet (brokers.answer_sizes) on real sockets: a
test peer as the broker, the link in this process with a byte budget of its own."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from pulsar_lookup_gateway.brokers.answers import BrokerSchema
from pulsar_lookup_gateway.brokers.link import BrokerLink, LinkSettings
from pulsar_lookup_gateway.listeners.protocol.codec import Schema
from pulsar_lookup_gateway.lookup.errors import FailureKind, LookupFailure
from pulsar_lookup_gateway.metadata_store.file import FileSource
from pulsar_lookup_gateway.metadata_store.snapshot import write_snapshot
from pulsar_lookup_gateway.metadata_store.synthetic import broker_node
from pulsar_lookup_gateway.serving.held_bytes import MIB, HeldBytes
from pulsar_lookup_gateway.serving.service import LookupService
from tests.broker_peer import BrokerPeer

TOPIC = "persistent://public/default/big"


async def _link(tmp_path: Path, url: str, held: HeldBytes) -> tuple[BrokerLink, FileSource]:
    node = broker_node(1)
    node["advertisedListeners"] = {"internal": {"brokerServiceUrl": url}}
    write_snapshot(tmp_path / "cluster.json", {"/loadbalance/brokers/b1:8080": node})
    source = FileSource(tmp_path / "cluster.json", poll_interval=60)
    await source.start()
    service = LookupService(source, internal_listener="internal")
    settings = LinkSettings(internal_listener="internal", request_timeout=5.0)
    return BrokerLink(service, settings, held=held), source


async def test_an_answer_too_big_for_any_client_is_weighed_and_not_asked_again(
    tmp_path: Path,
) -> None:
    """The first answer is dropped as it is read (over the client's bound); what it weighed is
    remembered all the same, so the next client is refused before the broker is asked (before,
    every request had the broker send its megabytes again, to be dropped)."""
    held = HeldBytes(per_owner=1 * MIB)
    async with BrokerPeer() as peer:
        peer.schemas[TOPIC] = Schema(
            name="public/default/big", schema_data=b"x" * (2 * MIB), type=Schema.STRING
        )
        link, source = await _link(tmp_path, peer.url, held)
        try:
            for owner in ("first", "second", "third"):
                hold = held.hold(owner)
                with pytest.raises(LookupFailure) as refused:
                    await link.schema(TOPIC, hold=hold)
                hold.release()
                assert refused.value.kind is FailureKind.TOO_MANY_REQUESTS
        finally:
            await link.close()
            await source.close()
    assert peer.topics_seen("GET_SCHEMA") == [TOPIC]  # the first only
    assert held.held == 0


async def test_clients_that_waited_for_the_weight_each_ask_for_their_own_answer(
    tmp_path: Path,
) -> None:
    """Ten clients at once for a schema never asked: one asks, the others wait for its weight;
    then each asks for itself (the budget holds them all), in a request of its own: an answer
    is never handed to a client the broker did not give it to."""
    held = HeldBytes()
    async with BrokerPeer() as peer:
        peer.schemas[TOPIC] = Schema(
            name="public/default/big", schema_data=b"x" * MIB, type=Schema.STRING
        )
        link, source = await _link(tmp_path, peer.url, held)
        try:
            holds = [held.hold(n) for n in range(10)]
            answers = await asyncio.gather(*(link.schema(TOPIC, hold=hold) for hold in holds))
            for hold in holds:
                hold.release()
        finally:
            await link.close()
            await source.close()
    assert all(isinstance(a, BrokerSchema) and len(a.data) == MIB for a in answers)
    assert len(peer.topics_seen("GET_SCHEMA")) == 10  # each its own answer (no sharing)
    request_ids = [c.request_id for c in peer.seen if c.type_name == "GET_SCHEMA"]
    assert len(set(request_ids)) == 10
