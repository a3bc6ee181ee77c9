"""The real `pulsar-client` wheel and a topic whose namespace does not exist (issue 27, item 2).

Master answers binary PARTITIONED_METADATA and LOOKUP for such a topic with TopicNotFound
(ServerCnx.handlePartitionMetadataRequest and TopicLookupBase.lookupTopicAsync map the 404
"Namespace not found" of PulsarWebResource.checkLocalOrGetPeerReplicationCluster), and the
C++ client under the wheel does not retry TopicNotFound: its RetryableOperation retries only
a retryable result (ClientConnection maps ServiceNotReady and TooManyRequests to one), so the
producer fails with the error itself, not with a timeout after its operation timeout.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pulsar
import pytest

from pulsar_lookup_gateway.listeners.binary import BinaryServer, BinarySettings
from pulsar_lookup_gateway.listeners.endpoints.addresses import Endpoint, Scheme
from pulsar_lookup_gateway.listeners.endpoints.socket_table import SocketSpec
from pulsar_lookup_gateway.metadata_store.file import FileSource
from pulsar_lookup_gateway.metadata_store.snapshot import write_snapshot
from pulsar_lookup_gateway.metadata_store.synthetic import cluster
from pulsar_lookup_gateway.serving.service import LookupService
from tests.broker_peer import BrokerPeer
from tests.e2e.clients import in_thread, partitions, produce

pytestmark = pytest.mark.e2e

GHOST = "persistent://ghost/nowhere/orders"  # tenant and namespace have no policies
# Long enough that a client retrying until its operation timeout would fail with Timeout.
LONG_TIMEOUT = 30


@contextlib.asynccontextmanager
async def gateway(tmp_path: Path) -> AsyncIterator[tuple[str, BrokerPeer]]:
    async with BrokerPeer("127.0.0.1", name="broker") as peer:
        nodes = cluster(brokers=1, owned={"0x00000000_0x40000000": 1})
        nodes["/loadbalance/brokers/b1:8080"]["advertisedListeners"] = {
            "internal": {"brokerServiceUrl": peer.url}
        }
        path = tmp_path / "cluster.json"
        write_snapshot(path, nodes)
        source = FileSource(path, poll_interval=60)
        await source.start()
        service = LookupService(source, internal_listener="internal")
        settings = BinarySettings(keep_alive_interval=0, handshake_timeout=10)
        spec = SocketSpec(Endpoint(Scheme.PULSAR, "127.0.0.1", 0), "internal", "binary")
        server = BinaryServer(spec, service, settings)
        await server.start()
        try:
            yield server.url, peer
        finally:
            await server.stop(timeout=5)
            await source.close()


async def test_a_producer_in_a_missing_namespace_fails_with_topic_not_found(
    tmp_path: Path,
) -> None:
    """create_producer asks PARTITIONED_METADATA first: TopicNotFound ends it with the
    client's TopicNotFound (not BrokerMetadataError, what MetadataError gave, nor Timeout,
    what retrying until the operation timeout would give), and no broker is reached."""
    async with gateway(tmp_path) as (url, peer):
        with pytest.raises(pulsar.TopicNotFound):
            await in_thread(produce, url, GHOST, timeout=LONG_TIMEOUT)
        with pytest.raises(pulsar.TopicNotFound):
            await in_thread(partitions, url, GHOST)
        assert not peer.seen
