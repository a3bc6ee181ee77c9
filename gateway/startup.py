"""What every command that starts a gateway does: logging, the config (its problems printed),
and running the gateway until a signal stops it."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from console.exit_codes import EXIT_FAILED, EXIT_OK
from listeners.config import ConfigError, GatewayConfig, LoadedConfig, load_config
from metadata_store.snapshot import SnapshotError


def setup_logging(prefix: str = "") -> None:
    logging.basicConfig(
        level=os.environ.get("PULSAR_GATEWAY_LOG_LEVEL", "INFO").upper(),
        format=f"%(asctime)s %(levelname)s {prefix}%(name)s: %(message)s",
    )
    logging.getLogger("kazoo.client").setLevel(logging.WARNING)


def load_or_report(path: Path, env: Mapping[str, str] | None = None) -> LoadedConfig | None:
    try:
        loaded = load_config(path, os.environ if env is None else env)
    except ConfigError as exc:
        print(f"{path}: {len(exc.problems)} problem(s):", file=sys.stderr)
        for problem in exc.problems:
            print(f"  - {problem}", file=sys.stderr)
        return None
    for warning in loaded.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    return loaded


def serve_config(config: GatewayConfig, *, reuse_port: bool = False) -> int:
    # The servers load here, not when a command that serves nothing starts.
    from gateway.process import Gateway, serve
    from listeners.auth import AuthConfigError
    from tls.errors import TlsConfigError

    try:
        asyncio.run(serve(Gateway(config, reuse_port=reuse_port)))
    except (TlsConfigError, AuthConfigError, SnapshotError, OSError) as exc:
        logging.getLogger("gateway.process").error("cannot start: %s", exc)
        return EXIT_FAILED
    return EXIT_OK
