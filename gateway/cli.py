"""The `pulsar-lookup-gateway` command line."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from pulsar_lookup_gateway.console.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from pulsar_lookup_gateway.console.table import format_table
from pulsar_lookup_gateway.gateway.demo_command import add_parser as add_demo_parser
from pulsar_lookup_gateway.gateway.explain_command import add_parser as add_explain_parser
from pulsar_lookup_gateway.gateway.logs import FORMATS, LEVEL_ENV, LEVELS, resolve_level
from pulsar_lookup_gateway.gateway.standalone import cmd_standalone
from pulsar_lookup_gateway.gateway.startup import (
    host_problems,
    load_or_report,
    report_config_error,
    report_host_problems,
    serve_config,
    setup_logging,
)
from pulsar_lookup_gateway.gateway.version import gateway_version
from pulsar_lookup_gateway.gateway.watch_command import add_parser as add_watch_parser
from pulsar_lookup_gateway.listeners.config.model import ConfigError, GatewayConfig, load_config
from pulsar_lookup_gateway.listeners.explain import answer_fields
from pulsar_lookup_gateway.lookup.errors import LookupFailure
from pulsar_lookup_gateway.lookup.protocol_data import PROTOCOL_NAME_RULE, is_protocol_name
from pulsar_lookup_gateway.lookup.resolve import LookupAnswer, ResolvePolicy
from pulsar_lookup_gateway.lookup.selection import choose_listener
from pulsar_lookup_gateway.lookup.topics import TopicName
from pulsar_lookup_gateway.metadata_store.admin import (
    CONNECT_TIMEOUT,
    ZooKeeperUnreachable,
    dump_url,
    seed_url,
)
from pulsar_lookup_gateway.metadata_store.open import open_source
from pulsar_lookup_gateway.metadata_store.ownership_moves import replace_url
from pulsar_lookup_gateway.metadata_store.snapshot import (
    SnapshotError,
    read_snapshot,
    write_snapshot,
)
from pulsar_lookup_gateway.metadata_store.url import MetadataUrl, parse_metadata_url
from pulsar_lookup_gateway.serving.service import LookupService
from pulsar_lookup_gateway.tls.devcerts import DEFAULT_HOSTS, write_dev_certs
from pulsar_lookup_gateway.zones import cli as zones_cli

# configs/ beside the packages (a source checkout or an editable install), else the cwd's.
_CONFIGS = Path(__file__).resolve().parents[1] / "configs"
CONFIGS = _CONFIGS if _CONFIGS.is_dir() else Path("configs")
SERVING = frozenset({"run", "standalone"})  # the commands that log at INFO by default
ACCESS_LOG_HELP = "log one line per HTTP request (aiohttp's access log; off by default)"


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    default_level = "INFO" if args.command in SERVING else "WARNING"
    try:
        args.log_level = resolve_level(args.log_level, os.environ, default_level)
    except ValueError as exc:
        print(f"{parser.prog}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    setup_logging(
        level=args.log_level,
        log_format=args.log_format,
        worker=getattr(args, "worker", None),
        access_log=getattr(args, "access_log", False),
    )
    if args.command not in SERVING and logging.getLogger().level >= logging.WARNING:
        # A one-shot command says in one line that ZooKeeper cannot be reached: kazoo's
        # per-retry warnings would only repeat it.
        logging.getLogger("kazoo.client").setLevel(logging.ERROR)
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
    parser.add_argument("--version", action="version", version=f"%(prog)s {gateway_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    check = sub.add_parser("check-config", help="validate a config and print its socket table")
    check.add_argument("--config", required=True, type=Path, help="broker.conf-style file")
    check.add_argument(
        "--no-host-checks",
        action="store_true",
        help="validate the config only: do not read TLS, key or snapshot files nor bind the "
        "sockets (for a config meant for another host)",
    )
    check.add_argument(
        "--strict",
        action="store_true",
        help="every key the gateway does not use is an error, not a warning (for CI); a key "
        "one edit from a gateway key is an error either way",
    )
    check.set_defaults(handler=cmd_check_config)

    lookup = sub.add_parser("lookup", help="resolve one topic against cluster metadata")
    lookup.add_argument("topic", help="full or short topic name")
    lookup.add_argument("--listener", help="advertised listener name (default: internal)")
    lookup.add_argument("--metadata", required=True, help="zk:host:port[/chroot] or file:PATH")
    lookup.add_argument("--config", type=Path, help="gateway config (bundle defaults, redirects)")
    lookup.add_argument(
        "--protocol",
        metavar="NAME",
        help="a protocol handler (kafka, mqtt, grpc, ...): print the owner's endpoints of it "
        "for the listener instead of its Pulsar URLs",
    )
    lookup.set_defaults(handler=cmd_lookup)

    run = sub.add_parser("run", help="run the gateway")
    run.add_argument("--config", required=True, type=Path, help="broker.conf-style file")
    run.add_argument(
        "--workers", type=int, default=1, help="gateway processes sharing the ports (SO_REUSEPORT)"
    )
    run.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    # A worker's supervisor: its pid and the read end of its lifeline pipe (gateway.workers).
    run.add_argument("--supervisor-pid", type=int, default=None, help=argparse.SUPPRESS)
    run.add_argument("--supervisor-fd", type=int, default=None, help=argparse.SUPPRESS)
    run.add_argument("--access-log", action="store_true", help=ACCESS_LOG_HELP)
    run.set_defaults(handler=cmd_run)

    standalone = sub.add_parser(
        "standalone", help="start a ZooKeeper with a demo cluster and a gateway in front of it"
    )
    standalone.add_argument("--config", type=Path, default=CONFIGS / "standalone.conf")
    standalone.add_argument("--snapshot", type=Path, default=CONFIGS / "demo-cluster.json")
    standalone.add_argument("--zookeeper-port", type=int, default=0, help="default: a free one")
    standalone.add_argument(
        "--port-offset",
        type=int,
        default=0,
        metavar="N",
        help="add N to every port of the config (bindAddresses, advertisedListeners, legacy "
        "ports), e.g. 10000 for 16650/18080 beside a local Pulsar on 6650/8080; "
        "port 0 stays 0",
    )
    standalone.add_argument("--access-log", action="store_true", help=ACCESS_LOG_HELP)
    standalone.set_defaults(handler=cmd_standalone)

    seed = sub.add_parser("seed", help="write a snapshot into ZooKeeper in Pulsar's layout")
    seed.add_argument("--metadata", required=True, help="zk:host:port[/chroot]")
    seed.add_argument("--snapshot", required=True, type=Path)
    seed.add_argument(
        "--replace",
        action="store_true",
        help="also delete what the gateway reads (brokers, ownership, policies, topics) that "
        "the snapshot no longer has: a bundle left out is unloaded, a broker left out stopped",
    )
    seed.set_defaults(handler=cmd_seed)

    dump = sub.add_parser("dump", help="write the znodes the gateway reads as a snapshot")
    dump.add_argument("--metadata", required=True, help="zk:host:port[/chroot]")
    dump.add_argument("--out", required=True, type=Path)
    dump.set_defaults(handler=cmd_dump)

    certs = sub.add_parser("certs", help="write a development CA, server and client certificates")
    certs.add_argument("--out", required=True, type=Path, help="directory to write into")
    certs.add_argument(
        "--host",
        action="append",
        default=[],
        metavar="NAME",
        help="a DNS name or IP address for the server certificate (repeatable); "
        f"{', '.join(DEFAULT_HOSTS)} are always included",
    )
    certs.add_argument("--client-cn", default="client", help="client certificate CN")
    certs.add_argument("--days", type=int, default=365, help="validity (default 365)")
    certs.add_argument("--key-type", choices=("ec", "rsa"), default="ec")
    certs.add_argument("--p12-password", help="server.p12 password (default: random)")
    certs.add_argument("--force", action="store_true", help="replace existing files")
    certs.set_defaults(handler=cmd_certs)

    zones = sub.add_parser(
        "resolve-zones",
        help="resolve every topic for every network zone on Spark",
        description=zones_cli.DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    zones_cli.add_arguments(zones, master_default=zones_cli.DEFAULT_MASTER)
    zones.set_defaults(handler=zones_cli.run)
    add_watch_parser(sub)  # (gateway.watch_command)
    add_explain_parser(sub)  # (gateway.explain_command)
    add_demo_parser(sub)  # (gateway.demo_command)
    for command in sub.choices.values():
        _add_log_options(command)
    return parser


def _add_log_options(command: argparse.ArgumentParser) -> None:
    logs = command.add_argument_group("logging")
    logs.add_argument(
        "--log-level",
        type=str.upper,
        choices=LEVELS,
        default=None,
        help=f"default: ${LEVEL_ENV}, else INFO for run and standalone, WARNING for the others",
    )
    logs.add_argument(
        "--log-format",
        choices=FORMATS,
        default="text",
        help="text (default) or json: one object per line (ts, level, logger, message)",
    )


def cmd_check_config(args: argparse.Namespace) -> int:
    """Every problem in one run: those of the config, then those of this host, checked on what
    validated of the config (but for the checks its problems make moot)."""
    try:
        loaded = load_config(args.config, os.environ, strict=args.strict)
    except ConfigError as exc:
        report_config_error(args.config, exc)
        if not args.no_host_checks and exc.partial is not None:
            problems = host_problems(exc.partial, exc.keys)
            if problems:
                report_host_problems(args.config, problems)
        return EXIT_USAGE
    for warning in loaded.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    print(describe_config(loaded.config))
    if args.no_host_checks:
        return EXIT_OK
    problems = host_problems(loaded.config)
    if problems:
        report_host_problems(args.config, problems)
        return EXIT_FAILED
    return EXIT_OK


def describe_config(config: GatewayConfig) -> str:
    lines = [f"metadata store     {config.metadata_store_url}"]
    lines.append(f"internal listener  {config.internal_listener_name or '-'}")
    lines.append(f"ownership table    {config.describe_table_view()}")
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
    lines += format_table(rows, indent="  ")
    if len(rows) == 1:
        lines.append("  (none: the gateway would listen nowhere)")
    lines += _describe_client_routes(config)
    return "\n".join(line.rstrip() for line in lines)


def _describe_client_routes(config: GatewayConfig) -> list[str]:
    """Where a client is (sniHostnames, clientCidrs, proxyProtocol per listener, and
    trustedProxyCidrs); nothing when none of it is set."""
    routed = [
        (name, own)
        for name, own in sorted(config.listener_settings.items())
        if own.sni_hostnames or own.client_cidrs or own.proxy_protocol
    ]
    if not routed and not config.trusted_proxy_cidrs:
        return []
    lines = ["listener selection by client (after listenerName and X-Pulsar-ListenerName):"]
    if routed:
        rows = [("LISTENER", "SNI NAMES", "CLIENT CIDRS", "PROXY PROTOCOL")]
        for name, own in routed:
            rows.append(
                (
                    name,
                    ",".join(own.sni_hostnames or ()) or "-",
                    ",".join(own.client_cidrs or ()) or "-",
                    "yes" if own.proxy_protocol else "no",
                )
            )
        lines += format_table(rows, indent="  ")
    trusted = " ".join(config.trusted_proxy_cidrs) or "(none: PROXY and forwarded headers ignored)"
    lines.append(f"trusted proxies    {trusted}")
    return lines


def cmd_lookup(args: argparse.Namespace) -> int:
    policy = ResolvePolicy()
    internal: str | None = None
    if args.config is not None:
        loaded = load_or_report(args.config)
        if loaded is None:
            return EXIT_USAGE
        policy = loaded.config.resolve_policy()
        internal = loaded.config.internal_listener_name
    try:
        url = parse_metadata_url(args.metadata)
    except ValueError as exc:
        print(f"--metadata: {exc}", file=sys.stderr)
        return EXIT_USAGE
    protocol = getattr(args, "protocol", None)
    if protocol is not None and not is_protocol_name(protocol):
        print(f"--protocol: {protocol!r}: use {PROTOCOL_NAME_RULE}", file=sys.stderr)
        return EXIT_USAGE
    try:
        with _quiet_sources():
            result = asyncio.run(
                _lookup(url, args.topic, args.listener, policy, internal, protocol)
            )
    except SnapshotError as exc:
        print(f"--metadata: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except _Unavailable as exc:
        print(f"lookup: {exc}", file=sys.stderr)
        return EXIT_FAILED
    print(json.dumps(result, indent=2))
    return EXIT_FAILED if result["response"] in ("failed", "unowned") else EXIT_OK


class _Unavailable(Exception):
    """The metadata source did not become ready; the message says why and names the address."""


@contextlib.contextmanager
def _quiet_sources() -> Iterator[None]:
    """A one-shot command reports its own outcome (the answer, or one line): the metadata
    source's reconnect warnings, written for a long-running gateway's log, would only repeat
    it once a second. Levels are restored: tests run the command in their own process."""
    loggers = [
        logging.getLogger(name) for name in ("kazoo", "pulsar_lookup_gateway.metadata_store")
    ]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


async def _lookup(
    url: MetadataUrl,
    topic: str,
    listener: str | None,
    policy: ResolvePolicy,
    internal: str | None,
    protocol: str | None = None,
) -> dict[str, Any]:
    source = open_source(url, start_timeout=CONNECT_TIMEOUT)
    await source.start()
    status = source.status()
    if not status.ready:
        await source.close()
        raise _Unavailable(f"{status.reason} after {CONNECT_TIMEOUT:g} s")
    service = LookupService(source, policy=policy, internal_listener=internal)
    result: dict[str, Any] = {"topic": topic}
    try:
        if protocol is not None:
            return result | await _protocol_lookup(service, topic, listener, protocol)
        choice = choose_listener(explicit=listener, internal_listener=internal)
        answer = await service.lookup(topic, choice, "cli")
        result.update(answer_json(answer))
        result["partitions"] = await service.partitions(answer.topic)
    except LookupFailure as exc:
        result.update(response="failed", error=exc.code.name, message=exc.message)
    finally:
        await source.close()
    return result


def cmd_run(args: argparse.Namespace) -> int:
    from pulsar_lookup_gateway.gateway.workers import WorkersError, follow_supervisor, supervise

    # A worker's first act, so that it never outlives its supervisor, even while it starts.
    supervised = args.worker is not None and args.supervisor_pid is not None
    if supervised and not follow_supervisor(args.supervisor_pid, args.supervisor_fd):
        return EXIT_FAILED
    loaded = load_or_report(args.config)
    if loaded is None:
        return EXIT_USAGE
    if args.worker is not None:  # one of `--workers N`'s processes
        return serve_config(loaded.config, reuse_port=True, access_log=args.access_log)
    if args.workers == 1:
        return serve_config(loaded.config, access_log=args.access_log)
    # The workers log as this process does.
    worker_args = ["--log-level", args.log_level, "--log-format", args.log_format]
    if args.access_log:
        worker_args.append("--access-log")
    try:
        return supervise(args.config, loaded.config, args.workers, worker_args)
    except WorkersError as exc:
        print(f"run: {exc}", file=sys.stderr)
        return EXIT_USAGE


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
    url = _zk_url(args.metadata)
    if url is None:
        return EXIT_USAGE
    try:
        nodes = read_snapshot(args.snapshot)
    except SnapshotError as exc:
        print(f"--snapshot: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        count = seed_url(url, nodes)
        deleted = replace_url(url, nodes) if args.replace else None
    except ZooKeeperUnreachable as exc:
        print(f"seed: {exc}", file=sys.stderr)
        return EXIT_FAILED
    print(f"wrote {count} znodes from {args.snapshot} to {url}")
    if deleted is not None:
        print(f"deleted {len(deleted)} znodes the snapshot does not have")
        for path in deleted:
            print(f"  {path}")
    return EXIT_OK


def cmd_dump(args: argparse.Namespace) -> int:
    url = _zk_url(args.metadata)
    if url is None:
        return EXIT_USAGE
    try:
        nodes = dump_url(url)
    except ZooKeeperUnreachable as exc:
        print(f"dump: {exc}", file=sys.stderr)
        return EXIT_FAILED
    write_snapshot(args.out, nodes)
    print(f"wrote {len(nodes)} znodes from {url} to {args.out}")
    return EXIT_OK


def cmd_certs(args: argparse.Namespace) -> int:
    if args.days < 1:
        print("--days: must be at least 1", file=sys.stderr)
        return EXIT_USAGE
    try:
        certs = write_dev_certs(
            args.out,
            args.host,
            client_cn=args.client_cn,
            p12_password=args.p12_password,
            days=args.days,
            key_type=args.key_type,
            overwrite=args.force,
        )
    except FileExistsError as exc:
        print(f"certs: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except (OSError, ValueError) as exc:
        print(f"certs: {exc}", file=sys.stderr)
        return EXIT_USAGE
    d = certs.directory
    print(f"wrote a development CA and certificates to {d} (for development only)")
    print(f"  server certificate SANs: {', '.join(certs.hosts)}")
    print(f"  server.p12 password: {certs.p12_password}")
    print("gateway config:")
    print(f"  tlsCertificateFilePath={d / 'server.crt'}")
    print(f"  tlsKeyFilePath={d / 'server.key'}")
    print(f"  tlsTrustCertsFilePath={d / 'ca.crt'}")
    print(
        f"  # or: tlsKeyStoreType=PKCS12, tlsKeyStore={d / 'server.p12'}, tlsKeyStorePassword=..."
    )
    print("clients:")
    print(f"  tls_trust_certs_file_path={d / 'ca.crt'}   (curl --cacert {d / 'ca.crt'})")
    print(f"  mTLS: pulsar.AuthenticationTLS('{d / 'client.crt'}', '{d / 'client.key'}')")
    return EXIT_OK


async def _protocol_lookup(
    service: LookupService, topic: str, listener: str | None, protocol: str
) -> dict[str, Any]:
    """`lookup --protocol`: the owner's endpoints (lookup.protocol_data). The command only
    reads the metadata: an unowned bundle is reported, not handed to a broker (the gateway's
    HTTP route has one take it)."""
    answer = await service.protocol_lookup(
        TopicName.parse(topic),
        choose_listener(explicit=listener, internal_listener=service.internal_listener),
        protocol,
    )
    result: dict[str, Any] = {"response": "connect" if answer.owned else "unowned"}
    result |= answer.to_json(operator=True)
    if not answer.owned:
        result["message"] = (
            f"nobody owns bundle {answer.bundle.name}; a Pulsar client would be sent to "
            f"{answer.broker_id}, and the gateway's protocol route has a broker take it"
        )
    return result


def answer_json(answer: LookupAnswer) -> dict[str, Any]:
    """An absent URL is "", as in the HTTP lookup's LookupData (and an unset binary field)."""
    return answer_fields(answer)


if __name__ == "__main__":
    sys.exit(main())
