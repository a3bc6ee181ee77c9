"""What a metadata write may change: the one rule every keeper of answers forgets by (the
answer memo of the binary and HTTP lookups, the ownership watch).

A write of a path (a trailing `/`: its children list; EVERY_PATH: the view was replaced) is
mapped to the keys of what it may change. Each keeper files what it holds under the keys its
answer read, and forgets what a write's keys name:

- ("bundle", tenant, namespace, bundle): one bundle's ownership node (/namespace, or the
  extensible load manager's /service_unit_state);
- ("children", tenant, namespace): the namespace's list of ownership nodes (whether a bundle
  is owned at all);
- ("ns", tenant, namespace): its policies or local policies (bundles, clusters, deletion,
  auto-creation, permissions);
- ("tenant", tenant): the tenant's node (admin roles) or its list of namespaces;
- ("topics", tenant, namespace): which of its topics exist (managed-ledger and partitioned-
  topic nodes): read by an HTTP lookup that may not create the topic, never by resolve(), so a
  binary answer is not filed under it (a ledger roll rewrites these nodes all the time);
- ("broker", id): one registration, rewritten by every load report: a keeper compares what it
  read of the registrations (resolve.broker_fingerprint, ownership_changes.registration_print)
  rather than forgetting at each rewrite;
- BROKERS: the list of registrations; LEADER: the load manager's leader (where unowned bundles
  are redirected); ALL: anything (the clusters, the list of tenants, the root's children,
  a path of no known shape).

Nodes no answer reads (schemas, ledgers, load data) map to no key.
"""

from __future__ import annotations

from pulsar_lookup_gateway.lookup.view import EVERY_PATH

Key = tuple[str, ...]
ALL: Key = ("all",)
BROKERS: Key = ("brokers",)
LEADER: Key = ("leader",)
#: Top-level nodes no answer reads.
_UNREAD_ROOTS = frozenset({"schemas", "ledgers"})


def keys_of_path(path: str) -> list[Key]:
    """The keys a write of `path` may affect (see the module's text)."""
    if path == EVERY_PATH:
        return [ALL]
    parts = path.split("/")
    if len(parts) < 2 or parts[0]:
        return [ALL]
    root = parts[1]
    if root in ("namespace", "service_unit_state"):
        return _ownership_keys(parts)
    if root == "loadbalance":
        return _loadbalance_keys(parts)
    if root == "managed-ledgers":
        return [("topics", parts[2], parts[3])] if len(parts) >= 4 and parts[3] else []
    if root == "admin":
        return _admin_keys(parts)
    if root in _UNREAD_ROOTS:
        return []
    return [ALL]  # the root's children (whether the table view is there), or a stranger


def _ownership_keys(parts: list[str]) -> list[Key]:
    if len(parts) >= 5 and parts[4]:
        if len(parts) > 5 or not parts[2] or not parts[3]:
            return [ALL]  # (no such node: nothing to tell it by)
        return [("bundle", parts[2], parts[3], parts[4])]
    if len(parts) >= 4 and parts[3] and parts[2]:
        return [("children", parts[2], parts[3])]
    return [ALL]  # a tenant's list of namespaces, or the root's: any namespace's ownership


def _loadbalance_keys(parts: list[str]) -> list[Key]:
    if len(parts) < 3 or not parts[2]:
        return [LEADER]  # /loadbalance's children: whether there is a leader
    if parts[2] == "leader" or parts[2] == "extension":  # (the extensible one's leader)
        return [LEADER]
    if parts[2] != "brokers":
        return []  # load data, bundle data, resource quotas: no answer reads them
    if len(parts) >= 4 and parts[3]:
        return [("broker", parts[3])]
    return [BROKERS]


def _admin_keys(parts: list[str]) -> list[Key]:
    if len(parts) < 3 or not parts[2]:
        return [ALL]  # /admin's children
    kind = parts[2]
    if kind in ("policies", "local-policies"):
        if len(parts) >= 5 and parts[4]:
            return [("ns", parts[3], parts[4])]
        if len(parts) >= 4 and parts[3]:
            return [("tenant", parts[3])]
        return [ALL]  # the list of tenants
    if kind == "partitioned-topics":
        return [("topics", parts[3], parts[4])] if len(parts) >= 5 and parts[4] else []
    if kind == "clusters":
        return [ALL]  # geo-replication redirects
    return []


def bundle_lower(name: str) -> int | None:
    """The lower bound of a bundle named `0xLLLLLLLL_0xUUUUUUUU`; None for anything else."""
    lower, _, upper = name.partition("_")
    if len(lower) != 10 or len(upper) != 10 or not lower.startswith("0x"):
        return None
    try:
        return int(lower, 16)
    except ValueError:
        return None
