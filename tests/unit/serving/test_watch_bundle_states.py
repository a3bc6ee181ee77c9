"""serving.watch_bundle_states: the state a lookup read for a bundle is told to the bundle's
other topics at the same version of the view, and only then; system and load-manager topics
never share one. Its premise is checked too: every topic of a bundle has the same state as
its own lookup would give. The slice, bundles and creation rule found last (a herd's runs of
one namespace and choice) never answer for another choice or another version of the view."""

from __future__ import annotations

import json
from pathlib import Path

from pulsar_lookup_gateway.lookup.auto_creation import AutoCreationSettings, lookup_allowed
from pulsar_lookup_gateway.lookup.bundles import NamespaceBundles, topic_hash
from pulsar_lookup_gateway.lookup.ownership_changes import answered_state
from pulsar_lookup_gateway.lookup.resolve import resolve
from pulsar_lookup_gateway.lookup.selection import ChoiceSource, ListenerChoice
from pulsar_lookup_gateway.lookup.topics import TopicName
from pulsar_lookup_gateway.lookup.view import ClusterView
from pulsar_lookup_gateway.metadata_store.file import FileSource
from pulsar_lookup_gateway.metadata_store.snapshot import write_snapshot
from pulsar_lookup_gateway.metadata_store.synthetic import (
    FOUR_BUNDLES,
    cluster,
    ownership_node,
)
from pulsar_lookup_gateway.serving.ownership_watch import OwnershipWatch
from pulsar_lookup_gateway.serving.service import LookupService
from pulsar_lookup_gateway.serving.watch_bundle_states import BundleState, BundleStates, shareable
from tests.unit.serving.collected import Collected

EXTERNAL = ListenerChoice("external", ChoiceSource.EXPLICIT)
INTERNAL = ListenerChoice("internal", ChoiceSource.EXPLICIT)
BUNDLES = NamespaceBundles.from_strings(FOUR_BUNDLES, len(FOUR_BUNDLES) - 1)
OWNED = {bundle: n % 2 + 1 for n, bundle in enumerate(BUNDLES.names())}


def _view() -> ClusterView:
    return ClusterView.from_snapshot(cluster(brokers=2, owned=OWNED))


def _view_owned_by(owner_of_all: int) -> ClusterView:
    nodes = cluster(brokers=2, owned=dict.fromkeys(BUNDLES.names(), owner_of_all))
    return ClusterView.from_snapshot(nodes)


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


async def test_a_herds_topics_told_their_bundles_state_each_pass_their_own_checks(
    tmp_path: Path,
) -> None:
    """With auto-creation off, topics that exist get their bundle's owner (what their own
    lookup gives, byte for byte), made-up ones of the same bundles `not_found`, though a
    lookup of an existing topic read each bundle's state first; each topic looked up once."""
    nodes = cluster(brokers=2, owned=OWNED)
    nodes["/admin/policies/public/default"]["autoTopicCreationOverride"] = {
        "allowAutoTopicCreation": False
    }
    for n in range(40):
        nodes[f"/managed-ledgers/public/default/persistent/real{n}"] = {}
    path = tmp_path / "cluster.json"
    write_snapshot(path, nodes)
    source = FileSource(path, poll_interval=3600)
    await source.start()
    watch = OwnershipWatch(LookupService(source, declared_listeners=["internal", "external"]))
    try:
        for first in (0, 20):  # (the second subscribe finds every bundle's state read)
            real = [TopicName.parse(f"public/default/real{n}") for n in range(first, first + 20)]
            made_up = [TopicName.parse(f"public/default/no{n}") for n in range(first, first + 20)]
            sink = Collected()
            waiting = await watch.subscribe(sink, [*real, *made_up], EXTERNAL, None)
            await watch.first_answers(waiting)
            view = source.view
            for topic in real:
                state = answered_state(resolve(topic, EXTERNAL, view), view)
                assert state is not None
                assert sink.got[topic.full] == json.loads(state.message_json(topic.full))
            assert {sink.got[topic.full]["code"] for topic in made_up} == {"not_found"}
        assert watch._lookups.shared >= 20
        assert watch.lookups == 80
    finally:
        await watch.close()
        await source.close()


async def test_a_topic_told_its_bundles_state_is_authorized_on_its_own(tmp_path: Path) -> None:
    """Permissions per topic (destination_auth): once lookups filled every bundle's state,
    the role's topics without a permission are still `not_authorized`, each on its own."""
    from pulsar_lookup_gateway.lookup.authorization import LookupAuthorizer

    allowed = [f"persistent://public/default/t{n}" for n in range(0, 40, 2)]
    nodes = cluster(brokers=2, owned=OWNED)
    nodes["/admin/policies/public/default"]["auth_policies"] = {
        "namespace_auth": {},
        "destination_auth": {name: {"alice": ["consume"]} for name in allowed},
        "subscription_auth_roles": {},
    }
    nodes["/admin/policies/public"] = {"adminRoles": []}
    path = tmp_path / "cluster.json"
    write_snapshot(path, nodes)
    source = FileSource(path, poll_interval=3600)
    await source.start()
    service = LookupService(
        source, declared_listeners=["internal", "external"], authorizer=LookupAuthorizer()
    )
    watch = OwnershipWatch(service)
    try:
        for first in (0, 20):  # (the second subscribe finds every bundle's state read)
            topics = [TopicName.parse(f"public/default/t{n}") for n in range(first, first + 20)]
            sink = Collected()
            await watch.first_answers(await watch.subscribe(sink, topics, EXTERNAL, "alice"))
            for topic in topics:
                expected = "owner" if topic.full in allowed else "error"
                assert sink.got[topic.full]["type"] == expected, topic.full
        assert watch._lookups.shared > 0
        assert watch.lookups == 40
    finally:
        await watch.close()
        await source.close()


def test_whether_a_topic_may_be_looked_up_is_lookup_allowed_with_the_policies_read_once() -> None:
    """may_look_up answers as lookup_allowed for every topic a state is shared with, whether
    the namespace lets topics be created (by the broker keys or its override) or not (then
    each topic's own nodes decide), or is marked deleted; a write of the view reads the
    policies again."""
    nodes = cluster(brokers=2, owned=OWNED)
    nodes["/managed-ledgers/public/default/persistent/real"] = {}
    nodes["/admin/partitioned-topics/public/default/persistent/parted"] = {"partitions": 2}
    names = ["real", "made-up", "parted", "parted-partition-1", "parted-partition-5"]
    topics = [TopicName.parse(f"persistent://public/default/{name}") for name in names]
    topics.append(TopicName.parse("non-persistent://public/default/made-up"))
    policies = nodes["/admin/policies/public/default"]
    shared = _read(BundleStates(), ClusterView.from_snapshot(nodes), topics[0])
    for override, deleted in ((None, False), (False, False), (True, False), (True, True)):
        if override is not None:
            policies["autoTopicCreationOverride"] = {"allowAutoTopicCreation": override}
        policies["deleted"] = deleted
        view = ClusterView.from_snapshot(nodes)
        for settings in (AutoCreationSettings(), AutoCreationSettings(allow=False)):
            states = BundleStates()
            states.remember(view, topics[0], EXTERNAL, shared)  # (a deleted one: none read)
            expected = [lookup_allowed(topic, view, settings) for topic in topics]
            assert [states.may_look_up(view, topic, settings) for topic in topics] == expected
            assert [states.may_look_up(view, topic, settings) for topic in topics] == expected
        if override is False:
            assert expected[:2] == [True, False]  # (its own nodes decide: checked)
    # Read once per version of the view: a write lets the made-up topic be created
    policies["autoTopicCreationOverride"] = {"allowAutoTopicCreation": False}
    policies["deleted"] = False
    view, states = ClusterView.from_snapshot(nodes), BundleStates()
    settings = AutoCreationSettings()
    _read(states, view, topics[0])
    assert not states.may_look_up(view, topics[1], settings)
    policies["autoTopicCreationOverride"] = {"allowAutoTopicCreation": True}
    view.put_bytes("/admin/policies/public/default", json.dumps(policies).encode())
    _read(states, view, topics[0])
    assert states.may_look_up(view, topics[1], settings)


def test_runs_of_topics_are_answered_for_their_own_choice_and_version_only() -> None:
    topics = _topics(40)
    states, first = BundleStates(), _view_owned_by(1)
    told = {topic.full: _read(states, first, topic) for topic in topics}
    for topic in topics:  # (alternating choices: the last slice is not the other's)
        assert states.get(first, topic, EXTERNAL) == told[topic.full]
        assert states.get(first, topic, INTERNAL) is None
    # Another version of the view: nothing is told from the first one's states
    second = _view_owned_by(2)
    assert all(states.get(second, topic, EXTERNAL) is None for topic in topics)
    again = _read(states, second, topics[0])
    assert again != told[topics[0].full]
    assert states.get(second, topics[0], EXTERNAL) == again
    assert states.get(first, topics[0], EXTERNAL) is None
    settings = AutoCreationSettings()
    assert states.may_look_up(second, topics[1], settings)
    assert states.may_look_up(second, topics[1], settings)  # (asked again: the same)
