"""The fictional brokers of metadata_store.synthetic (10.0.0.x) moved to loopback addresses where
nothing listens, for a test whose gateway asks a broker (a lookup of an unowned bundle is
forwarded to the load manager's leader, issue 40): the connection is refused at once, the
documented ServiceNotReady path, instead of whatever answers at 10.0.0.x on the machine that runs
the tests (a sandbox's proxy answered there, and the lookup failed by accident)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_FICTIONAL = re.compile(r"\b10\.0\.0\.(\d{1,3}):\d+")
#: Nothing listens on port 1 (tcpmux, unused) of 127.0.0.x: a connection there is refused.
NOWHERE_PORT = 1


def nowhere(i: int) -> str:
    """Where broker 10.0.0.`i` is moved: its own loopback address (brokers stay distinct)."""
    return f"127.0.1.{i}:{NOWHERE_PORT}"


def unreachable(nodes: Mapping[str, Any]) -> dict[str, Any]:
    """`nodes` with every 10.0.0.x:port in a node's content replaced by `nowhere(x)`."""
    return {path: unreachable_node(node) for path, node in nodes.items()}


def unreachable_node(content: Any) -> Any:
    """One node's content (decoded JSON) with every 10.0.0.x:port replaced by `nowhere(x)`."""
    if isinstance(content, str):
        return _FICTIONAL.sub(lambda match: nowhere(int(match.group(1))), content)
    if isinstance(content, dict):
        return {key: unreachable_node(item) for key, item in content.items()}
    if isinstance(content, list):
        return [unreachable_node(item) for item in content]
    return content
