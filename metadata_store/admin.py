"""Short-lived ZooKeeper clients, and `seed` and `dump`: snapshots into and out of ZooKeeper,
in Pulsar's exact layout.

Blocking kazoo calls: for the command line and tests, never for the event loop. Requests are
pipelined (many in flight) so that 100,000 znodes take seconds, not minutes.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    ConnectionClosedError,
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    SessionExpiredError,
)
from kazoo.handlers.threading import AsyncResult, KazooTimeoutError

from pulsar_lookup_gateway.lookup.model import (
    BROKERS_ROOT,
    CLUSTERS_ROOT,
    LEADER_PATH,
    LOCAL_POLICIES_ROOT,
    NAMESPACE_ROOT,
    PARTITIONED_ROOT,
    POLICIES_ROOT,
    SERVICE_UNIT_STATE_ROOT,
)
from pulsar_lookup_gateway.lookup.topic_list import MANAGED_LEDGERS_ROOT
from pulsar_lookup_gateway.metadata_store.url import MetadataUrl

log = logging.getLogger(__name__)
_QUIET = logging.getLogger(f"{__name__}.kazoo")
_QUIET.setLevel(logging.ERROR)

# The subtrees the gateway reads; `dump` writes exactly these.
DUMP_ROOTS = (
    BROKERS_ROOT,
    LEADER_PATH,
    NAMESPACE_ROOT,
    POLICIES_ROOT,
    LOCAL_POLICIES_ROOT,
    PARTITIONED_ROOT,
    CLUSTERS_ROOT,
    SERVICE_UNIT_STATE_ROOT,
)
BATCH = 2000  # requests in flight at once
#: How long the command line waits for a first connection: a ZooKeeper that answers at all
#: answers within milliseconds, and an operator with a typo should not wait kazoo's 15 s.
CONNECT_TIMEOUT = 5.0
#: What a lost connection raises in the middle of seed or dump.
_CONNECTION_ERRORS = (ConnectionLoss, ConnectionClosedError, SessionExpiredError)


class ZooKeeperUnreachable(Exception):
    """No connection to ZooKeeper, or the connection was lost; the message names the address."""


@contextlib.contextmanager
def connected(
    hosts: str, timeout: float = 15.0, connect_timeout: float | None = None
) -> Iterator[KazooClient]:
    """A started client for `hosts` (`host:port[,host:port][/chroot]`, as
    MetadataUrl.connect_string gives it), stopped and closed however the block ends.
    ZooKeeperUnreachable when it does not connect within `connect_timeout` (default:
    `timeout`, the session timeout)."""
    # Quiet: kazoo warns "connection dropped" when a short-lived admin client stops.
    client = KazooClient(hosts=hosts, timeout=timeout, logger=_QUIET)
    wait = timeout if connect_timeout is None else connect_timeout
    try:
        try:
            client.start(timeout=wait)
        except KazooTimeoutError:
            raise ZooKeeperUnreachable(
                f"cannot connect to ZooKeeper at {hosts} within {wait:g} s"
            ) from None
        yield client
    finally:
        client.stop()
        client.close()


def seed_url(
    url: MetadataUrl, nodes: Mapping[str, Any], connect_timeout: float = CONNECT_TIMEOUT
) -> int:
    """`seed` into the ZooKeeper of a `zk:` URL, creating its chroot first."""
    with _lost_is_unreachable(url):
        if url.chroot:
            with connected(url.zk_hosts, connect_timeout=connect_timeout) as root:
                root.ensure_path(url.chroot)
        with connected(url.connect_string, connect_timeout=connect_timeout) as client:
            return seed(client, nodes)


def dump_url(url: MetadataUrl, connect_timeout: float = CONNECT_TIMEOUT) -> dict[str, Any]:
    """`dump` of the ZooKeeper of a `zk:` URL."""
    with (
        _lost_is_unreachable(url),
        connected(url.connect_string, connect_timeout=connect_timeout) as client,
    ):
        return dump(client)


@contextlib.contextmanager
def _lost_is_unreachable(url: MetadataUrl) -> Iterator[None]:
    try:
        yield
    except _CONNECTION_ERRORS as exc:
        raise ZooKeeperUnreachable(
            f"lost the connection to ZooKeeper at {url.connect_string} ({type(exc).__name__})"
        ) from None


def encode(content: Any) -> bytes:
    return b"" if content is None else json.dumps(content, separators=(",", ":")).encode()


def _depth(path: str) -> int:
    return path.count("/")


def seed(client: KazooClient, nodes: Mapping[str, Any]) -> int:
    """Create or overwrite every node of the snapshot (persistent nodes: we are not brokers).
    Returns the number of nodes written."""
    parents = {p.rsplit("/", 1)[0] for p in nodes} - set(nodes) - {""}
    for parent in sorted({a for p in parents for a in _ancestors(p)} | parents, key=_depth):
        if parent not in nodes:
            client.ensure_path(parent)
    by_depth = sorted(nodes, key=lambda p: (_depth(p), p))
    for start in range(0, len(by_depth), BATCH):
        batch = by_depth[start : start + BATCH]
        pending = [(p, client.create_async(p, encode(nodes[p]))) for p in batch]
        retry = []
        for path, result in pending:
            try:
                result.get()
            except NodeExistsError:
                retry.append((path, client.set_async(path, encode(nodes[path]))))
        for _path, result in retry:
            result.get()
    return len(nodes)


def _ancestors(path: str) -> Iterable[str]:
    parts = path.strip("/").split("/")
    for i in range(1, len(parts)):
        yield "/" + "/".join(parts[:i])


def dump(client: KazooClient, roots: Iterable[str] = DUMP_ROOTS) -> dict[str, Any]:
    """Every node under `roots` that holds data or is a leaf, as decoded JSON, and every
    persistent topic (see dump_topics)."""
    result: dict[str, Any] = dump_topics(client)
    level = [root for root in roots if client.exists(root)]
    while level:
        following: list[str] = []
        for start in range(0, len(level), BATCH):
            batch = level[start : start + BATCH]
            reads: list[tuple[str, AsyncResult, AsyncResult]] = [
                (p, client.get_async(p), client.get_children_async(p)) for p in batch
            ]
            for path, data_result, children_result in reads:
                try:
                    data, _stat = data_result.get()
                    children = children_result.get()
                except NoNodeError:
                    continue  # deleted while we walked
                if data or not children:
                    try:
                        result[path] = json.loads(data) if data else None
                    except (UnicodeDecodeError, json.JSONDecodeError):
                        log.warning("dump: %s does not hold JSON; left out", path)
                base = "" if path == "/" else path
                following.extend(f"{base}/{child}" for child in children)
        level = following
    return dict(sorted(result.items()))


def dump_topics(client: KazooClient) -> dict[str, None]:
    """`/managed-ledgers/<tenant>/<ns>/persistent/<topic>` of every persistent topic, without
    content: a topic exists where its managed ledger does (topic lists, auto-creation), and the
    ledger's own data (BookKeeper's binary metadata) and cursors below it are not the gateway's."""
    level = [MANAGED_LEDGERS_ROOT] if client.exists(MANAGED_LEDGERS_ROOT) else []
    # tenants, namespaces, then the "persistent" domain, then the topics
    for depth in range(4):
        following: list[str] = []
        for start in range(0, len(level), BATCH):
            batch = level[start : start + BATCH]
            reads = [(path, client.get_children_async(path)) for path in batch]
            for path, children_result in reads:
                try:
                    children = children_result.get()
                except NoNodeError:
                    continue  # deleted while we walked
                if depth == 2:  # below a namespace: only the persistent domain holds ledgers
                    children = [c for c in children if c == "persistent"]
                following.extend(f"{path}/{child}" for child in children)
        level = following
    return dict.fromkeys(level)
