"""A raw binary conversation with a gateway: frames out, exactly one answer frame per request in
(shared by the memo equivalence tests)."""

from __future__ import annotations

import asyncio
import struct

from pulsar_lookup_gateway.listeners.protocol import codec

HOST = "127.0.0.1"


WAIT = 10.0


async def read_frame(reader: asyncio.StreamReader) -> bytes:
    head = await asyncio.wait_for(reader.readexactly(4), WAIT)
    return head + await asyncio.wait_for(reader.readexactly(struct.unpack(">I", head)[0]), WAIT)


class Conversation:
    """One connection: send frames, read exactly one answer frame per request, raw."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> Conversation:
        reader, writer = await asyncio.open_connection(HOST, port)
        writer.write(codec.connect("memo-test", 21))
        await read_frame(reader)  # CONNECTED
        return cls(reader, writer)

    async def ask(self, frames: list[bytes]) -> list[bytes]:
        """The answers in order (every lookup here is answered from a complete snapshot, at
        once, so a connection answers in the order it was asked)."""
        self.writer.write(b"".join(frames))
        return [await read_frame(self.reader) for _ in frames]

    async def close(self) -> None:
        self.writer.close()
