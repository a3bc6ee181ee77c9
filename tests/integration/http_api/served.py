"""A gateway's HTTP API served from a snapshot cluster, and its fixtures (shared by the HTTP API,
hardening and broker fidelity tests)."""

from __future__ import annotations

import json
import ssl
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from pulsar_lookup_gateway.http_api.app import build_app
from pulsar_lookup_gateway.http_api.server import HttpServer
from pulsar_lookup_gateway.http_api.settings import HttpSettings
from pulsar_lookup_gateway.listeners.endpoints.addresses import Endpoint, Scheme
from pulsar_lookup_gateway.listeners.endpoints.socket_table import SocketSpec
from pulsar_lookup_gateway.metadata_store.file import FileSource
from pulsar_lookup_gateway.metadata_store.synthetic import (
    broker_id,
    cluster,
    topic_in_range,
)
from pulsar_lookup_gateway.serving.service import LookupService

NS = "public/default"


OWNED_BUNDLE = "0x00000000_0x40000000"  # owned by broker 1


OWNED_TOPIC = topic_in_range(0x00000000, 0x40000000).rsplit("/", 1)[1]


UNOWNED_LOW, UNOWNED_HIGH = 0x80000000, 0xC0000000
UNOWNED_TOPIC = topic_in_range(UNOWNED_LOW, UNOWNED_HIGH).rsplit("/", 1)[1]


LOOKUP = "/lookup/v2/topic/persistent/public/default"


def zone_listener(i: int) -> dict[str, str]:
    return {
        "brokerServiceUrl": f"pulsar://zone.b{i}:6650",
        "brokerHttpUrl": f"http://zone.b{i}:8080",
    }


def gateway_cluster(**kwargs: Any) -> dict[str, Any]:
    """metadata_store.synthetic's cluster, each broker also advertising a third listener, 'zone'."""
    owned = {OWNED_BUNDLE: 1, "0x40000000_0x80000000": 2}
    nodes = cluster(3, owned, **kwargs)
    for i in (1, 2, 3):
        nodes[f"/loadbalance/brokers/{broker_id(i)}"]["advertisedListeners"]["zone"] = (
            zone_listener(i)
        )
    for bundle, i in owned.items():
        nodes[f"/namespace/{NS}/{bundle}"]["advertisedListeners"]["zone"] = zone_listener(i)
    nodes[f"/admin/partitioned-topics/{NS}/persistent/orders"] = {"partitions": 4}
    nodes[f"/managed-ledgers/{NS}/persistent/plain"] = {}  # a topic that exists
    return nodes


@asynccontextmanager
async def file_service(
    tmp_path: Path, nodes: dict[str, Any], **kwargs: Any
) -> AsyncIterator[LookupService]:
    path = tmp_path / f"snapshot-{uuid.uuid4().hex[:8]}.json"
    path.write_text(json.dumps(nodes))
    source = FileSource(path, poll_interval=60)
    await source.start()
    try:
        yield LookupService(source, internal_listener="internal", **kwargs)
    finally:
        await source.close()


@asynccontextmanager
async def serving(
    service: LookupService,
    listener: str | None = None,
    *,
    ssl_context: ssl.SSLContext | None = None,
    table: list[dict[str, object]] | None = None,
) -> AsyncIterator[HttpServer]:
    scheme = Scheme.HTTPS if ssl_context is not None else Scheme.HTTP
    spec = SocketSpec(Endpoint(scheme, "127.0.0.1", 0), listener, "test socket")
    app = build_app(service, HttpSettings(listener, listener_table=lambda: table or []))
    server = HttpServer(spec, app, ssl_context)
    await server.start()
    try:
        yield server
    finally:
        await server.stop(5)
