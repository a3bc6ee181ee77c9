"""What every command that starts a gateway does: the config (its problems printed),
the checks of what the config needs from this host, and running the gateway until a signal
stops it."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import socket
import sys
from collections.abc import Collection, Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from pulsar_lookup_gateway.console.exit_codes import EXIT_FAILED, EXIT_OK
from pulsar_lookup_gateway.gateway import factories
from pulsar_lookup_gateway.gateway.logs import access_log_enabled
from pulsar_lookup_gateway.gateway.socket_names import CannotListen
from pulsar_lookup_gateway.listeners.auth import AuthConfigError
from pulsar_lookup_gateway.listeners.config.model import (
    ConfigError,
    GatewayConfig,
    LoadedConfig,
    load_config,
)
from pulsar_lookup_gateway.listeners.endpoints.socket_table import SocketSpec, socket_conflicts
from pulsar_lookup_gateway.metadata_store.snapshot import SnapshotError, read_snapshot
from pulsar_lookup_gateway.tls.errors import TlsConfigError
from pulsar_lookup_gateway.tls.reload import ListenerTls


def load_or_report(
    path: Path, env: Mapping[str, str] | None = None, *, strict: bool = False
) -> LoadedConfig | None:
    """The config at `path`, its warnings printed; None with its problems printed.
    `strict`: every key the gateway does not use is a problem (check-config's --strict)."""
    try:
        loaded = load_config(path, os.environ if env is None else env, strict=strict)
    except ConfigError as exc:
        report_config_error(path, exc)
        return None
    for warning in loaded.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    return loaded


def report_config_error(path: Path, exc: ConfigError) -> None:
    for warning in exc.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    print(f"{path}: {len(exc.problems)} problem(s):", file=sys.stderr)
    for problem in exc.problems:
        print(f"  - {problem}", file=sys.stderr)


def report_host_problems(path: Path, problems: list[str]) -> None:
    print(f"{path}: {len(problems)} problem(s) on this host would stop `run`:", file=sys.stderr)
    for problem in problems:
        print(f"  - {problem}", file=sys.stderr)


def serve_config(
    config: GatewayConfig,
    *,
    reuse_port: bool = False,
    access_log: bool | None = None,
    in_use_hint: str = "",
) -> int:
    """Run a gateway until a signal stops it. `access_log`: None, as setup_logging() set it.
    `in_use_hint`: added to the error when a socket's address is in use."""
    # The servers load here, not when a command that serves nothing starts.
    from pulsar_lookup_gateway.gateway.process import Gateway, serve

    if access_log is None:
        access_log = access_log_enabled()
    try:
        asyncio.run(serve(Gateway(config, reuse_port=reuse_port, access_log=access_log)))
    except (TlsConfigError, AuthConfigError, SnapshotError, OSError) as exc:
        hint = ""
        if isinstance(exc, CannotListen) and exc.errno == errno.EADDRINUSE and in_use_hint:
            hint = f"; {in_use_hint}"
        logging.getLogger("pulsar_lookup_gateway.gateway.process").error(
            "cannot start: %s%s", exc, hint
        )
        return EXIT_FAILED
    return EXIT_OK


#: The keys the authenticator is built from (with listener.<name>.authenticationRequired).
AUTHENTICATION_KEYS = frozenset(
    {
        "authenticationEnabled",
        "authenticationProviders",
        "authorizationEnabled",
        "tokenSecretKey",
        "tokenPublicKey",
        "tokenPublicAlg",
        "tokenAuthClaim",
        "tokenAudienceClaim",
        "tokenAudience",
        "listenerSettings",
    }
)


def host_problems(config: GatewayConfig, troubled: Collection[str] = ()) -> list[str]:
    """What would stop `run` on this host: TLS material, token keys or a snapshot that cannot
    be read or parsed, and sockets that cannot be bound. Loads everything the way `run` does,
    but reports every problem instead of stopping at the first.

    `config` may be what validated of a config with problems (ConfigError.partial), and
    `troubled` the keys that have them: a check that reads one of those keys is not made, as
    its outcome would only repeat that problem; two sockets on one address (a problem of the
    config) bind the first only."""
    troubled = frozenset(troubled)
    problems: list[str] = []
    for listener, settings in config.tls_settings().items():
        if not settings.has_material or troubled & set(settings.keys.values()):
            continue  # the config's problem already: no material, or a key that failed
        try:
            ListenerTls.from_settings(listener, settings)
        except TlsConfigError as exc:  # names the listener, key and file; never a password
            problems.append(str(exc))
    if not troubled & AUTHENTICATION_KEYS and not any(
        key.endswith(".authenticationRequired") for key in troubled
    ):
        try:
            factories.authenticator(config)
        except AuthConfigError as exc:
            problems.append(str(exc))
    url = config.metadata_store_url
    if url.kind == "file" and "metadataStoreUrl" not in troubled:
        try:
            read_snapshot(Path(url.path))
        except SnapshotError as exc:
            problems.append(f"metadataStoreUrl: {exc}")
    return problems + bind_problems(apart(config.sockets()))


def apart(specs: list[SocketSpec]) -> list[SocketSpec]:
    """The sockets, but for any that the config already says clashes with an earlier one (a
    valid config has none): binding it would report the same problem again."""
    kept: list[SocketSpec] = []
    for spec in specs:
        if not socket_conflicts([*kept, spec]):
            kept.append(spec)
    return kept


def bind_problems(specs: list[SocketSpec]) -> list[str]:
    """Bind every socket (all at once, as `run` holds them), then close them all; one problem
    per socket that cannot be bound, with the OS error. Port 0 always binds (a new port)."""
    problems: list[str] = []
    with ExitStack() as bound:
        for spec in specs:
            host, port = spec.endpoint.host, spec.endpoint.port
            try:
                # Every address the host resolves to, as asyncio's create_server binds them.
                infos = socket.getaddrinfo(
                    host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
                )
            except OSError as exc:
                problems.append(str(CannotListen(spec, exc)))
                continue
            try:
                for family, _type, _proto, _name, address in dict.fromkeys(infos):
                    _listen(bound.enter_context(socket.socket(family)), address)
            except OSError as exc:
                problems.append(str(CannotListen(spec, exc)))
    return problems


def _listen(sock: socket.socket, address: tuple[Any, ...]) -> None:
    # The options asyncio's create_server sets, so that this binds exactly when `run` would.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if sock.family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    sock.bind(address)
    sock.listen()
