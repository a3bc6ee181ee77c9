"""A WebSocket client of the ownership watch, and the gateway it watches (shared by the watch's
integration and hostile-client tests)."""

from __future__ import annotations

import asyncio
import contextlib
import json
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
