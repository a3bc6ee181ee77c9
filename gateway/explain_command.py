"""`pulsar-lookup-gateway explain TOPIC --config F`: why a client gets the answer it gets.

The gateway's own wiring (gateway.process.Gateway: its lookup service, listeners and client
routes; factories.authenticator: each socket's guard) is built from the config without
opening a socket, and listeners.explain asks its routing decision and the lookup core."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pulsar_lookup_gateway.console.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from pulsar_lookup_gateway.gateway.port_offset import (
    PORT_OFFSET_HELP,
    PortOffsetError,
    shift_ports,
)
from pulsar_lookup_gateway.gateway.startup import load_or_report
from pulsar_lookup_gateway.listeners.config.model import GatewayConfig
from pulsar_lookup_gateway.listeners.explain import (
    ClientFacts,
    SocketFacts,
    explain,
    find_socket,
)
from pulsar_lookup_gateway.lookup.networks import parse_address
from pulsar_lookup_gateway.metadata_store.admin import CONNECT_TIMEOUT
from pulsar_lookup_gateway.metadata_store.open import open_source
from pulsar_lookup_gateway.metadata_store.snapshot import SnapshotError
from pulsar_lookup_gateway.metadata_store.url import parse_metadata_url

if TYPE_CHECKING:
    from pulsar_lookup_gateway.listeners.auth import Authenticator


def add_arguments(command: argparse.ArgumentParser) -> None:
    command.description = (
        "Explain the gateway's answer for TOPIC to a client with the facts given: each rule of "
        "the listener selection (which chose, why the others did not), what would be refused, "
        "the bundle, its owner and the URLs. The gateway's own decision code decides; nothing "
        "is served."
    )
    command.add_argument("topic", help="full or short topic name")
    command.add_argument("--config", required=True, type=Path, help="the gateway's config file")
    command.add_argument(
        "--metadata", help="zk:host:port[/chroot] or file:PATH (default: the config's)"
    )
    command.add_argument(
        "--socket",
        help="the socket the client reached: LISTENER:SCHEME (external:pulsar+ssl), its URL, "
        "a listener (its first socket) or a legacy key (brokerServicePort); default: the first",
    )
    command.add_argument(
        "--client-address", metavar="A", help="the client's IP address (after PROXY/forwarded)"
    )
    command.add_argument("--sni", metavar="NAME", help="the TLS server name the client dialled")
    command.add_argument("--header", metavar="NAME", help="X-Pulsar-ListenerName (HTTP)")
    command.add_argument(
        "--listener",
        metavar="NAME",
        help="the listener the client names (binary advertised_listener_name, HTTP listenerName)",
    )
    command.add_argument(
        "--port-offset",
        type=int,
        default=0,
        metavar="N",
        help=f"as standalone --port-offset: {PORT_OFFSET_HELP}",
    )
    command.add_argument("--json", action="store_true", help="print the explanation as JSON")
    command.set_defaults(handler=cmd_explain)


def sockets_of(config: GatewayConfig) -> list[SocketFacts]:
    return [
        SocketFacts(spec.endpoint.url, spec.endpoint.scheme.value, spec.listener, spec.origin)
        for spec in config.sockets()
    ]


def cmd_explain(args: argparse.Namespace) -> int:
    # The gateway's wiring (HTTP, TLS, tokens) loads here, not with every command's start.
    from pulsar_lookup_gateway.gateway import factories
    from pulsar_lookup_gateway.listeners.auth import AuthConfigError

    loaded = load_or_report(args.config)
    if loaded is None:
        return EXIT_USAGE
    try:  # the sockets `standalone --port-offset N` serves
        config = shift_ports(loaded.config, args.port_offset)
    except PortOffsetError as exc:
        print(f"--port-offset {args.port_offset}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.metadata is not None:
        try:
            url = parse_metadata_url(args.metadata)
        except ValueError as exc:
            print(f"--metadata: {exc}", file=sys.stderr)
            return EXIT_USAGE
        config = config.model_copy(update={"metadata_store_url": url})
    if args.client_address is not None and parse_address(args.client_address) is None:
        print(f"--client-address: '{args.client_address}' is not an IP address", file=sys.stderr)
        return EXIT_USAGE
    try:
        socket = find_socket(sockets_of(config), args.socket)
        authenticator = factories.authenticator(config)
    except (ValueError, AuthConfigError) as exc:
        print(f"explain: {exc}", file=sys.stderr)
        return EXIT_USAGE
    client = ClientFacts(args.client_address, args.sni, args.header, args.listener)
    try:
        result = asyncio.run(_explain(config, socket, args.topic, client, authenticator))
    except SnapshotError as exc:
        print(f"--metadata: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except _Unavailable as exc:
        print(f"explain: {exc}", file=sys.stderr)
        return EXIT_FAILED
    print(json.dumps(result, indent=2) if args.json else render(result))
    return EXIT_FAILED if "refused" in result else EXIT_OK


class _Unavailable(Exception):
    """The metadata did not become ready; the message says why."""


async def _explain(
    config: GatewayConfig,
    socket: SocketFacts,
    topic: str,
    client: ClientFacts,
    authenticator: Authenticator,
) -> dict[str, Any]:
    # The servers' module loads here, as serve_config() loads it.
    from pulsar_lookup_gateway.gateway.process import Gateway
    from pulsar_lookup_gateway.listeners.routing import Router

    source = open_source(
        config.metadata_store_url,
        configuration=config.configuration_metadata_store_url,
        start_timeout=CONNECT_TIMEOUT,
    )
    gateway = Gateway(config, source)  # its wiring only: nothing is started but the source
    await source.start()
    try:
        status = source.status()
        if not status.ready:
            raise _Unavailable(f"{status.reason} after {CONNECT_TIMEOUT:g} s")
        router = Router.of_service(gateway.service, authenticator.for_listener(socket.listener))
        return await explain(gateway.service, router, socket, topic, client)
    finally:
        await source.close()


def render(result: dict[str, Any]) -> str:
    """The explanation as text, one step a line (`->` marks the step that decided)."""
    socket, client = result["socket"], result["client"]
    lines = [f"explain {result['topic']}"]
    lines.append(f"  socket    {socket['url']} (listener {socket['listener'] or '-'})")
    facts = ", ".join(
        f"{label} {client[key] or '-'}"
        for label, key in (
            ("address", "address"),
            ("TLS server name", "serverName"),
            ("X-Pulsar-ListenerName", "header"),
            ("listener name", "listenerName"),
        )
    )
    lines.append(f"  client    {facts}")
    lines.append("the connection's route (what a request naming no listener gets):")
    lines += _steps(result["connection"])
    if result["request"]:
        lines.append("this request (it names a listener):")
        lines += _steps(result["request"])
    if "listener" in result:
        lines.append(f"listener    {result['listener'] or '-'} (chosen by {result['chosenBy']})")
    for demand in result.get("demands", ()):
        lines.append(f"demands     {demand}")
    answer = result.get("answer")
    if answer is not None:
        lines.append(f"bundle      {result['bundle']}")
        lines.append(f"owner       {result['owner']}")
        kind = "authoritative" if answer["authoritative"] else "not authoritative"
        lines.append(f"answer      {answer['response']} ({kind})")
        for key in ("brokerServiceUrl", "brokerServiceUrlTls", "httpUrl", "httpUrlTls"):
            lines.append(f"  {key:<20} {answer[key] or '-'}")
    for note in result.get("notes", ()):
        lines.append(f"note        {note}")
    refused = result.get("refused")
    if refused is not None:
        lines.append(f"refused     {refused['error']}: {refused['message']}")
    return "\n".join(lines)


def _steps(steps: list[dict[str, Any]]) -> list[str]:
    return [
        f"  {step['rule']:<9}{'->' if step['decided'] else '  '} {step['found']}" for step in steps
    ]
