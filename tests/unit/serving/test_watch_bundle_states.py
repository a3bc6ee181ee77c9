"""serving.watch_bundle_states: the state a lookup read for a bundle is told to the bundle's
other topics at the same version of the view, and only then; system and load-manager topics
never share one. Its premise is checked too: every topic of a bundle has the same state as
its own lookup would give."""

from __future__ import annotations

import json

from pulsar_lookup_gateway.lookup.bundles import NamespaceBundles, topic_hash
from pulsar_lookup_gateway.lookup.ownership_changes import answered_state
from pulsar_lookup_gateway.lookup.resolve import resolve
from pulsar_lookup_gateway.lookup.selection import ChoiceSource, ListenerChoice
from pulsar_lookup_gateway.lookup.topics import TopicName
from pulsar_lookup_gateway.lookup.view import ClusterView
from pulsar_lookup_gateway.metadata_store.synthetic import (
    FOUR_BUNDLES,
    cluster,
    ownership_node,
)
from pulsar_lookup_gateway.serving.watch_bundle_states import BundleState, BundleStates, shareable

EXTERNAL = ListenerChoice("external", ChoiceSource.EXPLICIT)
INTERNAL = ListenerChoice("internal", ChoiceSource.EXPLICIT)
BUNDLES = NamespaceBundles.from_strings(FOUR_BUNDLES, len(FOUR_BUNDLES) - 1)
OWNED = {bundle: n % 2 + 1 for n, bundle in enumerate(BUNDLES.names())}


def _view() -> ClusterView:
    return ClusterView.from_snapshot(cluster(brokers=2, owned=OWNED))


def _topics(count: int) -> list[TopicName]:
    return [TopicName.parse(f"persistent://public/default/t{n}") for n in range(count)]


def _read(states: BundleStates, view: ClusterView, topic: TopicName) -> BundleState:
    """What the watch's full lookup of `topic` reads and keeps."""
    state = answered_state(resolve(topic, EXTERNAL, view), view)
    assert state is not None
    shared = BundleState(state, True, True)
    states.remember(view, topic, EXTERNAL, shared)
    return shared


def test_a_bundles_other_topics_get_its_state_and_it_is_what_their_lookups_give() -> None:
    view, states = _view(), BundleStates()
    first, *others = _topics(200)
    shared = _read(states, view, first)
    same = [
        t
        for t in others
        if BUNDLES.find(topic_hash(t.full)) == BUNDLES.find(topic_hash(first.full))
    ]
    other = [t for t in others if t not in same]
    assert same and other
    for topic in same:
        assert states.get(view, topic, EXTERNAL) is shared
        assert answered_state(resolve(topic, EXTERNAL, view), view) == shared.state
    for topic in other:  # (another bundle: its own lookup)
        assert states.get(view, topic, EXTERNAL) is None
    assert states.get(view, same[0], INTERNAL) is None  # (another listener: another answer)


def test_a_write_of_the_view_starts_over() -> None:
    view, states = _view(), BundleStates()
    first, second = _topics(2)
    _read(states, view, first)
    _read(states, view, second)
    bundle = BUNDLES.find(topic_hash(first.full))
    view.put_bytes(
        f"/namespace/public/default/{bundle.name}", json.dumps(ownership_node(2)).encode()
    )
    assert states.get(view, first, EXTERNAL) is None
    assert states.get(view, second, EXTERNAL) is None  # (any write: the version moved)
    assert states.get(_view(), first, EXTERNAL) is None  # (another view)


def test_system_and_load_manager_topics_never_share_a_state() -> None:
    view, states = _view(), BundleStates()
    system = [
        TopicName.parse("persistent://public/default/__change_events"),
        TopicName.parse("persistent://public/default/sub__transaction_pending_ack"),
        TopicName.parse("persistent://pulsar/system/loadbalancer-service-unit-state"),
    ]
    assert not any(shareable(topic) for topic in system)
    _read(states, view, system[0])  # (not kept)
    for topic in _topics(50):
        assert states.get(view, topic, EXTERNAL) is None
    _read(states, view, _topics(1)[0])
    assert states.get(view, system[1], EXTERNAL) is None
