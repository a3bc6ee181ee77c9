"""http_api.watch_frames: a batch of watch messages as WebSocket text frames, byte for byte
what aiohttp's own writer sends for each message one at a time (so a client reads the same
frames, one JSON message each, as before batching)."""

from __future__ import annotations

import asyncio

from aiohttp import WSMsgType
from aiohttp._websocket.writer import WebSocketWriter
from hypothesis import given
from hypothesis import strategies as st

from pulsar_lookup_gateway.http_api.watch_frames import text_frames


class _Written:
    """A transport that keeps what is written."""

    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, data: bytes) -> None:
        self.data += data

    def is_closing(self) -> bool:
        return False


def _aiohttp_frames(messages: list[str]) -> bytes:
    transport = _Written()
    writer = WebSocketWriter(None, transport, use_mask=False)  # type: ignore[arg-type]
    for message in messages:
        asyncio.run(writer.send_frame(message.encode(), WSMsgType.TEXT))
    return bytes(transport.data)


def test_every_length_class_is_framed_as_aiohttp_frames_it() -> None:
    # (payloads under 126 bytes, up to 64 KiB, and over: the three header forms)
    messages = ["", "a" * 125, "b" * 126, "c" * 65535, "d" * 65536, '{"topic": "été"}']
    assert text_frames(messages) == _aiohttp_frames(messages)


@given(st.lists(st.text(max_size=300), max_size=8))
def test_any_batch_is_the_frames_of_its_messages_in_order(messages: list[str]) -> None:
    assert text_frames(messages) == _aiohttp_frames(messages)
