"""Bundle answers made ahead (listeners.binary.bundles_ahead): before a binary socket accepts,
every owned bundle's answer for its listener and the common request shapes is made, so that a
topic of any bundle is answered without the full path; another request shape's answers are
made once one bundle of the namespace was answered in full. Byte for byte what a socket
without the memo answers."""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path
from typing import Any

from pulsar_lookup_gateway.listeners.binary import BinaryServer, BinarySettings
from pulsar_lookup_gateway.listeners.endpoints.addresses import Endpoint, Scheme
from pulsar_lookup_gateway.listeners.endpoints.socket_table import SocketSpec
from pulsar_lookup_gateway.listeners.protocol import codec
from pulsar_lookup_gateway.lookup.bundles import NamespaceBundles, topic_hash
from pulsar_lookup_gateway.metadata_store.file import FileSource
from pulsar_lookup_gateway.metadata_store.snapshot import write_snapshot
from pulsar_lookup_gateway.metadata_store.synthetic import broker_id, broker_node, ownership_node
from pulsar_lookup_gateway.serving.service import LookupService
from tests.waiting import eventually

HOST = "127.0.0.1"
BUNDLES = NamespaceBundles.equal(16)
NAMESPACES = ("ahead/a", "ahead/b")
UNOWNED = 2  # the last bundles of each namespace are nobody's (a full path each)


def nodes() -> dict[str, Any]:
    out: dict[str, Any] = {
        f"/loadbalance/brokers/{broker_id(i)}": broker_node(i, usage=0.1 * i) for i in (1, 2, 3)
    }
    out["/loadbalance/leader"] = {"brokerId": broker_id(1)}
    boundaries = [f"0x{b:08x}" for b in BUNDLES.boundaries]
    for n, namespace in enumerate(NAMESPACES):
        out[f"/admin/policies/{namespace}"] = {"bundles": {"boundaries": boundaries}}
        for j, name in enumerate(BUNDLES.names()[:-UNOWNED]):
            out[f"/namespace/{namespace}/{name}"] = ownership_node((n + j) % 3 + 1)
    return out


def one_topic_per_bundle(namespace: str, prefix: str) -> list[str]:
    found: dict[int, str] = {}
    for t in range(100_000):
        name = f"persistent://{namespace}/{prefix}{t}"
        found.setdefault(BUNDLES.ranges.index(BUNDLES.find(topic_hash(name))), name)
        if len(found) == len(BUNDLES.ranges):
            return [found[j] for j in sorted(found)]
    raise AssertionError("not every bundle found")


class Client:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> Client:
        reader, writer = await asyncio.open_connection(HOST, port)
        writer.write(codec.connect("ahead-test", 21))
        client = cls(reader, writer)
        await client.frame()  # CONNECTED
        return client

    async def frame(self) -> bytes:
        (size,) = struct.unpack(">I", await self.reader.readexactly(4))
        return await self.reader.readexactly(size)

    async def ask(self, frames: list[bytes]) -> list[bytes]:
        """One at a time: answers in order."""
        answers = []
        for frame in frames:
            self.writer.write(frame)
            answers.append(await self.frame())
        return answers


async def test_every_bundle_is_answered_ahead_as_the_full_path_answers(tmp_path: Path) -> None:
    snapshot = tmp_path / "cluster.json"
    write_snapshot(snapshot, nodes())
    source = FileSource(snapshot, poll_interval=3600)
    await source.start()
    service = LookupService(source, internal_listener="internal")
    servers = []
    for memoise in (True, False):
        spec = SocketSpec(Endpoint(Scheme.PULSAR, HOST, 0), "external", "ahead test")
        server = BinaryServer(
            spec, service, BinarySettings(keep_alive_interval=0, memoise_lookups=memoise)
        )
        await server.start()
        servers.append(server)
    ahead = servers[0].handlers.lookups.ahead
    owned = len(NAMESPACES) * (len(BUNDLES.ranges) - UNOWNED)
    assert ahead.made == owned  # before the socket accepted
    primed, plain = await Client.open(servers[0].port), await Client.open(servers[1].port)
    try:
        for authoritative in (False, True):
            topics = [t for ns in NAMESPACES for t in one_topic_per_bundle(ns, f"a{authoritative}")]
            frames = [
                codec.lookup(t, i + 1, authoritative=authoritative) for i, t in enumerate(topics)
            ]
            # (a full path's answer is kept in the service's table: the primed socket took it
            # for the unowned bundles alone)
            before = service.answers_kept
            answers = await primed.ask(frames)
            assert service.answers_kept - before == len(NAMESPACES) * UNOWNED
            assert answers == await plain.ask(frames)

        # Another request shape (a listener named): made ahead once one bundle was answered.
        named = [
            codec.lookup(t, i + 1, advertised_listener_name="external")
            for i, t in enumerate(one_topic_per_bundle(NAMESPACES[0], "named"))
        ]
        await primed.ask(named[:1])
        await eventually(lambda: _at_least(ahead, owned + len(BUNDLES.ranges) - UNOWNED - 1))
        before = service.answers_kept
        answers = await primed.ask(named[1:])
        assert service.answers_kept - before == UNOWNED
        assert answers == await plain.ask(named[1:])
    finally:
        for client in (primed, plain):
            client.writer.close()
        for server in servers:
            await server.stop(timeout=1)
        await source.close()


async def _at_least(ahead: Any, made: int) -> bool:
    return bool(ahead.made >= made)
