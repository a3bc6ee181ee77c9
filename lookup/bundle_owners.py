"""Which brokers hold a namespace's bundles: the brokers the REST topic list asks for their
non-persistent topics (those live only in the memory of the broker that owns their bundle).

Pulsar's REST list (NamespacesBase.internalGetNonPersistentTopics) asks each bundle's owner
and takes nothing from a bundle nobody owns; the gateway reads the owners from its ownership
view, so it asks each distinct owner once and a namespace's fan-out is bounded by its bundles:

- modular load manager: the bundle's `/namespace/...` node names the owner (its `brokerId`,
  else the registration its URLs belong to, as a lookup names it);
- extensible load manager with the metadata-store table view: the broker that has the
  bundle's topics loaded: the owner (Owned), the source broker (Splitting, Releasing: it
  serves them until it lets go); Init, Free, Assigning and Deleted bundles have none loaded;
- extensible load manager without it (ownership in a system topic the gateway cannot read):
  the owners are unknown (`None`), and the caller asks every live broker instead.

An owner without a registration (restarting, or gone before its ownership expired) fails the
list, retriable (OWNER_INACTIVE): the broker link reaches brokers at their registration.

Pure: reads the ClusterView only (NodeNotLoaded when it lacks a node); one bundle per call, so
that a namespace of many bundles fetches its ownership nodes one read at a time.
"""

from __future__ import annotations

from pulsar_lookup_gateway.lookup.bundles import BundleRange, NamespaceBundles
from pulsar_lookup_gateway.lookup.model import ServiceUnitState
from pulsar_lookup_gateway.lookup.resolve import namespace_not_found, registered_owner
from pulsar_lookup_gateway.lookup.topics import NamespaceName
from pulsar_lookup_gateway.lookup.view import ClusterView

__all__ = ["bundles_with_owners", "holder_of"]


def bundles_with_owners(
    view: ClusterView, namespace: NamespaceName, table_view: bool | None = None
) -> NamespaceBundles | None:
    """The namespace's bundles, where the view can tell their owners; None where it cannot
    (the extensible load manager without its table view). NAMESPACE_NOT_FOUND when the
    namespace does not exist. `table_view`: the brokers' configured table view
    (ResolvePolicy.table_view; None: the tree's presence tells)."""
    bundles = view.bundles(namespace)
    if bundles is None:
        raise namespace_not_found(namespace)
    reads_tree = view.uses_table_view() if table_view is None else table_view
    if view.broker_registry().extensible and not reads_tree:
        return None
    return bundles


def holder_of(view: ClusterView, namespace: NamespaceName, bundle: BundleRange) -> str | None:
    """The registered broker (its id) that holds `bundle`'s topics; None when nobody does
    (see the module's rules)."""
    registry = view.broker_registry()
    broker_id: str | None
    if registry.extensible:
        data = view.service_unit_state(namespace, bundle.name)
        if data is None:
            return None
        if data.state is ServiceUnitState.OWNED:
            broker_id = data.dst_broker
        elif data.state in (ServiceUnitState.SPLITTING, ServiceUnitState.RELEASING):
            broker_id = data.source_broker  # it serves the topics until it lets go
        else:
            return None  # Init, Free, Assigning, Deleted: no broker has them loaded
        if not broker_id:
            return None
    else:
        owner = view.ownership(namespace, bundle.name)
        if owner is None:
            return None
        broker_id = owner.broker_id
        if broker_id is None:  # an older broker: the registration its URLs name, as a lookup
            urls = (owner.native_url, owner.native_url_tls, owner.http_url, owner.http_url_tls)
            broker_id = next((registry.by_url[u] for u in urls if u and u in registry.by_url), "")
    registered_owner(registry, broker_id, namespace, bundle, name_it=True)
    return broker_id
