"""What a `zk:` source reads before it says it is ready, besides the brokers and the leader: the
policies, local policies and bundle ownership of every namespace its store holds, so that a
replica's first lookups read no znode (each such read costs a round trip and its hand-over; a
sweep over 100,000 bundles read one at a time ran at 1/65 of the warm rate).

The walk reads, level by level and in bulk (zk_bulk): the roots' children lists (tenants), the
tenants' lists (namespaces), each namespace's policies, local policies and list of owned bundles,
then every ownership node listed. Lists a lookup reads are stored and watched, as a lookup's own
read would; the lists above them (/namespace's tenants, a tenant's namespaces under /namespace,
the list of tenants under /admin/local-policies) are read without a watch only to find the rest,
since no lookup reads them and a watch would fire at every new tenant or namespace. A root this
store does not hold (a separate configuration store holds the policies) is walked no further.

Bounded by `limit` znodes (memory: ~1 KiB of view and watch per ownership node); past it the
rest are read on first use, as before.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterable

from pulsar_lookup_gateway.lookup.errors import NodeNotLoaded
from pulsar_lookup_gateway.lookup.model import (
    LOCAL_POLICIES_ROOT,
    NAMESPACE_ROOT,
    POLICIES_ROOT,
    SERVICE_UNIT_STATE_ROOT,
)
from pulsar_lookup_gateway.metadata_store.zk_bulk import BulkRead
from pulsar_lookup_gateway.metadata_store.zk_reader import CHILDREN, ZnodeReader
from pulsar_lookup_gateway.metadata_store.zk_session import ZkSession

PRELOAD_LIMIT = 1_000_000  # znodes read ahead at most (past it: on first use)
#: Roots whose tenants' namespaces are preloaded (the policies' own list is read by lookups).
_DISCOVERED = (POLICIES_ROOT, LOCAL_POLICIES_ROOT, NAMESPACE_ROOT, SERVICE_UNIT_STATE_ROOT)
#: Roots whose namespaces' children are what a lookup reads (ownership).
_OWNERSHIP = (NAMESPACE_ROOT, SERVICE_UNIT_STATE_ROOT)


class Preload:
    def __init__(
        self, reader: ZnodeReader, session: ZkSession, timeout: float, limit: int = PRELOAD_LIMIT
    ) -> None:
        self._reader = reader
        self._session = session
        self._timeout = timeout
        self.limit = limit
        self.read = 0  # znodes walked by the last run
        self._done: Collection[str] = ()

    async def _read(self, paths: Iterable[str], *, watched: bool = True) -> dict[str, list[str]]:
        wanted = list(paths)[: max(0, self.limit - self.read)]
        self.read += len(wanted)
        done = self._done if watched else frozenset()
        unread = [path for path in wanted if path not in done]
        bulk = BulkRead(self._reader, self._session, unread, watched=watched, timeout=self._timeout)
        lists = await bulk.run()
        view = self._reader.view
        for path in wanted:  # (lists this rebuild read already: as the view holds them now)
            if path in done and path.endswith(CHILDREN):
                with contextlib.suppress(NodeNotLoaded):
                    lists[path] = list(view.child_names(path[: -len(CHILDREN)]))
        return lists

    async def run(self, done: Collection[str] = ()) -> int:
        """Read ahead what lookups read, but `done` (read again, and watched, by this rebuild
        already); the number of znodes walked."""
        self.read = 0
        self._done = done
        roots = await self._read((root + CHILDREN for root in _DISCOVERED), watched=False)
        tenants = {root[: -len(CHILDREN)]: names for root, names in roots.items()}
        # The lists lookups read (stored, watched): the tenants with policies, and each
        # tenant's namespaces with policies or local policies.
        stored: list[str] = []
        if POLICIES_ROOT in tenants:
            stored.append(POLICIES_ROOT + CHILDREN)
            stored += (f"{POLICIES_ROOT}/{t}{CHILDREN}" for t in tenants[POLICIES_ROOT])
        # (a tenant none of whose namespaces has local policies yet: its list is absent, and
        # watched for its creation, as a lookup's read would)
        with_local = {*tenants.get(POLICIES_ROOT, ()), *tenants.get(LOCAL_POLICIES_ROOT, ())}
        stored += (f"{LOCAL_POLICIES_ROOT}/{t}{CHILDREN}" for t in sorted(with_local))
        if SERVICE_UNIT_STATE_ROOT in tenants:
            stored.append(CHILDREN)  # (the root's list says the table view is there)
        lists = await self._read(stored)
        found = await self._read(
            (
                f"{root}/{t}{CHILDREN}"
                for root in _OWNERSHIP
                if root in tenants
                for t in tenants[root]
            ),
            watched=False,
        )
        namespaces: set[str] = set()  # tenant/namespace
        nodes: list[str] = []
        for root in (POLICIES_ROOT, LOCAL_POLICIES_ROOT):
            for t in with_local:
                for ns in lists.get(f"{root}/{t}{CHILDREN}", ()):
                    namespaces.add(f"{t}/{ns}")
                    nodes.append(f"{root}/{t}/{ns}")
        for root in _OWNERSHIP:
            for t in tenants.get(root, ()):
                namespaces.update(f"{t}/{ns}" for ns in found.get(f"{root}/{t}{CHILDREN}", ()))
        # Each namespace's owned bundles, in the roots this store holds, and its policies.
        ownership = [
            f"{root}/{ns}{CHILDREN}" for root in _OWNERSHIP if root in tenants for ns in namespaces
        ]
        owned = await self._read([*ownership, *nodes])
        await self._read(
            f"{path[: -len(CHILDREN)]}/{bundle}"
            for path in ownership
            for bundle in owned.get(path, ())
        )
        return self.read
