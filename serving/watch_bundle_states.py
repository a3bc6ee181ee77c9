"""The states the ownership watch read for each bundle at the current version of the view: a
topic first watched in a bundle whose state was just read by a lookup (a herd's topics: many
per bundle) is told that state without a lookup of its own.

Exact because a lookup's answer reads nothing of the topic but its namespace, domain and
bundle (serving.memo's BundleAnswers rest on the same), save for system topics (names with
`__`, answered in a deleted namespace) and the load manager's own (`pulsar/system`), which
always take the full lookup; whatever is the topic's own (whether it exists or may be created,
its authorization) is still checked for each topic (serving.watch_lookups). Only what was read
from the view as it is now is kept: any write of the view (its version) starts over. Bounded:
at MAX_STATES the table starts over. Not a table of the answer memo (serving.memo), which keeps
answers across the writes its rule says do not change them: this is scratch for one version,
a few hundred bytes per bundle, exact without that rule (what a herd needs: many topics of a
bundle within milliseconds). No I/O.
"""

from __future__ import annotations

from typing import NamedTuple

from pulsar_lookup_gateway.lookup.auto_creation import (
    AutoCreationSettings,
    lookup_allowed,
    namespace_allows_creation,
)
from pulsar_lookup_gateway.lookup.bundles import NamespaceBundles, topic_hash
from pulsar_lookup_gateway.lookup.ownership_changes import TopicState
from pulsar_lookup_gateway.lookup.resolve import namespace_bundle
from pulsar_lookup_gateway.lookup.selection import ListenerChoice
from pulsar_lookup_gateway.lookup.topics import TopicDomain, TopicName
from pulsar_lookup_gateway.lookup.view import ClusterView

MAX_STATES = 4096  # bundles' states (and namespaces' bundles) kept at one version of the view

#: A namespace's topics of one domain looked up with one listener choice (choice, tenant,
#: namespace, domain): their states are filed by bundle name under it.
_Slice = tuple[ListenerChoice, str, str, TopicDomain]


class BundleState(NamedTuple):
    state: TopicState
    connect: bool  # the lookup answered Connect (for the lookup metrics)
    local: bool  # not another cluster's (a local answer checks the topic may be looked up)


def shareable(topic: TopicName) -> bool:
    """Whether `topic`'s answer is its bundle's (not a system or load-manager topic)."""
    return "__" not in topic.local_name and not (
        topic.tenant == "pulsar" and topic.namespace == "system"
    )


class BundleStates:
    def __init__(self) -> None:
        self._at: tuple[object, int] | None = None  # (view, version) the states were read at
        self._states: dict[_Slice, dict[str, BundleState]] = {}  # -> bundle name -> state
        self._count = 0  # states in there
        # Namespaces' bundles at that version (each topic's bundle is found without reading
        # its namespace's policies again)
        self._bundles: dict[tuple[str, str], NamespaceBundles] = {}
        # Namespaces whose policies let their shareable topics be created, at that version
        self._creation: dict[tuple[AutoCreationSettings, str, str], bool] = {}
        # The last slice, bundles and creation rule found (a herd's topics come in runs of
        # one namespace and choice: found again without a key made and hashed for each)
        self._last_slice: tuple[_Slice, dict[str, BundleState]] | None = None
        self._last_bundles: tuple[str, str, NamespaceBundles] | None = None
        self._last_creation: tuple[AutoCreationSettings, str, str, bool] | None = None

    def _bundle_name(self, view: ClusterView, topic: TopicName) -> str:
        last = self._last_bundles
        if last is not None and last[0] == topic.tenant and last[1] == topic.namespace:
            return last[2].find(topic_hash(topic.full)).name
        namespace = (topic.tenant, topic.namespace)
        bundles = self._bundles.get(namespace)
        if bundles is None:
            bundle = namespace_bundle(topic, view)  # (may raise: the caller looks it up)
            found = view.bundles(topic.namespace_name)
            if found is not None:
                if len(self._bundles) >= MAX_STATES:
                    self._bundles.clear()
                    self._last_bundles = None
                self._bundles[namespace] = found
            return bundle.name
        self._last_bundles = (topic.tenant, topic.namespace, bundles)
        return bundles.find(topic_hash(topic.full)).name

    def _slice(self, topic: TopicName, choice: ListenerChoice) -> dict[str, BundleState] | None:
        last = self._last_slice
        if last is not None:
            (last_choice, tenant, namespace, domain), states = last
            if (
                last_choice is choice
                and domain is topic.domain
                and tenant == topic.tenant
                and namespace == topic.namespace
            ):
                return states
        key = (choice, topic.tenant, topic.namespace, topic.domain)
        found = self._states.get(key)
        if found is not None:
            self._last_slice = (key, found)
        return found

    def _current(self, view: ClusterView) -> bool:
        at = self._at
        return at is not None and at[0] is view and at[1] == view.version

    def get(
        self, view: ClusterView, topic: TopicName, choice: ListenerChoice
    ) -> BundleState | None:
        """The state read for `topic`'s bundle at this version of `view` (None: none). Raises
        what reading its bundle raises (LookupFailure, NodeNotLoaded)."""
        if not self._count or not self._current(view) or not shareable(topic):
            return None
        states = self._slice(topic, choice)
        return states.get(self._bundle_name(view, topic)) if states is not None else None

    def may_look_up(
        self, view: ClusterView, topic: TopicName, settings: AutoCreationSettings
    ) -> bool:
        """`lookup_allowed(topic, view, settings)` for a topic `get` found a state for (a
        shareable one, at this version of `view`), its namespace's policies read once per
        version: whether a topic may be created depends on its name only for system and
        load-manager topics, which are not shareable. Where creation is refused, the topic's
        own nodes are read as lookup_allowed does."""
        if topic.domain is TopicDomain.NON_PERSISTENT:
            return True
        if not self._current(view):
            return lookup_allowed(topic, view, settings)
        last = self._last_creation
        if (
            last is not None
            and last[0] is settings
            and last[1] == topic.tenant
            and last[2] == topic.namespace
        ):
            creation = last[3]
        else:
            key = (settings, topic.tenant, topic.namespace)
            found = self._creation.get(key)
            if found is None:
                found = namespace_allows_creation(topic, view, settings)
                if len(self._creation) >= MAX_STATES:
                    self._creation.clear()
                self._creation[key] = found
            creation = found
            self._last_creation = (settings, topic.tenant, topic.namespace, creation)
        return creation or lookup_allowed(topic, view, settings)

    def remember(
        self,
        view: ClusterView,
        topic: TopicName,
        choice: ListenerChoice,
        state: BundleState,
    ) -> None:
        """Keep the state a lookup of `topic` just read from `view` (unchanged since)."""
        if not shareable(topic):
            return
        if not self._current(view) or self._count >= MAX_STATES:
            self._states.clear()
            self._count = 0
            self._bundles.clear()
            self._creation.clear()
            self._last_slice = self._last_bundles = self._last_creation = None
            self._at = (view, view.version)
        bundle = self._bundle_name(view, topic)
        key = (choice, topic.tenant, topic.namespace, topic.domain)
        states = self._states.setdefault(key, {})
        if bundle not in states:
            self._count += 1
        states[bundle] = state
