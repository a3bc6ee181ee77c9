"""Partitioned metadata and auto-creation: the broker's rules as tables."""

from __future__ import annotations

from typing import Any

import pytest

from pulsar_lookup_gateway.lookup.auto_creation import (
    AskBroker,
    AutoCreationSettings,
    CreationOverride,
    Decision,
    Partitions,
    TopicNotFound,
    TopicType,
    created_partitioned,
    creation_allowed,
    creation_override,
    decide,
    decide_partitions,
    default_partitions,
    lookup_allowed,
)
from pulsar_lookup_gateway.lookup.errors import FailureKind, LookupFailure, MalformedNode
from pulsar_lookup_gateway.lookup.topics import NamespaceName, TopicName
from pulsar_lookup_gateway.lookup.view import ClusterView

T = TopicName.parse("persistent://public/default/t")
PART = TopicName.parse("persistent://public/default/t-partition-1")
NP = TopicName.parse("non-persistent://public/default/t")
NS = NamespaceName("public", "default")
ON = AutoCreationSettings()
OFF = AutoCreationSettings(allow=False)
PARTITIONED = AutoCreationSettings(topic_type=TopicType.PARTITIONED, default_partitions=3)


# --- the decision table -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("topic", "partitions", "exists", "create", "partitioned", "expected"),
    [
        # A partitioned topic answers its count, whatever else holds.
        (T, 4, False, False, False, Partitions(4)),
        (T, 4, None, True, True, Partitions(4)),
        # No creation: existing answers 0, missing TopicNotFound, unknown asks a broker.
        (T, 0, True, False, False, Partitions(0)),
        (T, 0, False, False, True, TopicNotFound()),
        (NP, 0, None, False, False, AskBroker(auto_creation=False)),
        # Creation: an existing topic, or one created non-partitioned, answers 0.
        (T, 0, True, True, True, Partitions(0)),
        (T, 0, False, True, False, Partitions(0)),
        (NP, 0, None, True, False, Partitions(0)),
        # ... a partition's own name is never created partitioned ...
        (PART, 0, False, True, True, Partitions(0)),
        # ... and a missing topic created partitioned is created by a broker.
        (T, 0, False, True, True, AskBroker(auto_creation=True)),
        (NP, 0, None, True, True, AskBroker(auto_creation=True)),
    ],
)
def test_decide(
    topic: TopicName,
    partitions: int,
    exists: bool | None,
    create: bool,
    partitioned: bool,
    expected: Decision,
) -> None:
    got = decide(
        topic, partitions=partitions, exists=exists, create=create, partitioned=partitioned
    )
    assert got == expected


@pytest.mark.parametrize(
    ("topic", "override", "settings", "deleted", "allowed"),
    [
        (T, None, ON, False, True),
        (T, None, OFF, False, False),
        (T, CreationOverride(True), OFF, False, True),  # the namespace's override wins
        (T, CreationOverride(False), ON, False, False),
        (T, None, ON, True, False),  # a namespace being deleted
        # System topics may always be created (systemTopicEnabled), ...
        (TopicName.parse("persistent://public/default/__change_events"), None, OFF, False, True),
        (
            TopicName.parse("persistent://public/default/__change_events"),
            None,
            AutoCreationSettings(allow=False, system_topics=False),
            False,
            False,
        ),
        # ... the extensible load manager's own topics never.
        (
            TopicName.parse("persistent://pulsar/system/loadbalancer-service-unit-state"),
            None,
            ON,
            False,
            False,
        ),
    ],
)
def test_creation_allowed(
    topic: TopicName,
    override: CreationOverride | None,
    settings: AutoCreationSettings,
    deleted: bool,
    allowed: bool,
) -> None:
    assert creation_allowed(topic, override, settings, namespace_deleted=deleted) is allowed


@pytest.mark.parametrize(
    ("name", "override", "settings", "partitioned"),
    [
        ("t", None, ON, False),
        ("t", None, PARTITIONED, True),
        ("t", CreationOverride(True, TopicType.NON_PARTITIONED), PARTITIONED, False),
        ("t", CreationOverride(True, TopicType.PARTITIONED, 2), ON, True),
        ("t", CreationOverride(True), PARTITIONED, True),  # no type in the override: the key's
        ("t-DLQ", None, PARTITIONED, False),  # dead-letter and retry topics: never
        ("t-RETRY", None, PARTITIONED, False),
    ],
)
def test_created_partitioned(
    name: str, override: CreationOverride | None, settings: AutoCreationSettings, partitioned: bool
) -> None:
    topic = TopicName.parse(f"persistent://public/default/{name}")
    assert created_partitioned(topic, override, settings) is partitioned


def test_default_partitions() -> None:
    assert default_partitions(None, PARTITIONED) == 3
    assert default_partitions(CreationOverride(True, TopicType.PARTITIONED, 7), PARTITIONED) == 7


# --- reading a view -----------------------------------------------------------------------------


def cluster(
    *,
    override: dict[str, Any] | None = None,
    ledgers: tuple[str, ...] = (),
    partitioned: dict[str, int] | None = None,
) -> ClusterView:
    policies: dict[str, Any] = {}
    if override is not None:
        policies["autoTopicCreationOverride"] = override
    nodes: dict[str, Any] = {"/admin/policies/public/default": policies}
    for name in ledgers:
        nodes[f"/managed-ledgers/public/default/persistent/{name}"] = {}
    for name, count in (partitioned or {}).items():
        nodes[f"/admin/partitioned-topics/public/default/persistent/{name}"] = {"partitions": count}
    return ClusterView.from_snapshot(nodes)


@pytest.mark.parametrize(
    ("view", "settings", "client", "topic", "expected"),
    [
        (cluster(), ON, True, T, Partitions(0)),
        (cluster(), OFF, True, T, TopicNotFound()),
        (cluster(), ON, False, T, TopicNotFound()),  # the client asks for no creation
        (cluster(ledgers=("t",)), OFF, True, T, Partitions(0)),
        (cluster(), PARTITIONED, True, T, AskBroker(auto_creation=True)),
        (cluster(ledgers=("t",)), PARTITIONED, True, T, Partitions(0)),
        (cluster(partitioned={"t": 5}), OFF, False, T, Partitions(5)),
        # A partition of a partitioned topic exists even before its ledger does.
        (cluster(partitioned={"t": 5}), OFF, False, PART, Partitions(0)),
        (cluster(partitioned={"t": 1}), OFF, False, PART, TopicNotFound()),
        (cluster(), OFF, True, NP, AskBroker(auto_creation=False)),
        (
            cluster(override={"allowAutoTopicCreation": False, "topicType": "non-partitioned"}),
            ON,
            True,
            T,
            TopicNotFound(),
        ),
        (
            cluster(
                override={
                    "allowAutoTopicCreation": True,
                    "topicType": "partitioned",
                    "defaultNumPartitions": 2,
                }
            ),
            OFF,
            True,
            T,
            AskBroker(auto_creation=True),
        ),
    ],
)
def test_decide_partitions(
    view: ClusterView,
    settings: AutoCreationSettings,
    client: bool,
    topic: TopicName,
    expected: Decision,
) -> None:
    assert decide_partitions(topic, view, settings, client_creation=client) == expected


def test_decide_partitions_of_a_missing_namespace_fails() -> None:
    with pytest.raises(LookupFailure) as failed:
        decide_partitions(
            TopicName.parse("persistent://ghost/ns/t"), cluster(), ON, client_creation=True
        )
    assert failed.value.kind is FailureKind.NAMESPACE_NOT_FOUND


def test_overrides_are_read_and_checked() -> None:
    view = cluster(
        override={
            "allowAutoTopicCreation": True,
            "topicType": "partitioned",
            "defaultNumPartitions": 4,
        }
    )
    assert creation_override(view, NS) == CreationOverride(True, TopicType.PARTITIONED, 4)
    # A partitioned override without a partition count is one Pulsar refuses to store: ignored.
    assert (
        creation_override(
            cluster(override={"allowAutoTopicCreation": True, "topicType": "partitioned"}), NS
        )
        is None
    )
    with pytest.raises(MalformedNode):
        creation_override(cluster(override={"allowAutoTopicCreation": "yes"}), NS)
    with pytest.raises(MalformedNode):
        creation_override(cluster(override={"allowAutoTopicCreation": True, "topicType": "x"}), NS)


@pytest.mark.parametrize(
    ("view", "settings", "topic", "allowed"),
    [
        (cluster(), ON, T, True),
        (cluster(), OFF, T, False),
        (cluster(ledgers=("t",)), OFF, T, True),
        (cluster(partitioned={"t": 2}), OFF, T, True),
        (cluster(partitioned={"t": 2}), OFF, PART, True),
        (cluster(), OFF, NP, True),  # non-persistent topics are not checked
    ],
)
def test_lookup_allowed(
    view: ClusterView, settings: AutoCreationSettings, topic: TopicName, allowed: bool
) -> None:
    assert lookup_allowed(topic, view, settings) is allowed
