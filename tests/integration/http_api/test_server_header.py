"""Every answer of an HTTP socket names the gateway, without a version, whichever part of
aiohttp prepared it: a route's response, a WebSocket's 101, aiohttp's answer to a malformed
request (the header is set by the request class the socket's handlers make, not by a signal)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from pulsar_lookup_gateway.http_api.server import SERVER_NAME
from pulsar_lookup_gateway.http_api.watch import PATH as WATCH_PATH
from tests.integration.http_api.served import (
    LOOKUP,
    OWNED_TOPIC,
    file_service,
    gateway_cluster,
    serving,
)

WAIT = 10.0
UPGRADE = (
    f"GET {WATCH_PATH} HTTP/1.1\r\nHost: gateway\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
).encode()
LOOKUP_REQUEST = f"GET {LOOKUP}/{OWNED_TOPIC} HTTP/1.1\r\nHost: gateway\r\n\r\n".encode()


async def head_of(port: int, request: bytes) -> list[str]:
    """The status line and header lines of the first answer to `request`."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WAIT)
    finally:
        writer.close()
    return head.decode("latin-1").split("\r\n")[:-2]


async def test_every_kind_of_answer_names_the_gateway(tmp_path: Path) -> None:
    async with (
        file_service(tmp_path, gateway_cluster()) as service,
        serving(service, "zone") as server,
    ):
        for request, status in (
            (LOOKUP_REQUEST, "200"),  # a route's response (answered from the memo once warm)
            (LOOKUP_REQUEST, "200"),
            (UPGRADE, "101"),  # prepared by the watch's handler itself
            (b"NOT HTTP AT ALL\r\n\r\n", "400"),  # aiohttp's error handler
        ):
            head = await head_of(server.port, request)
            assert head[0].split(" ")[1] == status, head
            servers = [line for line in head if line.lower().startswith("server:")]
            assert servers == [f"Server: {SERVER_NAME}"], head
