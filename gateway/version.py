"""The gateway's version: the installed distribution's (`--version`, the build_info metric)."""

from __future__ import annotations

import functools
from importlib.metadata import PackageNotFoundError, version

DISTRIBUTION = "pulsar-lookup-gateway"


@functools.cache  # read from the installed metadata once
def gateway_version() -> str:
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:  # sources run without installing them
        return "unknown"
