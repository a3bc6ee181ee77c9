"""resolve-zones: every (topic, zone) pair resolved on Spark with the lookup core.

The Python API (loaded on first use: importing this package stays cheap for the command line):

    from pulsar_lookup_gateway.zones import resolve_zones, OwnershipDataSource
"""

from __future__ import annotations

from typing import Any

__all__ = ["OwnershipDataSource", "resolve_zones"]


def __getattr__(name: str) -> Any:
    if name == "resolve_zones":
        from pulsar_lookup_gateway.zones.api import resolve_zones

        return resolve_zones
    if name == "OwnershipDataSource":
        from pulsar_lookup_gateway.zones.ownership_source import OwnershipDataSource

        return OwnershipDataSource
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
