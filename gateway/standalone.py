"""`standalone`: a ZooKeeper server with a demo cluster, and a gateway in front of it."""

from __future__ import annotations

import argparse
import errno
import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pulsar_lookup_gateway.console.exit_codes import EXIT_FAILED, EXIT_USAGE
from pulsar_lookup_gateway.gateway.logs import ACCESS_LOG_HELP, setup_logging
from pulsar_lookup_gateway.gateway.port_offset import (
    PORT_OFFSET_HELP,
    PortOffsetError,
    shift_ports,
)
from pulsar_lookup_gateway.gateway.startup import bind_problems, load_or_report, serve_config
from pulsar_lookup_gateway.listeners.config.model import GatewayConfig
from pulsar_lookup_gateway.metadata_store.admin import connected, seed
from pulsar_lookup_gateway.metadata_store.embedded_zookeeper import (
    EmbeddedZooKeeper,
    ZooKeeperUnavailable,
)
from pulsar_lookup_gateway.metadata_store.snapshot import SnapshotError, read_snapshot
from pulsar_lookup_gateway.tls.devcerts import standalone_tls_env

PROG = "pulsar-lookup-gateway"
# configs/ beside the packages (a source checkout or an editable install), else the cwd's.
_CONFIGS = Path(__file__).resolve().parents[1] / "configs"
CONFIGS = _CONFIGS if _CONFIGS.is_dir() else Path("configs")
#: Offsets `standalone` suggests when a port of the demo is taken (a local Pulsar's 6650, 8080).
SUGGESTED_OFFSETS = (10000, 20000, 30000, 40000, 50000)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, default=CONFIGS / "standalone.conf")
    parser.add_argument("--snapshot", type=Path, default=CONFIGS / "demo-cluster.json")
    parser.add_argument("--zookeeper-port", type=int, default=0, help="default: a free one")
    parser.add_argument("--port-offset", type=int, default=0, metavar="N", help=PORT_OFFSET_HELP)
    parser.add_argument("--access-log", action="store_true", help=ACCESS_LOG_HELP)
    parser.set_defaults(handler=cmd_standalone)


def cmd_standalone(args: argparse.Namespace) -> int:
    setup_logging()
    try:
        nodes = read_snapshot(args.snapshot)
    except SnapshotError as exc:
        print(f"--snapshot: {exc}", file=sys.stderr)
        return EXIT_USAGE
    zookeeper = EmbeddedZooKeeper(port=args.zookeeper_port)  # its port; started below
    try:
        # Development certificates for the TLS sockets, removed when standalone stops;
        # PULSAR_GATEWAY_tls* set in the environment win over them.
        with tempfile.TemporaryDirectory(prefix="pulsar-gateway-dev-certs-") as certs:
            env = {
                **standalone_tls_env(Path(certs)),
                **os.environ,
                "PULSAR_GATEWAY_metadataStoreUrl": f"zk:{zookeeper.connect_string}",
            }
            loaded = load_or_report(args.config, env)
            if loaded is None:
                return EXIT_USAGE
            try:
                config = shift_ports(loaded.config, args.port_offset)
            except PortOffsetError as exc:
                print(f"standalone: --port-offset {args.port_offset}: {exc}", file=sys.stderr)
                return EXIT_USAGE
            # Before anything starts or is printed: a local Pulsar holds 6650 and 8080.
            taken = bind_problems(config.sockets())
            if taken:
                print(f"standalone: {len(taken)} socket(s) cannot listen:", file=sys.stderr)
                for problem in taken:
                    print(f"  - {problem}", file=sys.stderr)
                if any(IN_USE_ERROR in problem for problem in taken):
                    hint = offset_hint(loaded.config, args.port_offset)
                    print(f"standalone: {hint}", file=sys.stderr)
                return EXIT_FAILED
            try:
                zookeeper.start()
            except ZooKeeperUnavailable as exc:
                print(f"standalone: {exc}", file=sys.stderr)
                return EXIT_FAILED
            with connected(zookeeper.connect_string) as client:
                seed(client, nodes)
            banner = _standalone_banner(
                config,
                zookeeper.connect_string,
                args.snapshot,
                Path(certs),
                nodes,
                args.config,
                port_offset=args.port_offset,
            )
            print(banner)
            # Taken between the check above and now: no time to look for a free offset.
            return serve_config(config, in_use_hint=f"{IN_USE} with --port-offset N")
    finally:
        zookeeper.close()


def offset_hint(config: GatewayConfig, current: int) -> str:
    """What to do about a port in use: the first of SUGGESTED_OFFSETS that this config takes
    and whose every port is free now."""
    for offset in SUGGESTED_OFFSETS:
        if offset == current:
            continue
        try:
            moved = shift_ports(config, offset)
        except PortOffsetError:
            continue
        if not bind_problems(moved.sockets()):
            return f"{IN_USE} with `{PROG} standalone --port-offset {offset}` (free now)"
    return f"{IN_USE} with `{PROG} standalone --port-offset N`"


IN_USE_ERROR = os.strerror(errno.EADDRINUSE)  # "Address already in use"
#: The start of the hint for a port in use.
IN_USE = "another process (a local Pulsar?) listens there: move every port of the config"


def _standalone_banner(
    config: GatewayConfig,
    zk: str,
    snapshot: Path,
    certs: Path | None = None,
    nodes: Mapping[str, Any] | None = None,
    config_path: Path | None = None,
    *,
    port_offset: int = 0,
) -> str:
    """What to try on the demo. `config` is the one served (its ports shifted by
    `port_offset`); the `explain` line passes the offset on, for explain reads the file."""
    topic = "persistent/public/default/orders-partition-1"
    lines = [
        "",
        f"pulsar-lookup-gateway standalone: ZooKeeper at {zk}, seeded with {snapshot}.",
        "Try (Ctrl-C stops the gateway and ZooKeeper):",
    ]
    for spec in config.sockets():
        url = spec.endpoint.url
        if spec.endpoint.scheme.value == "http":
            lines.append(f"  curl -s {url}/lookup/v2/topic/{topic}    # listener '{spec.listener}'")
        elif spec.endpoint.scheme.value == "https" and certs is not None:
            lines.append(
                f"  curl -s --cacert {certs / 'ca.crt'} {url}/lookup/v2/topic/{topic}"
                f"    # listener '{spec.listener}', TLS"
            )
    by_scheme: dict[str, str] = {}  # the first socket of each scheme
    for spec in config.sockets():
        by_scheme.setdefault(spec.endpoint.scheme.value, spec.endpoint.url)
    if certs is not None:
        lines += tls_client_lines(config, certs / "ca.crt", nodes or {})
    command = sys.argv[0] if sys.argv[0].endswith("pulsar-lookup-gateway") else PROG
    lines.append(f"  {command} lookup orders-partition-3 --listener external --metadata zk:{zk}")
    sockets = config.sockets()
    if sockets:  # a TLS socket the brokers advertise TLS URLs for, else the first socket
        with_tls = tls_listeners_of_brokers(nodes or {})
        shown = next(
            (s for s in sockets if s.tls and s.listener in with_tls and s.listener), sockets[0]
        )
        offset = f" --port-offset {port_offset}" if port_offset else ""
        lines.append(
            f"  {command} explain orders-partition-1 --config {config_path or CONFIG_HINT}{offset}"
            f" --metadata zk:{zk} --socket {shown.listener or '-'}:{shown.endpoint.scheme.value}"
            "    # why this answer"
        )
    lines.append(
        f"  {command} demo move orders-partition-1 broker-2 --metadata zk:{zk}"
        "    # also: demo unload, demo stop-broker"
    )
    if "http" in by_scheme:
        lines.append(f"  curl -s {by_scheme['http']}/admin/v2/gateway/listeners")
    lines += DEMO_CLIENTS
    return "\n".join(lines)


#: The config to name in the banner's explain example (the one standalone runs by default).
CONFIG_HINT = "configs/standalone.conf"


def tls_listeners_of_brokers(nodes: Mapping[str, Any]) -> set[str]:
    """The listeners some broker of a snapshot advertises a binary TLS URL on
    (brokerServiceUrlTls in its registration's advertisedListeners)."""
    found: set[str] = set()
    for path, data in nodes.items():
        if not path.startswith("/loadbalance/brokers/") or not isinstance(data, dict):
            continue
        listeners = data.get("advertisedListeners")
        if isinstance(listeners, dict):
            found |= {
                name
                for name, urls in listeners.items()
                if isinstance(urls, dict) and urls.get("brokerServiceUrlTls")
            }
    return found


def tls_client_lines(config: GatewayConfig, ca: Path, nodes: Mapping[str, Any]) -> list[str]:
    """How a TLS client tries the demo: on a pulsar+ssl socket of a listener the brokers
    advertise a TLS URL on; and, for a listener they do not, what its TLS clients get."""
    tls_sockets = [s for s in config.sockets() if s.endpoint.scheme.value == "pulsar+ssl"]
    with_tls = tls_listeners_of_brokers(nodes)
    usable = [s for s in tls_sockets if s.listener in with_tls]
    lines = []
    if usable:
        lines.append(
            f"  TLS clients trust {ca} (a development CA, deleted at exit), e.g."
            f" pulsar.Client('{usable[0].endpoint.url}', tls_trust_certs_file_path=...)"
            f"    # listener '{usable[0].listener}'"
        )
    for spec in tls_sockets:
        if spec.listener in with_tls:
            continue
        name = spec.listener or "(untagged)"
        lines += [
            f"  TLS on {spec.endpoint.url} (listener '{name}') fails: the demo's brokers "
            f"advertise no TLS URL on '{name}'",
            "  (as brokers without brokerServicePortTls), so its lookups answer "
            "brokerServiceUrlTls '' and a TLS client",
            '  logs "Invalid Url, unable to parse" and raises pulsar.ConnectError; '
            + (f"use {usable[0].endpoint.url} above." if usable else "use a plaintext socket."),
        ]
    return lines


#: What a client of the demo can and cannot do, said where the demo starts.
DEMO_CLIENTS = [
    "Python clients need the pulsar-client wheel, which `make run` does not install:",
    "  .venv/bin/pip install pulsar-client",
    "The demo's brokers are fictional: lookups answer with their addresses, where nothing",
    "listens. A producer or consumer created through the gateway then connects there: on the",
    "internal listener (10.0.0.x) it retries until its operation timeout (30 s by default;",
    "operation_timeout_seconds=5 is quicker) and raises pulsar.Timeout; on the external one",
    "the names (*.pulsar.example.com) do not resolve and it raises pulsar.ConnectError.",
    "",
]
