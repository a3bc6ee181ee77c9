"""serving.watch_bundle_states: the slice, bundles and creation rule found last (a herd's runs
of one namespace and choice) never answer for another choice or another version of the view."""

from __future__ import annotations

from pulsar_lookup_gateway.lookup.auto_creation import AutoCreationSettings
from pulsar_lookup_gateway.lookup.bundles import NamespaceBundles
from pulsar_lookup_gateway.lookup.ownership_changes import answered_state
from pulsar_lookup_gateway.lookup.resolve import resolve
from pulsar_lookup_gateway.lookup.selection import ChoiceSource, ListenerChoice
from pulsar_lookup_gateway.lookup.topics import TopicName
from pulsar_lookup_gateway.lookup.view import ClusterView
from pulsar_lookup_gateway.metadata_store.synthetic import FOUR_BUNDLES, cluster
from pulsar_lookup_gateway.serving.watch_bundle_states import BundleState, BundleStates

EXTERNAL = ListenerChoice("external", ChoiceSource.EXPLICIT)
INTERNAL = ListenerChoice("internal", ChoiceSource.EXPLICIT)
BUNDLES = NamespaceBundles.from_strings(FOUR_BUNDLES, len(FOUR_BUNDLES) - 1)


def _view(owner_of_all: int) -> ClusterView:
    nodes = cluster(brokers=2, owned=dict.fromkeys(BUNDLES.names(), owner_of_all))
    return ClusterView.from_snapshot(nodes)


def _remember(states: BundleStates, view: ClusterView, topic: TopicName) -> BundleState:
    state = answered_state(resolve(topic, EXTERNAL, view), view)
    assert state is not None
    shared = BundleState(state, True, True)
    states.remember(view, topic, EXTERNAL, shared)
    return shared


def test_runs_of_topics_are_answered_for_their_own_choice_and_version_only() -> None:
    topics = [TopicName.parse(f"persistent://public/default/t{n}") for n in range(40)]
    states, first = BundleStates(), _view(1)
    told = {topic.full: _remember(states, first, topic) for topic in topics}
    for topic in topics:  # (alternating choices: the last slice is not the other's)
        assert states.get(first, topic, EXTERNAL) == told[topic.full]
        assert states.get(first, topic, INTERNAL) is None
    # Another version of the view: nothing is told from the first one's states
    second = _view(2)
    assert all(states.get(second, topic, EXTERNAL) is None for topic in topics)
    again = _remember(states, second, topics[0])
    assert again != told[topics[0].full]
    assert states.get(second, topics[0], EXTERNAL) == again
    assert states.get(first, topics[0], EXTERNAL) is None
    settings = AutoCreationSettings()
    assert states.may_look_up(second, topics[1], settings)
    assert states.may_look_up(second, topics[1], settings)  # (asked again: the same)
