"""TEST PEERS: a cluster of brokers that each have ONE bind address and several advertised
listeners, as most Pulsar brokers are set up. Never part of the product.

Such a broker answers a LOOKUP with the URL of the listener the LOOKUP names, and with its
internal listener's when it names none (what the Java and C++ clients send after a Redirect:
only their own configured listener name, usually none). Each broker here is a BrokerPeer on its
internal address (the gateway's broker link reaches it there) whose LOOKUP answers are made by
the cluster: Connect with its own URL for the listener when it owns the topic, else an
authoritative Redirect to the owner's URL for that listener (the modular leader sending a client
to the broker it picked; under the extensible load manager, any broker sending it to the owner).
Its external address is another BrokerPeer answering LOOKUPs alike, which records which
client reached it there (the address a NAT or an ingress maps to the same socket).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pulsar_lookup_gateway.listeners.protocol import codec
from pulsar_lookup_gateway.listeners.protocol.pulsar_api_pb2 import CommandLookupTopicResponse
from pulsar_lookup_gateway.metadata_store.synthetic import cluster
from tests.broker_peer import BrokerPeer

MODULAR = "org.apache.pulsar.broker.loadbalance.impl.ModularLoadManagerImpl"
EXTENSIBLE = "org.apache.pulsar.broker.loadbalance.extensions.ExtensibleLoadManagerImpl"
INTERNAL_HOST = "127.0.0.1"
EXTERNAL_HOST = "127.0.0.2"


@dataclass
class OneBindBroker:
    number: int
    bind: BrokerPeer  # its one socket: the internal listener's address
    external: BrokerPeer  # where its external listener's address leads (records arrivals)

    @property
    def broker_id(self) -> str:
        return f"b{self.number}:8080"

    def url(self, listener: str) -> str | None:
        """Its binary URL for `listener` ("" or "internal": its one bind address)."""
        if listener in ("", "internal"):
            return self.bind.url
        if listener == "external":
            return self.external.url
        return None

    def lookups(self) -> list[tuple[str, str, bool, tuple[tuple[str, str], ...]]]:
        """(topic, listener name, authoritative, properties) of the LOOKUPs it was sent."""
        return [
            (c.topic or "", c.listener_name or "", bool(c.authoritative), c.properties)
            for c in self.bind.seen
            if c.type_name == "LOOKUP"
        ]


@dataclass
class OneBindCluster:
    """Brokers b1..bN; `owners`: topic -> the number of the broker that owns (or, asked, takes)
    it; a topic not in it goes to `assignee`."""

    count: int = 2
    load_manager: str = MODULAR
    leader: int = 2
    assignee: int = 1
    owners: dict[str, int] = field(default_factory=dict)
    brokers: list[OneBindBroker] = field(default_factory=list)

    def broker(self, number: int) -> OneBindBroker:
        return self.brokers[number - 1]

    def owner_of(self, topic: str) -> int:
        return self.owners.get(topic, self.assignee)

    def _answer(self, number: int, lookup: Any) -> bytes:
        listener = lookup.advertised_listener_name
        owner = self.owner_of(lookup.topic)
        url = self.broker(owner).url(listener)
        if url is None:
            return codec.lookup_response(
                lookup.request_id,
                response=CommandLookupTopicResponse.Failed,
                error=codec.ServerError.ServiceNotReady,
                message=f"the broker do not have {listener} listener",
            )
        kind = CommandLookupTopicResponse.Connect if owner == number else None
        return codec.lookup_response(
            lookup.request_id,
            response=kind if kind is not None else CommandLookupTopicResponse.Redirect,
            broker_url=url,
            authoritative=True,
        )

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[OneBindCluster]:
        async with contextlib.AsyncExitStack() as stack:
            for number in range(1, self.count + 1):
                bind = BrokerPeer(INTERNAL_HOST, name=f"b{number}-bind")
                bind.answer_lookup = lambda lookup, n=number: self._answer(n, lookup)
                external = BrokerPeer(EXTERNAL_HOST, name=f"b{number}-external")
                # (the same broker behind its external address: it answers alike)
                external.answer_lookup = bind.answer_lookup
                await stack.enter_async_context(bind)
                await stack.enter_async_context(external)
                self.brokers.append(OneBindBroker(number, bind, external))
            yield self

    def snapshot(self, *, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        """The metadata: the brokers' registrations (both listeners, each broker's default URL
        its bind address), the namespace's policies, the leader; no bundle owned."""
        extensible = self.load_manager == EXTENSIBLE
        nodes = cluster(brokers=self.count, owned={}, leader=None if extensible else self.leader)
        for broker in self.brokers:
            nodes[f"/loadbalance/brokers/{broker.broker_id}"] = {
                "webServiceUrl": f"http://{INTERNAL_HOST}:1",
                "pulsarServiceUrl": broker.bind.url,
                "advertisedListeners": {
                    "internal": {"brokerServiceUrl": broker.bind.url},
                    "external": {
                        "brokerServiceUrl": broker.external.url,
                        "brokerHttpUrl": f"http://{EXTERNAL_HOST}:1",
                    },
                },
                "loadManagerClassName": self.load_manager,
            }
        if extensible:
            leader = self.broker(self.leader)
            nodes["/loadbalance/extension/leader"] = {
                "brokerId": leader.broker_id,
                "serviceUrl": f"http://{INTERNAL_HOST}:1",
            }
        nodes.update(extra or {})
        return nodes

    def write(self, path: Path, **options: Any) -> Path:
        path.write_text(json.dumps(self.snapshot(**options)))
        return path

    def reached(self) -> dict[str, list[str]]:
        """Who reached which address: peer name -> the topics produced there."""
        out: dict[str, list[str]] = {}
        for broker in self.brokers:
            for peer in (broker.bind, broker.external):
                if peer.producer_topics():
                    out[peer.name] = peer.producer_topics()
        return out


def gateway_conf(snapshot: Path, *, extra: str = "") -> str:
    """A gateway with an internal and an external socket (binary and HTTP each), the external
    ones on the external host: a client's listener is chosen by the socket it came to."""
    return (
        f"metadataStoreUrl=file:{snapshot}\n"
        "advertisedListeners=internal:pulsar://127.0.0.1:16650,"
        "internal:http://127.0.0.1:18080,external:pulsar://127.0.0.2:16650,"
        "external:http://127.0.0.2:18080\n"
        "internalListenerName=internal\n"
        "bindAddresses=internal:pulsar://127.0.0.1:0,internal:http://127.0.0.1:0,"
        "external:pulsar://127.0.0.2:0,external:http://127.0.0.2:0\n"
        "brokerServicePort=\nwebServicePort=\n" + extra
    )
