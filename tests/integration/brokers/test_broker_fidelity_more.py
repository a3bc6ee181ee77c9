"""More answers compared with the broker's (issue 27, item 7), through the gateway's real
sockets. Each test names the Pulsar source (master) its expectation comes from."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from pulsar_lookup_gateway.listeners.protocol import codec
from pulsar_lookup_gateway.listeners.protocol.codec import ServerError
from pulsar_lookup_gateway.listeners.protocol.pulsar_api_pb2 import CommandGetTopicsOfNamespace
from pulsar_lookup_gateway.lookup.resolve import ResolvePolicy
from tests.broker_peer import BrokerPeer
from tests.integration.http_api.listing_gateway import connected, gateway, http_get, nodes_with
from tests.integration.http_api.served import (
    NS,
    OWNED_TOPIC,
    file_service,
    gateway_cluster,
    serving,
)

ASKED = 40  # requests for the random choice of a peer host: each of 2 hosts is missed 2^-40


async def test_rest_schema_404_says_schema_not_found(tmp_path: Path) -> None:
    """SchemasResourceBase.convertToSchemaResponse: a schema that does not exist is
    RestException(404, "Schema not found"); the broker's binary GET_SCHEMA answers it with
    ServerCnx.handleGetSchema's TopicNotFound "Topic not found or no-schema <topic>", which
    the REST route must not pass on."""
    async with (
        BrokerPeer(name="broker") as peer,
        gateway(tmp_path, nodes_with(peer)) as (binary, http),
    ):
        latest = await http_get(http, "/admin/v2/schemas/public/default/none/schema")
        versioned = await http_get(http, "/admin/v2/schemas/public/default/none/schema/3")
        raw, _ = await connected(binary)
        async with raw:
            raw.send(codec.get_schema("persistent://public/default/none", 7))
            binary_answer = (await raw.expect()).getSchemaResponse
    assert latest == (404, {"reason": "Schema not found"})
    assert versioned == (404, {"reason": "Schema not found"})
    # The binary answer stays the broker's own.
    assert binary_answer.error_code == ServerError.TopicNotFound
    assert (
        binary_answer.error_message
        == "Topic not found or no-schema persistent://public/default/none"
    )


async def test_topic_list_properties_reach_the_broker_and_change_no_default_list(
    tmp_path: Path,
) -> None:
    """PIP-452 (pip/pip-452.md): CommandGetTopicsOfNamespace carries `repeated KeyValue
    properties = 6`, the client's context; the broker's listing (NamespaceService with
    PulsarResourcesExtended, whose default, DefaultPulsarResourcesExtended, ignores them) may
    list by them; CommandGetTopicsOfNamespaceResponse is unchanged. A listing the gateway
    forwards carries them to the broker; the persistent list answers as the default does."""
    properties = [("team", "payments"), ("region", "eu")]
    async with BrokerPeer(name="broker") as peer:
        peer.topics["public/default"] = ["non-persistent://public/default/np"]
        async with gateway(tmp_path, nodes_with(peer)) as (binary, _):
            raw, _ = await connected(binary)
            async with raw:
                answers = []
                for request_id, mode, props in [
                    (1, CommandGetTopicsOfNamespace.NON_PERSISTENT, properties),
                    (2, CommandGetTopicsOfNamespace.PERSISTENT, properties),
                    (3, CommandGetTopicsOfNamespace.PERSISTENT, []),
                ]:
                    raw.send(
                        codec.get_topics_of_namespace(
                            "public/default", request_id, mode, properties=props
                        )
                    )
                    answers.append((await raw.expect()).getTopicsOfNamespaceResponse)
    forwarded, with_props, without = answers
    assert list(forwarded.topics) == ["non-persistent://public/default/np"]
    (seen,) = [c for c in peer.seen if c.type_name == "GET_TOPICS_OF_NAMESPACE"]
    assert seen.properties == tuple(properties)
    assert list(with_props.topics) == list(without.topics) and with_props.topics
    assert (with_props.filtered, with_props.topics_hash) == (without.filtered, without.topics_hash)


def _geo_nodes(service_url: str) -> dict[str, Any]:
    nodes = gateway_cluster()
    nodes[f"/admin/policies/{NS}"] |= {"replication_clusters": ["east"]}
    nodes["/admin/clusters/west"] = {"serviceUrl": "http://west:8080", "peerClusterNames": ["east"]}
    nodes["/admin/clusters/east"] = {
        "serviceUrl": service_url,
        "brokerServiceUrl": "pulsar://e1.example.com:6650,e2.example.com:6650",
    }
    return nodes


async def test_peer_cluster_redirect_goes_to_one_of_its_hosts(tmp_path: Path) -> None:
    """PulsarWebResource.validateGlobalNamespaceOwnershipAsync redirects a namespace a peer
    cluster serves with getRedirectionUrl, which resolves ONE host of the peer's serviceUrl
    (PulsarServiceNameResolver over ServiceURI's host list, a random one per request; a host
    without a port gets the scheme's default) and keeps the request's path. The binary answer
    (TopicLookupBase.lookupTopicAsync) carries the peer's brokerServiceUrl as it is."""
    nodes = _geo_nodes("http://e1.example.com:8080,e2.example.com")
    policy = ResolvePolicy(cluster_name="west")
    async with (
        file_service(tmp_path, nodes, policy=policy) as service,
        serving(service) as server,
        aiohttp.ClientSession() as session,
    ):
        path = f"/lookup/v2/topic/persistent/{NS}/{OWNED_TOPIC}"
        authorities = set()
        for _ in range(ASKED):
            async with session.get(server.url + path, allow_redirects=False) as reply:
                assert reply.status == 307
                location = urlsplit(reply.headers["Location"])
                assert (location.scheme, location.path) == ("http", path)
                authorities.add(location.netloc)
    assert authorities == {"e1.example.com:8080", "e2.example.com:80"}
