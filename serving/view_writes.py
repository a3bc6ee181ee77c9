"""What a write to the cluster view can change of the lookup answers, for the caches whose
entries outlive view versions (a write of one bundle's owner must not throw away the answers of
every other bundle: under load, re-making them costs the loop a long turn per write).

resolve() reads, of one topic, its namespace's nodes, its bundle's owner and the registered
brokers. So a write of a bundle's ownership node changes the answers of that bundle only (and a
namespace's list of owned bundles those of that namespace); a rewritten broker registration
changes nothing unless what resolve() reads of the brokers changed (load reports rewrite them
all the time, so that is compared, by `broker_fingerprint`); the nodes resolve() never reads
(managed ledgers, partitioned-topic metadata, schemas) change nothing; anything else, and a new
view, may change any answer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

#: Roots of the nodes that hold one bundle's owner: `<root>/<tenant>/<namespace>/<bundle>`.
OWNER_ROOTS = ("/namespace/", "/service_unit_state/")
BROKERS_PREFIX = "/loadbalance/brokers/"
#: Nodes no lookup reads (resolve() never touches them).
UNREAD_PREFIXES = ("/managed-ledgers/", "/admin/partitioned-topics/", "/schemas/")


class ObservedView(Protocol):
    def observe(self, observer: Callable[[str], None]) -> None: ...
    def unobserve(self, observer: Callable[[str], None]) -> None: ...


class Forgetting(Protocol):
    """A cache told what a write may have changed. `namespace` is `tenant/namespace`."""

    def forget_bundle(self, namespace: str, lower: int) -> None:
        """The answers of the bundle of `namespace` whose lower bound is `lower`."""

    def forget_namespace(self, namespace: str) -> None: ...
    def clear(self) -> None: ...


class WriteFollower:
    """Follows one view's writes on behalf of `caches` and tells each what to forget.
    `registry_fingerprint(view)`: what lookups read of the registered brokers (raising means
    "cannot tell"); it is compared lazily, by `check`, when a registration was rewritten."""

    def __init__(
        self, registry_fingerprint: Callable[[Any], object], caches: Sequence[Forgetting]
    ) -> None:
        self._fingerprint = registry_fingerprint
        self._caches = tuple(caches)
        self._view: ObservedView | None = None
        self._brokers: object = None
        self._brokers_unchecked = False

    def check(self, view: ObservedView) -> None:
        """Before answers are read from the caches or added to them, with `view` the current
        view: follow it (another view than the one followed so far clears them all) and settle
        a rewritten registration."""
        if view is not self._view:
            self.close()
            self._view = view
            view.unobserve(self._changed)  # (a view handed over brings its observers along)
            view.observe(self._changed)
            self._brokers = self._registry_or_none()
        elif self._brokers_unchecked:
            self._brokers_unchecked = False
            now = self._registry_or_none()
            if now is None or now != self._brokers:
                self._clear()
            self._brokers = now

    def close(self) -> None:
        """Stop following (and forget everything: nothing keeps the caches fresh any more)."""
        if self._view is not None:
            self._view.unobserve(self._changed)
            self._view = None
        self._brokers_unchecked = False
        self._clear()

    def _registry_or_none(self) -> object:
        try:
            return self._fingerprint(self._view)
        except Exception:  # (a partial view that lacks a registration: cannot tell)
            return None

    def _clear(self) -> None:
        for cache in self._caches:
            cache.clear()

    def _anything_changed(self) -> None:
        """Forget everything, and take what lookups read of the brokers anew at the next check
        (the write may have changed it: a registration compared later against an older
        reading could look unchanged while answers made in between read another one)."""
        self._clear()
        self._brokers_unchecked = True

    def _changed(self, path: str) -> None:
        for root in OWNER_ROOTS:
            if path.startswith(root):
                self._owner_changed(path[len(root) :])
                return
        if path.startswith(BROKERS_PREFIX) and not path.endswith("/"):
            self._brokers_unchecked = True
        elif not path.startswith(UNREAD_PREFIXES):
            self._anything_changed()

    def _owner_changed(self, rest: str) -> None:
        """`rest`: `<tenant>/<namespace>/<bundle>`, or `<tenant>/<namespace>/` (the list of
        the namespace's owned bundles)."""
        parts = rest.split("/")
        if len(parts) != 3 or not parts[0] or not parts[1]:
            self._anything_changed()
            return
        namespace = f"{parts[0]}/{parts[1]}"
        lower = bundle_lower(parts[2])
        for cache in self._caches:
            if lower is None:
                cache.forget_namespace(namespace)
            else:
                cache.forget_bundle(namespace, lower)


def bundle_lower(name: str) -> int | None:
    """The lower bound of a bundle named `0xLLLLLLLL_0xUUUUUUUU`; None for anything else (a
    children list's empty name among them)."""
    lower, _, upper = name.partition("_")
    if len(lower) != 10 or len(upper) != 10 or not lower.startswith("0x"):
        return None
    try:
        return int(lower, 16)
    except ValueError:
        return None
