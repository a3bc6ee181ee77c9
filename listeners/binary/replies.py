"""The frames a binary connection answers with when a request fails or is refused: the one
place a lookup failure becomes a Pulsar ServerError and message on the wire."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import cast

from google.protobuf.unknown_fields import UnknownFieldSet

from pulsar_lookup_gateway.listeners.protocol import codec, wire
from pulsar_lookup_gateway.listeners.protocol.codec import BaseCommand, LookupType
from pulsar_lookup_gateway.lookup.errors import LookupFailure
from pulsar_lookup_gateway.lookup.errors import ServerError as LookupServerError

log = logging.getLogger(__package__)  # one logger for the whole binary server

#: Builds the failure frame of one request family from its request id and what went wrong.
OnError = Callable[[int, Exception], bytes]

# Frames that never change.
PING = codec.ping()
PONG = codec.pong()

# lookup.errors.ServerError and the proto enum share Pulsar's names and numbers; checked here.
_WIRE_ERROR: dict[LookupServerError, codec.ServerError] = {
    code: cast(codec.ServerError, codec.ServerError.Value(code.name)) for code in LookupServerError
}
UNKNOWN_ERROR = codec.ServerError.UnknownError
NOT_ALLOWED = codec.ServerError.NotAllowedError
SERVICE_NOT_READY = codec.ServerError.ServiceNotReady
AUTHENTICATION_ERROR = codec.ServerError.AuthenticationError
# Commands our .proto has no body for: the field number of request_id inside their body
# (PulsarApi.proto), so that a refusal can name the request the client waits on.
_FOREIGN_REQUEST_ID_FIELD: dict[int, int] = {
    BaseCommand.SUBSCRIBE: 5,
    BaseCommand.PRODUCER: 3,
    BaseCommand.UNSUBSCRIBE: 2,
    BaseCommand.CLOSE_PRODUCER: 2,
    BaseCommand.CLOSE_CONSUMER: 2,
    BaseCommand.CONSUMER_STATS: 1,
    BaseCommand.SEEK: 2,
    BaseCommand.GET_LAST_MESSAGE_ID: 2,
    BaseCommand.GET_OR_CREATE_SCHEMA: 1,
    BaseCommand.NEW_TXN: 1,
    BaseCommand.ADD_PARTITION_TO_TXN: 1,
    BaseCommand.ADD_SUBSCRIPTION_TO_TXN: 1,
    BaseCommand.END_TXN: 1,
    BaseCommand.END_TXN_ON_PARTITION: 1,
    BaseCommand.END_TXN_ON_SUBSCRIPTION: 1,
    BaseCommand.TC_CLIENT_CONNECT_REQUEST: 1,
    BaseCommand.WATCH_TOPIC_LIST: 1,
    BaseCommand.WATCH_TOPIC_LIST_CLOSE: 1,
}


def failure(request_id: int, exc: Exception, on_error: OnError) -> bytes:
    """The failure frame of a request; an exception that is not a LookupFailure is a bug of
    ours, logged with its traceback and answered as an internal error."""
    if not isinstance(exc, LookupFailure):
        log.error("request %d failed with an internal error", request_id, exc_info=exc)
    return on_error(request_id, exc)


def _error_of(exc: Exception) -> tuple[codec.ServerError, str]:
    if isinstance(exc, LookupFailure):
        return _WIRE_ERROR[exc.code], exc.message
    return UNKNOWN_ERROR, f"internal error: {type(exc).__name__}"


def lookup_failed(request_id: int, exc: Exception) -> bytes:
    error, message = _error_of(exc)
    return codec.lookup_response(
        request_id, response=LookupType.Failed, error=error, message=message
    )


def error_failed(request_id: int, exc: Exception) -> bytes:
    error, message = _error_of(exc)
    return codec.error(request_id, error, message)


def schema_failed(request_id: int, exc: Exception) -> bytes:
    error, message = _error_of(exc)
    return codec.get_schema_response(request_id, error=error, message=message)


def partitions_failed(request_id: int, exc: Exception) -> bytes:
    error, message = _error_of(exc)
    return codec.partitioned_metadata_response(request_id, error=error, message=message)


def not_supported(command: BaseCommand) -> bytes:
    """ERROR NotAllowedError for a command the gateway does not serve, under its request id."""
    name = BaseCommand.Type.Name(command.type)
    return codec.error(
        _request_id_of(command),
        NOT_ALLOWED,
        f"{name} is not supported by the lookup gateway (lookups only)",
    )


def _request_id_of(command: BaseCommand) -> int:
    """The request id of a command we refuse, 0 if it has none we can read."""
    found = codec.request_id_of(command)
    if found is not None:
        return found
    number = _FOREIGN_REQUEST_ID_FIELD.get(command.type)
    if number is None:
        return 0
    fields = UnknownFieldSet(command)
    for index in range(len(fields)):
        field = fields[index]
        if field.field_number == command.type and field.wire_type == 2:
            found = wire.last_varint(bytes(field.data), number)
            if found is not None:
                return found
    return 0
