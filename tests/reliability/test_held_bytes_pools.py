"""The byte budget's two pools against a gateway in a child process (issue 41): what strangers
pin by asking and not reading (forwarded answers, unread send buffers, queued watch messages)
has its own share, and cannot starve what honest watch streams hold (names, state), nor can
watches starve answers; a stream that does not read is closed to make room for a client that
does.

Before the pools, watched names and unread answers shared one 64 MiB total: 100,000 watched
topics charged ~57 MB of it, and a 1,000 x 100 subscribe herd (bench.watch_herd) had 46-89
streams closed `over_budget`."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from pathlib import Path

import aiohttp
import pytest

from pulsar_lookup_gateway.http_api.watch_requests import topic_bytes
from tests.integration.serving.watch_client import (
    Watcher,
    client_frame,
    long_names,
    raw_stream,
    subscribe_frame,
    subscribe_in_frames,
    watching,
)
from tests.reliability.child_gateway import MIB, HttpGateway
from tests.reliability.schema_broker import http_schema, http_strangers, schema_broker, settled

SCHEMA = "persistent://public/default/big"
SCHEMA_BYTES = 5_000_000
#: Honest streams x names of ~4 KB each: ~86 MiB of names (each charged its bytes + 512), more
#: than the one 64 MiB total the answers and the names shared before, within the watch share
#: (128 MiB by default); each stream ~11 MB, within its 16 MiB.
STREAMS, TOPICS = 8, 2_500
ANSWER_WAIT = 60.0  # seconds a stream may wait for its next message under the herd
CLOSED = "pulsar_lookup_gateway_watch_streams_closed_total"
HELD = "pulsar_lookup_gateway_held_bytes"
REFUSALS = "pulsar_lookup_gateway_held_bytes_refusals_total"


async def watch_all(watcher: Watcher, names: list[str]) -> int:
    """Subscribe `names` and read until each was answered; the messages read."""
    sending = asyncio.create_task(subscribe_in_frames(watcher, names))
    waiting, read = set(names), 0
    try:
        while waiting:
            message = await asyncio.wait_for(watcher.ws.receive(), ANSWER_WAIT)
            assert message.type is aiohttp.WSMsgType.TEXT, (message.type, message.data)
            body = json.loads(message.data)
            assert body.get("type") in ("owner", "unowned"), body
            waiting.discard(body["topic"])
            read += 1
        await sending
    finally:
        sending.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sending
    return read


@pytest.mark.timeout(300)
async def test_an_honest_watch_load_is_not_closed_beside_strangers_that_pin_answers(
    tmp_path: Path,
) -> None:
    """Defaults: 20 strangers pin 5 MB answers they never read (the unread share full), then
    8 honest streams watch 20,000 names of 4 KB (~86 MiB). Every stream gets every answer and
    none is closed; the names are charged to the watch pool, exactly their bytes + 512 each.
    Before, the names alone passed the shared 64 MiB: streams were closed `over_budget`."""
    async with schema_broker(SCHEMA, SCHEMA_BYTES) as (peer, nodes):
        with HttpGateway(tmp_path, nodes) as gateway:
            port = gateway.port
            strangers = await http_strangers(port, SCHEMA, 20)
            await settled(peer, SCHEMA)
            assert gateway.metric(HELD, 'pool="unread"') > 32 * MIB  # strangers pin answers
            names = [long_names(f"s{n}-", TOPICS) for n in range(STREAMS)]
            async with contextlib.AsyncExitStack() as stack:
                streams = [await stack.enter_async_context(watching(port)) for _ in names]
                read = await asyncio.gather(*map(watch_all, streams, names))
                assert read == [TOPICS] * STREAMS
                charged = sum(topic_bytes(name) for each in names for name in each)
                assert charged > 64 * MIB  # (more than the shared total of before)
                assert gateway.metric(HELD, 'pool="watch"') == charged
            assert gateway.metric(CLOSED, 'reason="over_budget"') == 0
            for raw in strangers:
                raw.close()


@pytest.mark.timeout(180)
async def test_a_stalled_stream_is_closed_to_make_room_for_a_client_that_reads(
    tmp_path: Path,
) -> None:
    """A watch stream whose client reads nothing holds ~5 MB of queued first answers in an
    8 MiB unread share; an honest client's 5 MB schema needs room: the stalled stream is
    closed (reason `stalled`, counted by refusals{reason="stalled"}) and the honest client is
    served whole."""
    async with (
        schema_broker(SCHEMA, SCHEMA_BYTES) as (_, nodes),
        aiohttp.ClientSession() as session,
    ):
        with HttpGateway(tmp_path, nodes, f"heldBytesMaxUnread={8 * MIB}\n") as gateway:
            port = gateway.port
            stalled = await asyncio.to_thread(raw_stream, port)
            try:
                # 1,200 names of 4 KB: their first answers (~4 KB each) wait for a client
                # that reads nothing
                for start in range(0, 1_200, 200):
                    frame = subscribe_frame(long_names(f"x{start}-", 200)).encode()
                    await asyncio.to_thread(stalled.sendall, client_frame(frame))
                for _ in range(300):
                    if gateway.metric(HELD, 'pool="unread"') > 4 * MIB:
                        break
                    await asyncio.sleep(0.1)
                assert gateway.metric(HELD, 'pool="unread"') > 4 * MIB
                assert gateway.metric(REFUSALS, 'reason="stalled"') == 0
                assert await http_schema(session, port, SCHEMA, 30) == SCHEMA_BYTES
                assert gateway.metric(REFUSALS, 'reason="stalled"') == 1
                assert await asyncio.to_thread(closed_by_peer, stalled)
                for _ in range(100):  # (counted once its handler ends)
                    if gateway.metric(CLOSED, 'reason="stalled"') == 1:
                        break
                    await asyncio.sleep(0.1)
                assert gateway.metric(CLOSED, 'reason="stalled"') == 1
                assert gateway.metric(HELD, 'pool="watch"') == 0  # its names given back
            finally:
                stalled.close()


def closed_by_peer(sock: socket.socket) -> bool:
    """Read what was sent until the gateway's end is gone (reset or end of stream)."""
    sock.settimeout(30)
    try:
        while sock.recv(1 << 16):
            pass
    except ConnectionResetError:
        return True
    return True
