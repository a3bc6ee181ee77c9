"""The `pulsar-lookup-gateway` command line."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from listeners.config import ConfigError, GatewayConfig, LoadedConfig, load_config
from lookup.errors import LookupFailure
from lookup.metadata_url import MetadataUrl, parse_metadata_url
from lookup.resolve import LookupAnswer, ResolvePolicy
from lookup.service import LookupService
from lookup.snapshot import SnapshotError, read_snapshot, write_snapshot
from lookup.sources import open_source

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
# configs/ beside the packages (a source checkout or an editable install), else the cwd's.
_CONFIGS = Path(__file__).resolve().parents[1] / "configs"
CONFIGS = _CONFIGS if _CONFIGS.is_dir() else Path("configs")


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.handler(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # output piped into `head` and the like: not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED
    return code


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pulsar-lookup-gateway",
        description="Answer Apache Pulsar topic lookups per network listener (PIP-95).",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    check = sub.add_parser("check-config", help="validate a config and print its socket table")
    check.add_argument("--config", required=True, type=Path, help="broker.conf-style file")
    check.set_defaults(handler=cmd_check_config)

    lookup = sub.add_parser("lookup", help="resolve one topic against cluster metadata")
    lookup.add_argument("topic", help="full or short topic name")
    lookup.add_argument("--listener", help="advertised listener name (default: internal)")
    lookup.add_argument("--metadata", required=True, help="zk:host:port[/chroot] or file:PATH")
    lookup.add_argument("--config", type=Path, help="gateway config (bundle defaults, redirects)")
    lookup.set_defaults(handler=cmd_lookup)

    run = sub.add_parser("run", help="run the gateway")
    run.add_argument("--config", required=True, type=Path, help="broker.conf-style file")
    run.add_argument(
        "--workers", type=int, default=1, help="gateway processes sharing the ports (SO_REUSEPORT)"
    )
    run.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    run.set_defaults(handler=cmd_run)

    standalone = sub.add_parser(
        "standalone", help="start a ZooKeeper with a demo cluster and a gateway in front of it"
    )
    standalone.add_argument("--config", type=Path, default=CONFIGS / "standalone.conf")
    standalone.add_argument("--snapshot", type=Path, default=CONFIGS / "demo-cluster.json")
    standalone.add_argument("--zookeeper-port", type=int, default=0, help="default: a free one")
    standalone.set_defaults(handler=cmd_standalone)

    seed = sub.add_parser("seed", help="write a snapshot into ZooKeeper in Pulsar's layout")
    seed.add_argument("--metadata", required=True, help="zk:host:port[/chroot]")
    seed.add_argument("--snapshot", required=True, type=Path)
    seed.set_defaults(handler=cmd_seed)

    dump = sub.add_parser("dump", help="write the znodes the gateway reads as a snapshot")
    dump.add_argument("--metadata", required=True, help="zk:host:port[/chroot]")
    dump.add_argument("--out", required=True, type=Path)
    dump.set_defaults(handler=cmd_dump)

    from lookup.zones_cli import register as register_resolve_zones
    from tls.devcerts import register as register_certs

    register_certs(sub)
    register_resolve_zones(sub)
    return parser


def _setup_logging(prefix: str = "") -> None:
    logging.basicConfig(
        level=os.environ.get("PULSAR_GATEWAY_LOG_LEVEL", "INFO").upper(),
        format=f"%(asctime)s %(levelname)s {prefix}%(name)s: %(message)s",
    )
    logging.getLogger("kazoo.client").setLevel(logging.WARNING)


def _load(path: Path, env: Mapping[str, str] | None = None) -> LoadedConfig | None:
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


def cmd_check_config(args: argparse.Namespace) -> int:
    loaded = _load(args.config)
    if loaded is None:
        return EXIT_USAGE
    print(describe_config(loaded.config))
    return EXIT_OK


def describe_config(config: GatewayConfig) -> str:
    lines = [f"metadata store     {config.metadata_store_url}"]
    lines.append(f"internal listener  {config.internal_listener_name or '-'}")
    lines.append("advertised listeners:")
    for listener in config.advertised_listeners:
        urls = " ".join(e.url for e in listener.endpoints)
        lines.append(f"  {listener.name:<16} {urls}")
    if not config.advertised_listeners:
        lines.append("  (none: every lookup answers with the brokers' default URLs)")
    lines.append("sockets:")
    rows = [("ADDRESS", "SCHEME", "LISTENER", "TLS", "FROM")]
    for spec in config.sockets():
        rows.append(
            (
                spec.endpoint.address,
                spec.endpoint.scheme.value,
                spec.listener or "-",
                "yes" if spec.tls else "no",
                spec.origin,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        lines.append("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))
    if len(rows) == 1:
        lines.append("  (none: the gateway would listen nowhere)")
    return "\n".join(line.rstrip() for line in lines)


def cmd_lookup(args: argparse.Namespace) -> int:
    policy = ResolvePolicy()
    internal: str | None = None
    if args.config is not None:
        loaded = _load(args.config)
        if loaded is None:
            return EXIT_USAGE
        policy = loaded.config.resolve_policy()
        internal = loaded.config.internal_listener_name
    try:
        url = parse_metadata_url(args.metadata)
    except ValueError as exc:
        print(f"--metadata: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        result = asyncio.run(_lookup(url, args.topic, args.listener, policy, internal))
    except SnapshotError as exc:
        print(f"--metadata: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(json.dumps(result, indent=2))
    return EXIT_FAILED if result["response"] == "failed" else EXIT_OK


async def _lookup(
    url: MetadataUrl, topic: str, listener: str | None, policy: ResolvePolicy, internal: str | None
) -> dict[str, Any]:
    source = open_source(url)
    await source.start()
    service = LookupService(source, policy=policy, internal_listener=internal)
    result: dict[str, Any] = {"topic": topic}
    try:
        answer = await service.lookup(topic, service.choose(explicit=listener), "cli")
        result.update(answer_json(answer))
        result["partitions"] = await service.partitions(answer.topic)
    except LookupFailure as exc:
        result.update(response="failed", error=exc.code.name, message=exc.message)
    finally:
        await source.close()
    return result


def cmd_run(args: argparse.Namespace) -> int:
    from listeners.workers import WorkersError, supervise

    _setup_logging(f"worker {args.worker} " if args.worker is not None else "")
    loaded = _load(args.config)
    if loaded is None:
        return EXIT_USAGE
    if args.worker is not None:  # one of `--workers N`'s processes
        return _serve(loaded.config, reuse_port=True)
    if args.workers == 1:
        return _serve(loaded.config)
    try:
        return supervise(args.config, loaded.config, args.workers)
    except WorkersError as exc:
        print(f"run: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _serve(config: GatewayConfig, *, reuse_port: bool = False) -> int:
    from listeners.auth import AuthConfigError
    from listeners.gateway import Gateway, serve
    from tls.context import TlsConfigError

    try:
        asyncio.run(serve(Gateway(config, reuse_port=reuse_port)))
    except (TlsConfigError, AuthConfigError, SnapshotError, OSError) as exc:
        logging.getLogger("listeners.gateway").error("cannot start: %s", exc)
        return EXIT_FAILED
    return EXIT_OK


def _zk_url(text: str) -> MetadataUrl | None:
    try:
        url = parse_metadata_url(text)
    except ValueError as exc:
        print(f"--metadata: {exc}", file=sys.stderr)
        return None
    if url.kind != "zk":
        print("--metadata: seed and dump need a zk: URL", file=sys.stderr)
        return None
    return url


def cmd_seed(args: argparse.Namespace) -> int:
    from lookup.zk_admin import connect, seed

    url = _zk_url(args.metadata)
    if url is None:
        return EXIT_USAGE
    try:
        nodes = read_snapshot(args.snapshot)
    except SnapshotError as exc:
        print(f"--snapshot: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if url.chroot:
        root = connect(url.zk_hosts)
        root.ensure_path(url.chroot)
        root.stop()
    client = connect(url.zk_hosts + url.chroot)
    try:
        count = seed(client, nodes)
    finally:
        client.stop()
    print(f"wrote {count} znodes from {args.snapshot} to {url}")
    return EXIT_OK


def cmd_dump(args: argparse.Namespace) -> int:
    from lookup.zk_admin import connect, dump

    url = _zk_url(args.metadata)
    if url is None:
        return EXIT_USAGE
    client = connect(url.zk_hosts + url.chroot)
    try:
        nodes = dump(client)
    finally:
        client.stop()
    write_snapshot(args.out, nodes)
    print(f"wrote {len(nodes)} znodes from {url} to {args.out}")
    return EXIT_OK


def cmd_standalone(args: argparse.Namespace) -> int:
    import tempfile

    from listeners.embedded_zookeeper import EmbeddedZooKeeper, ZooKeeperUnavailable
    from lookup.zk_admin import connect, seed
    from tls.devcerts import standalone_tls_env

    _setup_logging()
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
        client = connect(zookeeper.connect_string)
        seed(client, nodes)
        client.stop()
        # Development certificates for the TLS sockets, removed when standalone stops;
        # PULSAR_GATEWAY_tls* set in the environment win over them.
        with tempfile.TemporaryDirectory(prefix="pulsar-gateway-dev-certs-") as certs:
            env = {
                **standalone_tls_env(Path(certs)),
                **os.environ,
                "PULSAR_GATEWAY_metadataStoreUrl": f"zk:{zookeeper.connect_string}",
            }
            loaded = _load(args.config, env)
            if loaded is None:
                return EXIT_USAGE
            banner = _standalone_banner(
                loaded.config, zookeeper.connect_string, args.snapshot, Path(certs)
            )
            print(banner)
            return _serve(loaded.config)
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


def answer_json(answer: LookupAnswer) -> dict[str, Any]:
    return {
        "topic": answer.topic.full,
        "bundle": answer.bundle.name,
        "response": answer.response.value,
        "authoritative": answer.authoritative,
        "brokerId": answer.broker_id,
        "brokerServiceUrl": answer.urls.service_url,
        "brokerServiceUrlTls": answer.urls.service_url_tls,
        "httpUrl": answer.urls.http_url,
        "httpUrlTls": answer.urls.http_url_tls,
        "listener": answer.listener.name,
        "listenerChosenBy": answer.listener.source.value,
    }


if __name__ == "__main__":
    sys.exit(main())
