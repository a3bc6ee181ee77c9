"""A watch stream's messages as WebSocket text frames (RFC 6455, server to client: unmasked,
uncompressed, one frame per message), all of a batch in one bytes object: the stream writes
a batch with one write (one send to the kernel) instead of one per message. The protocol is
unchanged: a client still reads one JSON message per frame."""

from __future__ import annotations

import struct
from collections.abc import Iterable

_FIN_TEXT = 0x81  # FIN + opcode 1 (text)
_SHORT = struct.Struct(">BB")  # payload under 126 bytes
_MEDIUM = struct.Struct(">BBH")  # under 64 KiB: 126, then a 16-bit length
_LONG = struct.Struct(">BBQ")  # 127, then a 64-bit length


def text_frames(messages: Iterable[str]) -> bytes:
    """The frames of `messages`, in order, back to back."""
    parts: list[bytes] = []
    append = parts.append
    for message in messages:
        payload = message.encode()
        size = len(payload)
        if size < 126:
            append(_SHORT.pack(_FIN_TEXT, size))
        elif size < 65536:
            append(_MEDIUM.pack(_FIN_TEXT, 126, size))
        else:
            append(_LONG.pack(_FIN_TEXT, 127, size))
        append(payload)
    return b"".join(parts)
