"""A WebSocket client of the ownership watch, and the gateway it watches (shared by the watch's
integration and hostile-client tests)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import socket
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from pulsar_lookup_gateway.metadata_store.synthetic import (
    topic_in_range,
)

WAIT = 10.0


FIRST, SECOND = "0x00000000_0x40000000", "0x40000000_0x80000000"


IN_FIRST = topic_in_range(0, 0x40000000)


class Watcher:
    """One stream: JSON messages in, requests out."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws

    async def send(self, body: dict[str, Any]) -> None:
        await self.ws.send_str(json.dumps(body))

    async def subscribe(self, *topics: str) -> None:
        await self.send({"type": "subscribe", "topics": list(topics)})

    async def next(self) -> dict[str, Any]:
        message = await asyncio.wait_for(self.ws.receive(), WAIT)
        assert message.type is aiohttp.WSMsgType.TEXT, (message.type, message.data)
        body: dict[str, Any] = json.loads(message.data)
        return body

    async def about(self, topic: str) -> dict[str, Any]:
        """The next message about `topic` (others are skipped)."""
        while True:
            body = await self.next()
            if body.get("topic") == topic:
                return body

    async def closed(self) -> tuple[int | None, list[dict[str, Any]]]:
        """The messages until the gateway closes the stream, and its close code."""
        seen = []
        while True:
            message = await asyncio.wait_for(self.ws.receive(), WAIT)
            if message.type is aiohttp.WSMsgType.TEXT:
                seen.append(json.loads(message.data))
            elif message.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED):
                return self.ws.close_code, seen


@contextlib.asynccontextmanager
async def watching(
    port: int, *, headers: dict[str, str] | None = None, query: str = ""
) -> AsyncIterator[Watcher]:
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(
            f"http://127.0.0.1:{port}/lookup/v2/watch{query}", headers=headers or {}
        ) as ws,
    ):
        yield Watcher(ws)


def subscribe_frame(names: list[str]) -> str:
    return json.dumps({"type": "subscribe", "topics": names}, separators=(",", ":"))


def long_names(prefix: str, count: int) -> list[str]:
    """`count` topic names of ~4,000 bytes each."""
    return [f"persistent://public/default/{prefix}{'n' * 3950}-{i:05d}" for i in range(count)]


async def subscribe_in_frames(watcher: Watcher, names: list[str], per_frame: int = 200) -> None:
    """Subscribe `names` in frames under watchMaxFrameBytes (sending stops once closed)."""
    for start in range(0, len(names), per_frame):
        try:
            await watcher.ws.send_str(subscribe_frame(names[start : start + per_frame]))
        except ConnectionError:
            return


# -- a client by hand, for the ones that do not read ---------------------------------------------


def raw_stream(port: int) -> socket.socket:
    """A WebSocket opened by hand, with a tiny receive buffer, that reads nothing after the
    upgrade's answer (blocking: run it in a thread)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(WAIT)
    sock.connect(("127.0.0.1", port))
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        (
            "GET /lookup/v2/watch HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        ).encode()
    )
    head = b""
    while not head.endswith(b"\r\n\r\n"):  # byte by byte: not a byte of the frames after it
        head += sock.recv(1)
    assert head.startswith(b"HTTP/1.1 101"), head
    return sock


def client_frame(payload: bytes, opcode: int = 0x1) -> bytes:
    """One masked frame, as a client sends it (RFC 6455 5.2)."""
    mask = os.urandom(4)
    size = len(payload)
    if size < 126:
        header = bytes([0x80 | opcode, 0x80 | size])
    elif size < 65536:
        header = bytes([0x80 | opcode, 0x80 | 126]) + size.to_bytes(2, "big")
    else:
        header = bytes([0x80 | opcode, 0x80 | 127]) + size.to_bytes(8, "big")
    return header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
