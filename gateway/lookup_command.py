"""`pulsar-lookup-gateway lookup TOPIC --metadata URL`: one topic resolved against the cluster's
metadata as the gateway resolves it, printed as JSON (`--protocol`: a protocol handler's
endpoints of the owner)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pulsar_lookup_gateway.console.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from pulsar_lookup_gateway.gateway.startup import load_or_report
from pulsar_lookup_gateway.listeners.explain import answer_fields
from pulsar_lookup_gateway.lookup.errors import LookupFailure
from pulsar_lookup_gateway.lookup.protocol_data import PROTOCOL_NAME_RULE, is_protocol_name
from pulsar_lookup_gateway.lookup.resolve import LookupAnswer, ResolvePolicy
from pulsar_lookup_gateway.lookup.selection import choose_listener
from pulsar_lookup_gateway.lookup.topics import TopicName
from pulsar_lookup_gateway.metadata_store.admin import CONNECT_TIMEOUT
from pulsar_lookup_gateway.metadata_store.open import open_source
from pulsar_lookup_gateway.metadata_store.snapshot import SnapshotError
from pulsar_lookup_gateway.metadata_store.url import MetadataUrl, parse_metadata_url
from pulsar_lookup_gateway.serving.service import LookupService


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("topic", help="full or short topic name")
    parser.add_argument("--listener", help="advertised listener name (default: internal)")
    parser.add_argument("--metadata", required=True, help="zk:host:port[/chroot] or file:PATH")
    parser.add_argument("--config", type=Path, help="gateway config (bundle defaults, redirects)")
    parser.add_argument(
        "--protocol",
        metavar="NAME",
        help="a protocol handler (kafka, mqtt, grpc, ...): print the owner's endpoints of it "
        "for the listener instead of its Pulsar URLs",
    )
    parser.set_defaults(handler=cmd_lookup)


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
