"""Ownership changes written as Pulsar's brokers write them, for the demo and tests: a bundle
moved to another broker, a bundle unloaded, a broker stopped; and `seed --replace`.

What a broker writes (ModularLoadManagerImpl with the metadata-store ownership):
- owning a bundle: `/namespace/<tenant>/<ns>/<bundle>`, NamespaceEphemeralData (nativeUrl,
  nativeUrlTls, httpUrl, httpUrlTls, disabled, advertisedListeners, brokerId), made of its
  registration's URLs; and the bundle in its load report's `bundles`;
- unloading it: that node deleted (and the bundle out of `bundles`);
- stopping: its ephemeral nodes vanish with its session: the registration
  `/loadbalance/brokers/<id>`, every ownership node it holds, and `/loadbalance/leader` if it
  led (another broker then takes the lead).

These are plain (persistent) nodes here: this is not a broker's session. Blocking kazoo calls,
for the command line and tests, never for an event loop."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    ConnectionClosedError,
    ConnectionLoss,
    NoNodeError,
    NotEmptyError,
    SessionExpiredError,
)

from pulsar_lookup_gateway.lookup.model import BROKERS_ROOT, LEADER_PATH, NAMESPACE_ROOT
from pulsar_lookup_gateway.metadata_store.admin import (
    CONNECT_TIMEOUT,
    DUMP_ROOTS,
    ZooKeeperUnreachable,
    connected,
    dump,
    encode,
)
from pulsar_lookup_gateway.metadata_store.url import MetadataUrl


class MoveError(Exception):
    """What the demo cannot do (a broker that is not registered, a bundle nobody owns); the
    message says what there is instead."""


@dataclass(frozen=True, slots=True)
class Bundle:
    """A namespace's bundle: `public/default` and `0x00000000_0x40000000`."""

    namespace: str
    name: str

    @property
    def path(self) -> str:
        return f"{NAMESPACE_ROOT}/{self.namespace}/{self.name}"

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


def _read(client: KazooClient, path: str) -> dict[str, Any] | None:
    try:
        data, _ = client.get(path)
    except NoNodeError:
        return None
    try:
        content = json.loads(data) if data else {}
    except (UnicodeDecodeError, json.JSONDecodeError):
        return {}
    return content if isinstance(content, dict) else {}


def registration(client: KazooClient, broker_id: str) -> dict[str, Any]:
    """A broker's registration; MoveError naming the registered brokers when it has none."""
    found = _read(client, f"{BROKERS_ROOT}/{broker_id}")
    if found is None:
        brokers = client.get_children(BROKERS_ROOT) if client.exists(BROKERS_ROOT) else []
        there = ", ".join(sorted(brokers)) or "none"
        raise MoveError(f"broker '{broker_id}' is not registered (registered: {there})")
    return found


def broker_named(client: KazooClient, text: str) -> str:
    """The registered broker `text` names: its id, or the one id that starts with `text`
    followed by '.' or ':' (`broker-2` for `broker-2.pulsar.svc:8080`)."""
    brokers = _brokers(client)
    if text in brokers:
        return text
    matches = [b for b in brokers if b.startswith((f"{text}.", f"{text}:"))]
    if len(matches) == 1:
        return matches[0]
    there = ", ".join(brokers) or "none"
    raise MoveError(f"broker '{text[:200]}' is not registered (registered: {there})")


def ownership_of(broker_id: str, broker: Mapping[str, Any]) -> dict[str, Any]:
    """The NamespaceEphemeralData a broker writes for a bundle it owns, from its registration."""
    data: dict[str, Any] = {
        "nativeUrl": broker.get("pulsarServiceUrl"),
        "nativeUrlTls": broker.get("pulsarServiceUrlTls"),
        "httpUrl": broker.get("webServiceUrl"),
        "httpUrlTls": broker.get("webServiceUrlTls"),
        "disabled": False,
        "advertisedListeners": broker.get("advertisedListeners") or {},
        "brokerId": broker_id,
    }
    return {key: value for key, value in data.items() if value is not None}


def owner_of(client: KazooClient, bundle: Bundle) -> str | None:
    """The broker id an ownership node names (brokerId, else the broker whose URL it has)."""
    data = _read(client, bundle.path)
    if data is None:
        return None
    if isinstance(data.get("brokerId"), str):
        return str(data["brokerId"])
    urls = {data.get("nativeUrl"), data.get("httpUrl")} - {None}
    for broker_id in _brokers(client):
        broker = _read(client, f"{BROKERS_ROOT}/{broker_id}") or {}
        if urls & {broker.get("pulsarServiceUrl"), broker.get("webServiceUrl")}:
            return broker_id
    return None


def move(client: KazooClient, bundle: Bundle, broker_id: str) -> str | None:
    """Make `broker_id` the owner of `bundle`, as its new owner would after an unload (the old
    owner's node goes, the new owner's comes); the previous owner (None: nobody)."""
    broker = registration(client, broker_id)
    previous = owner_of(client, bundle)
    data = encode(ownership_of(broker_id, broker))
    if client.exists(bundle.path):
        client.set(bundle.path, data)
    else:
        client.create(bundle.path, data, makepath=True)
    if previous is not None and previous != broker_id:
        _report_bundles(client, previous, remove=str(bundle))
    _report_bundles(client, broker_id, add=str(bundle))
    return previous


def unload(client: KazooClient, bundle: Bundle) -> str:
    """Delete `bundle`'s ownership node, as its owner does when it unloads it; the owner it
    had. MoveError when nobody owns it."""
    previous = owner_of(client, bundle)
    try:
        client.delete(bundle.path)
    except NoNodeError:
        raise MoveError(f"nobody owns bundle {bundle} ({bundle.path} is absent)") from None
    if previous is not None:
        _report_bundles(client, previous, remove=str(bundle))
    return previous or "?"


def stop_broker(client: KazooClient, broker_id: str) -> list[str]:
    """What a broker's session takes with it when it stops: its ownership nodes, its
    registration, and the leader node if it led (the first remaining broker then leads, as
    an election would make one). The bundles it owned."""
    broker = registration(client, broker_id)
    urls = {broker.get("pulsarServiceUrl"), broker.get("webServiceUrl")} - {None}
    owned = []
    for path in _ownership_paths(client):
        data = _read(client, path) or {}
        if data.get("brokerId") == broker_id or (
            "brokerId" not in data and urls & {data.get("nativeUrl"), data.get("httpUrl")}
        ):
            client.delete(path)
            owned.append(path.removeprefix(f"{NAMESPACE_ROOT}/"))
    client.delete(f"{BROKERS_ROOT}/{broker_id}")
    leader = _read(client, LEADER_PATH)
    if leader is not None and (
        leader.get("brokerId") == broker_id or leader.get("serviceUrl") in urls
    ):
        remaining = _brokers(client)
        if remaining:
            heir = remaining[0]
            url = (_read(client, f"{BROKERS_ROOT}/{heir}") or {}).get("webServiceUrl")
            client.set(LEADER_PATH, encode({"brokerId": heir, "serviceUrl": url}))
        else:
            client.delete(LEADER_PATH)
    return owned


def replace(client: KazooClient, nodes: Mapping[str, Any]) -> list[str]:
    """Delete what the gateway reads (DUMP_ROOTS and the topics) that `nodes`, a snapshot,
    no longer has: so that seeding a changed snapshot unloads bundles and stops brokers too.
    The paths deleted; ancestors of the snapshot's nodes stay."""
    kept = set(nodes) | {a for path in nodes for a in _ancestors(path)}
    gone = [path for path in dump(client) if path not in kept and path not in DUMP_ROOTS]
    deleted = []
    for path in sorted(gone, key=lambda p: -p.count("/")):
        try:
            client.delete(path, recursive=True)
        except (NoNodeError, NotEmptyError):
            continue
        deleted.append(path)
    # Parents left empty (a namespace none of whose bundles is owned any more) go too, but
    # for the roots: as brokers leave them, nothing reads an empty one as a node of its own.
    emptied = {a for path in deleted for a in _ancestors(path)} - kept - set(DUMP_ROOTS)
    for path in sorted(emptied, key=lambda p: -p.count("/")):
        try:
            client.delete(path)
        except (NoNodeError, NotEmptyError):
            continue
    return sorted(deleted)


def replace_url(url: MetadataUrl, nodes: Mapping[str, Any]) -> list[str]:
    """`replace` in the ZooKeeper of a `zk:` URL (after seed_url wrote `nodes`)."""
    try:
        with connected(url.connect_string, connect_timeout=CONNECT_TIMEOUT) as client:
            return replace(client, nodes)
    except (ConnectionLoss, ConnectionClosedError, SessionExpiredError) as exc:
        raise ZooKeeperUnreachable(
            f"lost the connection to ZooKeeper at {url.connect_string} ({type(exc).__name__})"
        ) from None


def _ancestors(path: str) -> Iterable[str]:
    parts = path.strip("/").split("/")
    for i in range(1, len(parts)):
        yield "/" + "/".join(parts[:i])


def _brokers(client: KazooClient) -> list[str]:
    return sorted(client.get_children(BROKERS_ROOT)) if client.exists(BROKERS_ROOT) else []


def _ownership_paths(client: KazooClient) -> list[str]:
    """Every `/namespace/<tenant>/<ns>/<bundle>` node."""
    paths: list[str] = []
    if not client.exists(NAMESPACE_ROOT):
        return paths
    for tenant in client.get_children(NAMESPACE_ROOT):
        for namespace in client.get_children(f"{NAMESPACE_ROOT}/{tenant}"):
            base = f"{NAMESPACE_ROOT}/{tenant}/{namespace}"
            paths += [f"{base}/{bundle}" for bundle in client.get_children(base)]
    return sorted(paths)


def _report_bundles(
    client: KazooClient, broker_id: str, *, add: str | None = None, remove: str | None = None
) -> None:
    """The bundles list of a broker's load report (LocalBrokerData), as its next report says."""
    path = f"{BROKERS_ROOT}/{broker_id}"
    report = _read(client, path)
    if report is None or not isinstance(report.get("bundles", []), list):
        return
    bundles = [b for b in report.get("bundles", []) if b != remove]
    if add is not None and add not in bundles:
        bundles.append(add)
    report["bundles"] = bundles
    report["numBundles"] = len(bundles)
    client.set(path, encode(report))
