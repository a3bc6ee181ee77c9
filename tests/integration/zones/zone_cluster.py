"""The zone tests' cluster: its namespaces, partitioned topics, invalid names and zones (shared by
the zone job's tests and its plan's)."""

from __future__ import annotations

from typing import Any

from pulsar_lookup_gateway.metadata_store.synthetic import (
    FOUR_BUNDLES,
    broker_id,
    broker_node,
    ownership_node,
)
from pulsar_lookup_gateway.zones.pairs import (
    Zone,
)

ZONES = [
    Zone("dc", "internal"),
    Zone("internet", "external", tls=True),
    Zone("dmz", "dmz"),  # brokers 3 and 4 lack the dmz listener; broker 3 is the leader
    Zone("ops", "internal", tls=True),  # the internal listener has no TLS URL
]


DMZ_BROKERS = (1, 2)


LEADER = 3


ORDERS_BOUNDARIES = [
    "0x00000000", "0x20000000", "0x40000000", "0x80000000", "0xa0000000", "0xc0000000",
    "0xffffffff",
]  # fmt: skip


ORDERS_OWNERS = {  # bundle -> (broker, ownership node carries listeners, disabled)
    "0x00000000_0x20000000": (1, True, False),
    "0x20000000_0x40000000": (2, True, False),
    "0x40000000_0x80000000": (4, False, False),  # listeners only in the registration
    "0x80000000_0xa0000000": (3, True, False),
    "0xa0000000_0xc0000000": (1, True, True),  # being unloaded
}  # 0xc0000000_0xffffffff: nobody


DEFAULT_OWNERS = {"0x00000000_0x40000000": 1, "0x40000000_0x80000000": 2}


# acme/events has no bundle data: one bundle over the whole range, as on Pulsar's brokers.
EVENTS_OWNERS = {"0x00000000_0xffffffff": 4}


PARTITIONED = {f"orders-p{k}": 1 + k % 6 for k in range(20)}


NP_PARTITIONED = {f"stream-{k}": 2 + k % 3 for k in range(5)}


INVALID = [
    None,
    "",
    "   ",
    "a/b",
    "persistent://public/default",
    "persistent://public/default/",
    "persistent://p/cluster/ns/t",
    "public/bad ns!/t",
    *(f"foo://public/default/x{i}" for i in range(10)),
    *(f"persistent://bad tenant {i}/default/x" for i in range(10)),
    *(f"persistent://public/bad|ns{i}/x" for i in range(10)),
]


def dmz_urls(i: int) -> dict[str, str]:
    return {
        "brokerServiceUrl": f"pulsar://dmz-b{i}.example.org:6650",
        "brokerHttpUrl": f"http://dmz-b{i}.example.org:8080",
    }


def cluster_nodes() -> dict[str, Any]:
    nodes: dict[str, Any] = {}
    for i in (1, 2, 3, 4):
        node = broker_node(i, usage=0.1 * i)
        if i in DMZ_BROKERS:
            node["advertisedListeners"]["dmz"] = dmz_urls(i)
        nodes[f"/loadbalance/brokers/{broker_id(i)}"] = node
    nodes["/loadbalance/leader"] = {
        "brokerId": broker_id(LEADER),
        "serviceUrl": f"http://10.0.0.{LEADER}:8080",
    }

    def owner(namespace: str, bundle: str, i: int, listeners: bool, disabled: bool) -> None:
        node = ownership_node(i, with_listeners=listeners, disabled=disabled)
        if listeners and i in DMZ_BROKERS:
            node["advertisedListeners"]["dmz"] = dmz_urls(i)
        nodes[f"/namespace/{namespace}/{bundle}"] = node

    nodes["/admin/policies/public/default"] = {
        "bundles": {"boundaries": FOUR_BUNDLES, "numBundles": 4}
    }
    for bundle, i in DEFAULT_OWNERS.items():
        owner("public/default", bundle, i, True, False)
    nodes["/namespace/public/default/0x80000000_0xc0000000"] = {
        **ownership_node(3),
        "brokerId": broker_id(3),
    }
    # Split bundles: the local policies (updated on split) win over the stale policies.
    nodes["/admin/policies/acme/orders"] = {
        "bundles": {"boundaries": FOUR_BUNDLES, "numBundles": 4}
    }
    nodes["/admin/local-policies/acme/orders"] = {
        "bundles": {"boundaries": ORDERS_BOUNDARIES, "numBundles": len(ORDERS_BOUNDARIES) - 1}
    }
    for bundle, (i, listeners, disabled) in ORDERS_OWNERS.items():
        owner("acme/orders", bundle, i, listeners, disabled)
    nodes["/admin/policies/acme/events"] = {"replication_clusters": ["test"]}  # no bundles
    for bundle, i in EVENTS_OWNERS.items():
        owner("acme/events", bundle, i, True, False)
    for name, count in PARTITIONED.items():
        nodes[f"/admin/partitioned-topics/acme/orders/persistent/{name}"] = {"partitions": count}
    for name, count in NP_PARTITIONED.items():
        nodes[f"/admin/partitioned-topics/public/default/non-persistent/{name}"] = {
            "partitions": count
        }
    return nodes
