"""`standalone`: a ZooKeeper server with a demo cluster, and a gateway in front of it."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from console.exit_codes import EXIT_FAILED, EXIT_USAGE
from gateway.startup import load_or_report, serve_config, setup_logging
from listeners.config import GatewayConfig
from metadata_store.admin import connected, seed
from metadata_store.embedded_zookeeper import EmbeddedZooKeeper, ZooKeeperUnavailable
from metadata_store.snapshot import SnapshotError, read_snapshot
from tls.devcerts import standalone_tls_env


def cmd_standalone(args: argparse.Namespace) -> int:
    setup_logging()
    try:
        nodes = read_snapshot(args.snapshot)
    except SnapshotError as exc:
        print(f"--snapshot: {exc}", file=sys.stderr)
        return EXIT_USAGE
    zookeeper = EmbeddedZooKeeper(port=args.zookeeper_port)
    try:
        zookeeper.start()
    except ZooKeeperUnavailable as exc:
        print(f"standalone: {exc}", file=sys.stderr)
        return EXIT_FAILED
    try:
        with connected(zookeeper.connect_string) as client:
            seed(client, nodes)
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
            banner = _standalone_banner(
                loaded.config, zookeeper.connect_string, args.snapshot, Path(certs)
            )
            print(banner)
            return serve_config(loaded.config)
    finally:
        zookeeper.close()


def _standalone_banner(
    config: GatewayConfig, zk: str, snapshot: Path, certs: Path | None = None
) -> str:
    topic = "persistent/public/default/orders-partition-1"
    lines = [
        "",
        f"pulsar-lookup-gateway standalone: ZooKeeper at {zk}, seeded with {snapshot}.",
        "Try (Ctrl-C stops the gateway and ZooKeeper):",
    ]
    for spec in config.sockets():
        url = spec.endpoint.url
        if spec.endpoint.scheme.value == "http":
            lines.append(f"  curl -s {url}/lookup/v2/topic/{topic}    # listener {spec.listener}")
        elif spec.endpoint.scheme.value == "https" and certs is not None:
            lines.append(
                f"  curl -s --cacert {certs / 'ca.crt'} {url}/lookup/v2/topic/{topic}"
                f"    # listener {spec.listener}, TLS"
            )
    if certs is not None and any(spec.tls for spec in config.sockets()):
        lines.append(
            f"  TLS clients trust {certs / 'ca.crt'} (a development CA, deleted at exit), e.g."
            " pulsar.Client('pulsar+ssl://127.0.0.1:6651', tls_trust_certs_file_path=...)"
        )
    lines += [
        f"  pulsar-lookup-gateway lookup orders-partition-3 --listener external --metadata zk:{zk}",
        "  curl -s http://127.0.0.1:8080/admin/v2/gateway/listeners",
        "",
    ]
    return "\n".join(lines)
