"""BrokerConnection: one connection to one broker, for one principal sent; requests are
pipelined and answers matched by request id. It answers the broker's PING and AUTH_CHALLENGE
itself; a frame that does not decode closes it.

Answers are read at the broker's pace, never at a client's: the connection is shared, and a
client that does not read must not hold back another's answer behind its own. What the answer
weighs is charged to the asking client's hold (serving.held_bytes) as soon as it is read; one
its client cannot take is dropped at once (the request fails with TOO_MANY_REQUESTS)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
from collections.abc import Callable
from importlib import metadata
from typing import cast

from pulsar_lookup_gateway.brokers.failures import lost, unavailable
from pulsar_lookup_gateway.brokers.identity import TOKEN_METHOD, token_bytes
from pulsar_lookup_gateway.brokers.settings import LinkSettings
from pulsar_lookup_gateway.listeners.auth import Principal
from pulsar_lookup_gateway.listeners.protocol import codec
from pulsar_lookup_gateway.listeners.protocol.codec import (
    BaseCommand,
    FeatureFlags,
    FrameDecoder,
    RemoteProtocolError,
    decode_command,
)
from pulsar_lookup_gateway.lookup.errors import FailureKind, LookupFailure
from pulsar_lookup_gateway.lookup.untrusted import printable
from pulsar_lookup_gateway.serving.held_bytes import Hold

__all__ = ["PROTOCOL_VERSION", "AnswerNotHeld", "BrokerConnection"]

log = logging.getLogger(__name__)

PROTOCOL_VERSION = 21


class AnswerNotHeld(LookupFailure):
    """TOO_MANY_REQUESTS: the broker's answer could not be held for its client and was dropped
    as it was read; `weighed`: its bytes (what the next such request is charged ahead)."""

    def __init__(self, weighed: int, refused: str) -> None:
        super().__init__(
            FailureKind.TOO_MANY_REQUESTS,
            f"the broker's answer ({weighed} bytes) cannot be held for this client: {refused}; "
            "retry later",
        )
        self.weighed = weighed


@functools.cache
def _version() -> str:
    """What the gateway calls itself in CONNECT (client_version), as in its CONNECTED."""
    try:
        return f"pulsar-lookup-gateway-{metadata.version('pulsar-lookup-gateway')}"
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        return "pulsar-lookup-gateway-0+unknown"


class BrokerConnection(asyncio.Protocol):
    """One connection to one broker, for one client identity. Requests are pipelined; answers
    are matched by request id."""

    def __init__(self, url: str, token: bytes | None, settings: LinkSettings) -> None:
        self.url = url
        self._token = token
        self._settings = settings
        self._decoder = FrameDecoder()
        self._transport: asyncio.Transport | None = None
        # Requests waiting for their answer, and the hold their answer is charged to.
        self._pending: dict[int, tuple[asyncio.Future[BaseCommand], Hold | None]] = {}
        self._ids = itertools.count(1)
        self._closed = False
        self.connected: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.supports_no_creation = False

    @property
    def usable(self) -> bool:
        return not self._closed and self.connected.done() and not self.connected.exception()

    @property
    def busy(self) -> bool:
        return bool(self._pending)

    def send_connect(self, principal: Principal, forward_credentials: bool) -> None:
        self._write(
            codec.connect(
                _version(),
                PROTOCOL_VERSION,
                auth_method_name=TOKEN_METHOD if self._token is not None else None,
                auth_data=self._token,
                feature_flags=FeatureFlags(
                    supports_get_partitioned_metadata_without_auto_creation=True
                ),
                original_principal=principal.role,
                original_auth_data=principal.auth_data if forward_credentials else None,
                original_auth_method=principal.auth_method if forward_credentials else None,
            )
        )

    async def request(
        self, build: Callable[[int], bytes], timeout: float, hold: Hold | None = None
    ) -> BaseCommand:
        """The broker's answer to `build(request_id)`; its bytes charged to `hold` (None: to
        nobody) when it is read, or it is dropped and TOO_MANY_REQUESTS raised."""
        if not self.usable:
            raise unavailable("the connection to the broker is closed; retry", self.url)
        request_id = next(self._ids)
        answer: asyncio.Future[BaseCommand] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = (answer, hold)
        try:
            self._write(build(request_id))
            return await asyncio.wait_for(answer, timeout)
        except TimeoutError:
            raise unavailable(
                f"the broker did not answer within {timeout:g}s; retry", self.url
            ) from None
        finally:
            self._pending.pop(request_id, None)

    def close(self) -> None:
        self._closed = True
        if self._transport is not None:
            self._transport.abort()
        self._fail_all("the connection was closed")

    # -- asyncio.Protocol ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        try:
            decoder = self._decoder
            decoder.feed(data)
            while (body := decoder.next_body()) is not None:
                command = decode_command(body)
                if isinstance(command, BaseCommand):
                    self._received(command, len(body))
        except RemoteProtocolError as exc:
            log.warning("closing the connection to broker %s: %s", self.url, exc)
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._fail_all("the broker closed the connection")

    # -- commands --------------------------------------------------------------------------------

    def _received(self, command: BaseCommand, size: int) -> None:
        """`command`, of `size` bytes, from the broker."""
        kind = command.type
        if kind == BaseCommand.CONNECTED:
            flags = command.connected.feature_flags
            self.supports_no_creation = (
                flags.supports_get_partitioned_metadata_without_auto_creation
            )
            if not self.connected.done():
                self.connected.set_result(None)
        elif kind == BaseCommand.PING:
            self._write(codec.pong())
        elif kind == BaseCommand.AUTH_CHALLENGE:
            # The broker re-checks credentials (its authenticationRefreshCheckSeconds): answer
            # with the token as configured now.
            token = self._token
            if self._settings.token is not None:
                with contextlib.suppress(OSError):
                    token = token_bytes(self._settings.token)
            self._write(
                codec.auth_response(_version(), PROTOCOL_VERSION, TOKEN_METHOD, token or b"")
            )
        elif kind == BaseCommand.ERROR and not self.connected.done():
            self.connected.set_exception(
                unavailable(
                    "the broker refused the gateway's connection; retry later",
                    f"{self.url}: {printable(command.error.message)}",
                )
            )
            self.close()
        else:
            request_id = codec.request_id_of(command)
            if request_id is None:
                return
            if request_id == codec.NO_REQUEST and kind == BaseCommand.ERROR:
                self.close()
                return
            waiting = self._pending.get(request_id)
            if waiting is None or waiting[0].done():
                return
            answer, hold = waiting
            refused = hold.add(size) if hold is not None else None
            if refused is None:
                answer.set_result(command)
            else:  # (dropped here: only the failure, and what it weighed, is kept)
                answer.set_exception(AnswerNotHeld(size, refused))

    def _write(self, frame: bytes) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(frame)

    def _fail_all(self, reason: str) -> None:
        if not self.connected.done():
            self.connected.set_exception(lost(self.url, reason))
        # Nobody may wait on `connected` any more: keep asyncio from logging it as unretrieved.
        if self.connected.done() and not self.connected.cancelled():
            self.connected.exception()
        pending, self._pending = self._pending, {}
        for answer, _ in pending.values():
            if not answer.done():
                answer.set_exception(lost(self.url, reason))
