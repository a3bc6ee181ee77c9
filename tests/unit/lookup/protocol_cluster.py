"""The protocol-handler cluster and listener choices the protocol-data tests share."""

from __future__ import annotations

from typing import Any

from pulsar_lookup_gateway.lookup.selection import ChoiceSource, ListenerChoice
from pulsar_lookup_gateway.lookup.topics import TopicName
from pulsar_lookup_gateway.metadata_store.synthetic import broker_id, cluster, topic_in_range

FIRST, LAST = "0x00000000_0x40000000", "0xc0000000_0xffffffff"

IN_FIRST = TopicName.parse(topic_in_range(0, 0x40000000))


EXTERNAL = ListenerChoice("external", ChoiceSource.EXPLICIT)


INTERNAL = ListenerChoice("internal", ChoiceSource.SOCKET, internal=True)


def kop_cluster(**protocols: str) -> dict[str, Any]:
    """Three brokers with listeners internal and external; b1 owns the first bundle and, like
    every broker, advertises `protocols` (with its number in place of {i})."""
    nodes = cluster(owned={FIRST: 1})
    for i in (1, 2, 3):
        node = nodes[f"/loadbalance/brokers/{broker_id(i)}"]
        node["protocols"] = {name: data.format(i=i) for name, data in protocols.items()}
    return nodes
