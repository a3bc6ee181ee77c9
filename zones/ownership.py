"""Who owns each bundle, for one listener: the rows of the `pulsar-ownership` data source.

One row per (namespace, bundle) of a snapshot: the owner's broker id (null when nobody owns the
bundle; a bundle being unloaded keeps it until the unload is done), its URLs for the listener as
a lookup naming that listener answers them (null where the owner lacks the listener, the bundle
is being unloaded, or nobody owns it), and the generation: the ZooKeeper zxid of
the ownership node's last change (mzxid; for the extensible load manager, its service-unit-state
node), read in the same pass as the node, so that owner and generation agree. A snapshot file
holds no zxids: the generation is null then.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pulsar_lookup_gateway.lookup.errors import LookupFailure
from pulsar_lookup_gateway.lookup.model import (
    NAMESPACE_ROOT,
    SERVICE_UNIT_STATE_ROOT,
    ServiceUnitState,
    ownership_path,
    service_unit_state_path,
)
from pulsar_lookup_gateway.lookup.resolve import ResolvePolicy, ResponseKind, resolve
from pulsar_lookup_gateway.lookup.topics import NamespaceName, TopicDomain
from pulsar_lookup_gateway.lookup.view import ClusterView
from pulsar_lookup_gateway.metadata_store.url import MetadataUrl
from pulsar_lookup_gateway.zones.answer_table import namespaces_of, representative
from pulsar_lookup_gateway.zones.pairs import Zone

#: The rows' columns and Spark types, in order.
OWNERSHIP_SCHEMA = (
    "namespace STRING, bundle STRING, owner STRING, brokerUrl STRING, brokerUrlTls STRING, "
    "httpUrl STRING, httpUrlTls STRING, generation BIGINT"
)
#: Ownership reads in flight at once.
_BATCH = 2000
_OWNERSHIP_ROOTS = (NAMESPACE_ROOT + "/", SERVICE_UNIT_STATE_ROOT + "/")


@dataclass(frozen=True, slots=True)
class Snapshot:
    nodes: dict[str, Any]
    #: znode path -> mzxid of the ownership nodes (empty for a snapshot file)
    zxids: dict[str, int]


def take_snapshot(url: MetadataUrl) -> Snapshot:
    """One snapshot: the file, or a dump of ZooKeeper whose ownership nodes are read again
    with their stat (data and zxid from the same read; a node gone meanwhile is left out)."""
    from pulsar_lookup_gateway.metadata_store.snapshot import read_nodes

    if url.kind == "file":
        return Snapshot(read_nodes(url), {})
    from kazoo.exceptions import NoNodeError

    from pulsar_lookup_gateway.metadata_store.admin import CONNECT_TIMEOUT, connected, dump

    with connected(url.connect_string, connect_timeout=CONNECT_TIMEOUT) as client:
        nodes = dump(client)
        paths = [p for p in nodes if p.startswith(_OWNERSHIP_ROOTS)]
        zxids: dict[str, int] = {}
        for start in range(0, len(paths), _BATCH):
            reads = [(p, client.get_async(p)) for p in paths[start : start + _BATCH]]
            for path, result in reads:
                try:
                    data, stat = result.get()
                except NoNodeError:
                    nodes.pop(path, None)
                    continue
                try:
                    nodes[path] = json.loads(data) if data else None
                except (UnicodeDecodeError, json.JSONDecodeError):
                    continue  # as dump: the lookup core reports it as malformed
                zxids[path] = stat.mzxid
    return Snapshot(nodes, zxids)


def ownership_rows(snapshot: Snapshot, listener: str) -> Iterator[tuple[Any, ...]]:
    """The rows of OWNERSHIP_SCHEMA, namespaces and bundles in order."""
    view = ClusterView.from_snapshot(snapshot.nodes)
    choice = Zone("ownership", listener).choice
    extensible = view.broker_registry().extensible
    for namespace in namespaces_of(snapshot.nodes):
        try:
            bundles = view.bundles(namespace)
        except LookupFailure:
            continue  # malformed bundle data: no bundles to list
        if bundles is None:
            continue
        for bundle in bundles.ranges:
            if extensible:
                path = service_unit_state_path(namespace, bundle.name)
            else:
                path = ownership_path(namespace, bundle.name)
            owner, urls = _owner(view, namespace, bundle.lower, bundle.name, choice, extensible)
            yield (
                str(namespace),
                bundle.name,
                owner,
                *(urls or (None, None, None, None)),
                snapshot.zxids.get(path) if path in snapshot.nodes else None,
            )


def _owner(
    view: ClusterView,
    namespace: NamespaceName,
    lower: int,
    bundle_name: str,
    choice: Any,
    extensible: bool,
) -> tuple[str | None, tuple[str | None, ...] | None]:
    """(owner, its four URLs for the listener) by the lookup core's own resolve() of a topic
    of the bundle; an owner whose answer fails (unloading, lacking the listener, a deleted
    namespace) keeps its id, without URLs. A bundle being unloaded keeps its owner until the
    unload is done: the broker of a disabled ownership node, or under the extensible load
    manager the source broker of a Releasing bundle (whose lookups already go to the
    destination, or wait for a new owner)."""
    if extensible and view.uses_table_view():
        try:
            state = view.service_unit_state(namespace, bundle_name)
        except LookupFailure:  # a malformed state node
            return None, None
        if state is not None and state.state is ServiceUnitState.RELEASING:
            return state.source_broker or None, None
    topic = representative(namespace, TopicDomain.PERSISTENT, lower)
    try:
        answer = resolve(topic, choice, view, ResolvePolicy())
    except LookupFailure:
        if extensible:
            return None, None
        try:
            ownership = view.ownership(namespace, bundle_name)
        except LookupFailure:  # a malformed ownership node
            return None, None
        return (ownership.broker_id if ownership is not None else None), None
    if answer.response is not ResponseKind.CONNECT:
        return None, None  # nobody owns it (a redirect names a broker that would take it)
    urls = answer.urls
    return answer.broker_id, (urls.service_url, urls.service_url_tls, urls.http_url,
                              urls.http_url_tls)  # fmt: skip
