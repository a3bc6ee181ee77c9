"""`pulsar-lookup-gateway watch`: follow the ownership watch of a running gateway, printing
each message as one JSON line (docs/protocols/ownership-watch.md)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from urllib.parse import urlencode, urlsplit, urlunsplit

import aiohttp

from pulsar_lookup_gateway.console.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from pulsar_lookup_gateway.http_api.watch import PATH

CONNECT_TIMEOUT = 10.0
MAX_MESSAGE = 1024 * 1024  # bytes of one message from the gateway
NORMAL_CLOSES = frozenset({1000, 1001})


def add_arguments(watch: argparse.ArgumentParser) -> None:
    watch.description = (
        "Subscribe to the gateway's ownership watch and print one JSON line per message "
        "(owner, unowned, error) until the gateway closes the stream or Ctrl-C."
    )
    watch.add_argument("topic", nargs="+", metavar="TOPIC", help="full topic names")
    watch.add_argument(
        "--url", required=True, help=f"the gateway's ws:// or wss:// address ({PATH} is added)"
    )
    watch.add_argument("--listener", help="the listener to answer for (query listenerName)")
    watch.add_argument("--token", help="a token, sent as 'Authorization: Bearer'")
    watch.set_defaults(handler=cmd_watch)


def watch_url(base: str, listener: str | None) -> str:
    """`base` (ws[s]://host:port, maybe with the path already) as the watch's URL."""
    parts = urlsplit(base)
    if parts.scheme not in ("ws", "wss") or not parts.netloc:
        raise ValueError(f"'{base}' is not a ws:// or wss:// URL")
    path = parts.path.rstrip("/")
    if not path.endswith(PATH):
        path += PATH
    query = urlencode({"listenerName": listener}) if listener else parts.query
    return urlunsplit((parts.scheme, parts.netloc, path, query, ""))


def cmd_watch(args: argparse.Namespace) -> int:
    try:
        url = watch_url(args.url, args.listener)
    except ValueError as exc:
        print(f"--url: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return asyncio.run(follow(url, args.topic, args.token))


async def follow(url: str, topics: list[str], token: str | None) -> int:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    timeout = aiohttp.ClientTimeout(sock_connect=CONNECT_TIMEOUT)
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.ws_connect(url, headers=headers, max_msg_size=MAX_MESSAGE) as ws,
        ):
            await ws.send_json({"type": "subscribe", "topics": topics})
            async for message in ws:
                if message.type is aiohttp.WSMsgType.TEXT:
                    # (one line each, whatever the gateway's formatting)
                    print(json.dumps(json.loads(message.data)), flush=True)
            code = ws.close_code
    except aiohttp.WSServerHandshakeError as exc:
        print(f"watch: {url}: the gateway answered {exc.status} {exc.message}", file=sys.stderr)
        return EXIT_FAILED
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        print(f"watch: {url}: {exc or type(exc).__name__}", file=sys.stderr)
        return EXIT_FAILED
    if code not in NORMAL_CLOSES:
        print(f"watch: the gateway closed the stream ({code})", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK
