"""Synthetic cluster metadata in Pulsar's znode layout (fictional brokers on 10.0.0.x and
*.example.com): the clusters the tests, the benchmarks and demos are built from."""

from __future__ import annotations

from typing import Any

FOUR_BUNDLES = ["0x00000000", "0x40000000", "0x80000000", "0xc0000000", "0xffffffff"]


def broker_id(i: int) -> str:
    return f"b{i}:8080"


def listeners_of(i: int, names: tuple[str, ...] = ("internal", "external")) -> dict[str, Any]:
    urls = {
        "internal": {
            "brokerServiceUrl": f"pulsar://10.0.0.{i}:6650",
            "brokerHttpUrl": f"http://10.0.0.{i}:8080",
        },
        "external": {
            "brokerServiceUrl": f"pulsar://b{i}.example.com:6650",
            "brokerServiceUrlTls": f"pulsar+ssl://b{i}.example.com:6651",
            "brokerHttpsUrl": f"https://b{i}.example.com:8443",
        },
    }
    return {name: urls[name] for name in names if name in urls}


def broker_node(
    i: int, *, usage: float | None = None, names: tuple[str, ...] = ("internal", "external")
) -> dict[str, Any]:
    node: dict[str, Any] = {
        "webServiceUrl": f"http://10.0.0.{i}:8080",
        "pulsarServiceUrl": f"pulsar://10.0.0.{i}:6650",
        "cpu": {"usage": 1.0, "limit": 100.0},
        "advertisedListeners": listeners_of(i, names),
        "loadManagerClassName": "org.apache.pulsar.broker.loadbalance.impl.ModularLoadManagerImpl",
    }
    if usage is not None:
        node["maxResourceUsage"] = usage
    return node


def ownership_node(
    i: int, *, with_listeners: bool = True, disabled: bool = False
) -> dict[str, Any]:
    node: dict[str, Any] = {
        "nativeUrl": f"pulsar://10.0.0.{i}:6650",
        "httpUrl": f"http://10.0.0.{i}:8080",
        "disabled": disabled,
    }
    if with_listeners:
        node["advertisedListeners"] = listeners_of(i)
    return node


def cluster(
    brokers: int = 3,
    owned: dict[str, int] | None = None,
    *,
    namespace: str = "public/default",
    boundaries: list[str] | None = FOUR_BUNDLES,
    leader: int | None = 1,
) -> dict[str, Any]:
    """A snapshot: `brokers` brokers, namespace policies, `owned` bundle name -> broker number."""
    nodes: dict[str, Any] = {}
    for i in range(1, brokers + 1):
        nodes[f"/loadbalance/brokers/{broker_id(i)}"] = broker_node(i, usage=0.1 * i)
    if leader is not None:
        nodes["/loadbalance/leader"] = {
            "brokerId": broker_id(leader),
            "serviceUrl": f"http://10.0.0.{leader}:8080",
        }
    policies: dict[str, Any] = {"replication_clusters": ["test"]}
    if boundaries is not None:
        policies["bundles"] = {"boundaries": boundaries, "numBundles": len(boundaries) - 1}
    nodes[f"/admin/policies/{namespace}"] = policies
    for bundle, i in (owned or {}).items():
        nodes[f"/namespace/{namespace}/{bundle}"] = ownership_node(i)
    return nodes


def topic_in_range(lower: int, upper: int, *, namespace: str = "public/default") -> str:
    """The first `t<n>` topic of the namespace whose bundle hash lies in [lower, upper)."""
    from pulsar_lookup_gateway.lookup.bundles import topic_hash

    for n in range(1_000_000):
        name = f"persistent://{namespace}/t{n}"
        if lower <= topic_hash(name) < upper:
            return name
    raise AssertionError("no topic found in range")  # pragma: no cover
