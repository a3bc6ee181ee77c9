"""Driving the real `pulsar-client` wheel from async tests.

The client is synchronous: each call runs in a thread while the event loop serves the gateway
and the test peers. Every call is bounded twice: by the client's own operation timeout and by a
wait_for far above it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar

import pulsar

from tests.broker_peer import BrokerPeer

T = TypeVar("T")
OPERATION_TIMEOUT = 5  # seconds, the client's own bound on each operation
BOUND = 60.0  # our bound on a client call, far above its operation timeout
QUIET = logging.getLogger("tests.e2e.pulsar_client")
QUIET.setLevel(logging.CRITICAL)


async def in_thread(call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    return await asyncio.wait_for(
        asyncio.to_thread(functools.partial(call, *args, **kwargs)), BOUND
    )


def new_client(url: str, *, timeout: int = OPERATION_TIMEOUT, **options: Any) -> pulsar.Client:
    return pulsar.Client(
        url, operation_timeout_seconds=timeout, connection_timeout_ms=5000, logger=QUIET, **options
    )


def produce(url: str, topic: str, *, timeout: int = OPERATION_TIMEOUT, **options: Any) -> str:
    """Create a producer (which needs a broker: a test peer) and close it; the topic it got."""
    client = new_client(url, timeout=timeout, **options)
    try:
        producer = client.create_producer(topic)
        try:
            return str(producer.topic())
        finally:
            producer.close()
    finally:
        client.close()


def partitions(url: str, topic: str) -> list[str]:
    client = new_client(url)
    try:
        return list(client.get_topic_partitions(topic))
    finally:
        client.close()


def reached(peer: BrokerPeer, topic: str) -> bool:
    """The peer saw a CONNECT and then a PRODUCER for `topic`."""
    return "CONNECT" in peer.types_seen() and topic in peer.producer_topics()
