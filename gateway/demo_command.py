"""`pulsar-lookup-gateway demo move|unload|stop-broker`: change ownership in a ZooKeeper as
Pulsar's brokers would (metadata_store.ownership_moves), to watch a gateway follow it: the
ownership watch pushes the new owner, lookups answer it. For the demo (`standalone`) and test
clusters: never point it at a real cluster's ZooKeeper, whose brokers own their nodes."""

from __future__ import annotations

import argparse
import asyncio
import sys

from pulsar_lookup_gateway.console.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from pulsar_lookup_gateway.lookup.errors import LookupFailure
from pulsar_lookup_gateway.lookup.topics import TopicName
from pulsar_lookup_gateway.metadata_store.admin import (
    CONNECT_TIMEOUT,
    ZooKeeperUnreachable,
    connected,
)
from pulsar_lookup_gateway.metadata_store.open import open_source
from pulsar_lookup_gateway.metadata_store.ownership_moves import (
    Bundle,
    MoveError,
    broker_named,
    move,
    stop_broker,
    unload,
)
from pulsar_lookup_gateway.metadata_store.url import MetadataUrl, parse_metadata_url
from pulsar_lookup_gateway.serving.service import LookupService

WARNING = "for the demo and test clusters only: real brokers own these nodes"


def add_arguments(demo: argparse.ArgumentParser) -> None:
    demo.description = (
        "Change bundle ownership in a ZooKeeper the way Pulsar's brokers write it (ownership "
        f"znodes under /namespace, registrations under /loadbalance/brokers), {WARNING}."
    )
    actions = demo.add_subparsers(dest="action", required=True, metavar="ACTION")
    moving = actions.add_parser("move", help="make BROKER the owner of TOPIC's bundle")
    moving.add_argument("topic", help="a topic of the bundle (full or short name)")
    moving.add_argument("broker", help="a registered broker id (or its host's first label)")
    unloading = actions.add_parser("unload", help="unload TOPIC's bundle: nobody owns it")
    unloading.add_argument("topic", help="a topic of the bundle (full or short name)")
    stopping = actions.add_parser(
        "stop-broker", help="what a broker's stop takes: its registration and its bundles"
    )
    stopping.add_argument("broker", help="a registered broker id (or its host's first label)")
    for action in (moving, unloading, stopping):
        action.add_argument("--metadata", required=True, help="zk:host:port[/chroot]")
        action.set_defaults(handler=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    try:
        url = parse_metadata_url(args.metadata)
    except ValueError as exc:
        print(f"--metadata: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if url.kind != "zk":
        print("--metadata: demo needs a zk: URL (a file: snapshot is changed by editing it)",
              file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
    try:
        bundle = None
        if args.action in ("move", "unload"):
            bundle = asyncio.run(_bundle_of(url, args.topic))
        with connected(url.connect_string, connect_timeout=CONNECT_TIMEOUT) as client:
            if args.action == "move":
                assert bundle is not None
                broker = broker_named(client, args.broker)
                previous = move(client, bundle, broker)
                print(f"bundle {bundle} of {args.topic}: {previous or 'nobody'} -> {broker}")
            elif args.action == "unload":
                assert bundle is not None
                previous = unload(client, bundle)
                print(f"bundle {bundle} of {args.topic}: unloaded from {previous} (nobody owns it)")
            else:
                broker = broker_named(client, args.broker)
                owned = stop_broker(client, broker)
                print(f"broker {broker} stopped: registration gone, {len(owned)} bundle(s) "
                      f"unowned{': ' if owned else ''}{', '.join(owned)}")  # fmt: skip
    except LookupFailure as exc:
        print(f"demo: {args.topic}: {exc.message}", file=sys.stderr)
        return EXIT_FAILED
    except (MoveError, ZooKeeperUnreachable) as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


async def _bundle_of(url: MetadataUrl, topic: str) -> Bundle:
    """The bundle a lookup of `topic` reads (the namespace's bundles, as the gateway finds
    them: lookup.resolve.namespace_bundle through the lookup service)."""
    source = open_source(url, start_timeout=CONNECT_TIMEOUT)
    await source.start()
    try:
        status = source.status()
        if not status.ready:
            raise ZooKeeperUnreachable(f"{status.reason} after {CONNECT_TIMEOUT:g} s")
        name = TopicName.parse(topic)
        bundle = await LookupService(source).bundle(name)
        return Bundle(str(name.namespace_name), bundle.name)
    finally:
        await source.close()
