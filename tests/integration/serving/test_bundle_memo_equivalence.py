"""Cold LOOKUPs answered by their bundle, and warm ones by their bytes (kept through the writes
that cannot change them), equal the per-lookup path byte for byte: a storm of distinct topics
over two namespaces, sent to a socket with the memos and to one without, both on one ZooKeeper
source, with ownership changes, unloads, a broker moving its address, a load report and a split
in the middle (each written to a real ZooKeeper and awaited in the view before the next batch,
so that both sockets answer from the same view)."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import pytest
from kazoo.client import KazooClient

from pulsar_lookup_gateway.listeners.binary import BinaryServer, BinarySettings
from pulsar_lookup_gateway.listeners.endpoints.addresses import Endpoint, Scheme
from pulsar_lookup_gateway.listeners.endpoints.socket_table import SocketSpec
from pulsar_lookup_gateway.listeners.protocol import codec
from pulsar_lookup_gateway.lookup.bundles import NamespaceBundles
from pulsar_lookup_gateway.lookup.errors import NodeNotLoaded
from pulsar_lookup_gateway.metadata_store.admin import seed
from pulsar_lookup_gateway.metadata_store.embedded_zookeeper import EmbeddedZooKeeper
from pulsar_lookup_gateway.metadata_store.synthetic import broker_id, broker_node, ownership_node
from pulsar_lookup_gateway.metadata_store.url import parse_metadata_url
from pulsar_lookup_gateway.metadata_store.zookeeper import ZooKeeperSource
from pulsar_lookup_gateway.serving.service import LookupService
from tests.integration.serving.raw_conversation import Conversation

HOST = "127.0.0.1"
WAIT = 10.0
BUNDLES = NamespaceBundles.equal(8)
NAMES = BUNDLES.names()
NAMESPACES = ("storm/a", "storm/b")
LISTENER_NAMES = (None, None, None, "internal", "external", "nope")


def cluster() -> dict[str, Any]:
    nodes: dict[str, Any] = {
        f"/loadbalance/brokers/{broker_id(i)}": broker_node(i, usage=0.1 * i) for i in (1, 2, 3)
    }
    nodes["/loadbalance/leader"] = {"brokerId": broker_id(1)}
    boundaries = [f"0x{b:08x}" for b in BUNDLES.boundaries]
    for n, namespace in enumerate(NAMESPACES):
        nodes[f"/admin/policies/{namespace}"] = {
            "bundles": {"boundaries": boundaries, "numBundles": len(NAMES)}
        }
        for j, name in enumerate(NAMES[:-2]):  # the last two bundles are nobody's
            nodes[f"/namespace/{namespace}/{name}"] = ownership_node((n + j) % 3 + 1)
    return nodes


def random_topic(rng: random.Random) -> str:
    namespace = rng.choice((*NAMESPACES, *NAMESPACES, "storm/missing"))
    domain = rng.choice(("persistent", "persistent", "non-persistent"))
    local = rng.choice(
        (
            f"t{rng.randrange(10**9)}",
            f"t{rng.randrange(10**6)}-partition-{rng.randrange(8)}",
            f"t{rng.randrange(10**6)}-ünï",
            "..",
            "",
            f"a/b{rng.randrange(100)}",
            "long-" * rng.choice((30, 819, 820)),  # two-byte lengths; past 4096 bytes
        )
    )
    if rng.random() < 0.05:
        return local or "short"  # a short name: the full path
    return f"{domain}://{namespace}/{local}"


def requests(rng: random.Random, count: int) -> list[bytes]:
    return [
        codec.lookup(
            random_topic(rng),
            rng.randrange(1, 2**40),
            authoritative=rng.random() < 0.2,
            advertised_listener_name=rng.choice(LISTENER_NAMES),
        )
        for _ in range(count)
    ]


#: Writes made between batches: (what, ZooKeeper operation, path, content; None: deleted).
Change = tuple[str, str, str, Any]
#: The changes that leave most answers memoised by their bytes (one bundle, or nothing a lookup
#: reads of the brokers).
KEEPING = ("another owner", "unloading", "load report", "ledger roll", "partitioned topic")


def changes() -> list[Change]:
    a, b = NAMESPACES
    moved = broker_node(1, usage=0.9)  # the leader: unowned bundles are redirected to it
    moved["advertisedListeners"]["external"]["brokerServiceUrl"] = "pulsar://moved:6650"
    split = NamespaceBundles.equal(16)
    boundaries = [f"0x{x:08x}" for x in split.boundaries]
    brokers = "/loadbalance/brokers"
    return [
        ("another owner", "set", f"/namespace/{a}/{NAMES[0]}", ownership_node(3)),
        ("unloading", "set", f"/namespace/{b}/{NAMES[1]}", ownership_node(2, disabled=True)),
        ("released", "delete", f"/namespace/{a}/{NAMES[2]}", None),
        ("taken", "create", f"/namespace/{a}/{NAMES[-1]}", ownership_node(1)),
        ("load report", "set", f"{brokers}/{broker_id(1)}", broker_node(1, usage=0.9)),
        # (binary answers never read which topics exist)
        ("ledger roll", "create", f"/managed-ledgers/{a}/persistent/t1", {"ledgers": [1]}),
        (
            "partitioned topic",
            "create",
            f"/admin/partitioned-topics/{b}/persistent/p",
            {"partitions": 3},
        ),
        (
            "namespace policies",
            "set",
            f"/admin/policies/{a}",
            {
                "bundles": {"boundaries": [f"0x{x:08x}" for x in BUNDLES.boundaries]},
                "deleted": False,
            },
        ),
        (
            "tenant",
            "set",
            "/admin/policies/storm",
            {"adminRoles": ["admin"], "allowedClusters": []},
        ),
        ("broker moved", "set", f"{brokers}/{broker_id(1)}", moved),
        ("leader", "set", "/loadbalance/leader", {"brokerId": broker_id(3)}),
        ("split", "set", f"/admin/policies/{b}", {"bundles": {"boundaries": boundaries}}),
    ]


def apply(zk: KazooClient, operation: str, path: str, content: Any) -> None:
    if operation == "delete":
        zk.delete(path)
    elif operation == "create":
        zk.create(path, json.dumps(content).encode(), makepath=True)
    else:
        zk.set(path, json.dumps(content).encode())


async def shown(source: ZooKeeperSource, path: str, content: Any) -> None:
    """Wait until the view holds `content` at `path` (None: absent), reading a node it lists
    but has not read yet (a lookup would read it, suspended, and be answered out of order)."""
    for _ in range(int(WAIT / 0.01)):
        try:
            now = source.view.raw(path)
        except NodeNotLoaded:
            await source.fetch(path)
            continue
        # (an ownership node counts where its namespace's children list names it, or not)
        owner = path.startswith("/namespace/")
        if now == content and (not owner or source.view.listed(path) == (content is not None)):
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"the view never showed the write to {path}")


@pytest.mark.parametrize("seed_value", [1, 2])
async def test_bundle_answers_equal_full_answers_through_ownership_changes(
    zookeeper: EmbeddedZooKeeper, zk_chroot: str, zk_admin: KazooClient, seed_value: int
) -> None:
    seed(zk_admin, cluster())
    url = parse_metadata_url(f"zk:{zookeeper.connect_string}{zk_chroot}")
    source = ZooKeeperSource(url)
    await source.start()
    service = LookupService(source, internal_listener="internal")
    servers = []
    for memoise in (True, False):
        spec = SocketSpec(Endpoint(Scheme.PULSAR, HOST, 0), "external", "bundle memo test")
        server = BinaryServer(
            spec, service, BinarySettings(keep_alive_interval=0, memoise_lookups=memoise)
        )
        await server.start()
        servers.append(server)
    memoised, plain = [await Conversation.open(s.port) for s in servers]
    lookups = servers[0].handlers.lookups
    exact, cold = lookups.tables(servers[0].socket_choice)
    rng = random.Random(seed_value)
    try:
        # every node the storm reads is loaded once (ZooKeeper reads suspend a lookup, and a
        # suspended lookup may be answered out of order)
        warm = requests(random.Random(0), 300)
        for conversation in (plain, memoised):
            for frame in warm:
                await conversation.ask([frame])
        # topics never asked about, in bundles whose answer is known: no full path for them
        # (a full-path answer is kept in the service's table of the memo; a bundle answer is
        # not, and is copied into the socket's table of exact requests instead)
        cached, memoised_before = service.answers_kept, len(exact)
        fresh = [codec.lookup(f"persistent://{NAMESPACES[0]}/fresh-{i}", i) for i in range(300)]
        answers = await memoised.ask(fresh)
        full_path = service.answers_kept - cached
        assert answers == await plain.ask(fresh)
        assert cold.prefixes()
        assert full_path < 30, "the bundle answers were not used"
        assert len(exact) - memoised_before >= 270, "bundle answers are not memoised by request"
        asked = [*warm, *fresh]
        for label, operation, path, content in changes():
            held = dict(exact)
            apply(zk_admin, operation, path, content)
            await shown(source, path, content)
            # requests asked before (their answers memoised by their bytes, kept through the
            # writes that cannot change them), then new ones
            again = rng.sample(asked, 400)
            with_memo, without = await memoised.ask(again), await plain.ask(again)
            assert with_memo == without, f"{label} (asked again)"
            if label in KEEPING:  # (an answer made again would be another object)
                kept = sum(exact.get(key) is answer for key, answer in held.items())
                assert kept > len(held) // 2, f"{label} dropped the memo's answers"
            for _ in range(3):
                frames = requests(rng, 200)
                with_memo, without = await memoised.ask(frames), await plain.ask(frames)
                assert with_memo == without, label
                asked += frames
    finally:
        for conversation in (memoised, plain):
            conversation.writer.close()
        for server in servers:
            await server.stop(timeout=5)
        await source.close()
