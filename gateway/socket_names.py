"""A socket named the way the config asks for it, and the error of one that cannot listen."""

from __future__ import annotations

import os
import socket

from pulsar_lookup_gateway.listeners.endpoints.socket_table import SocketSpec


def socket_name(spec: SocketSpec) -> str:
    """`bindAddresses: entry 'name:scheme://host:port'` (the entry names the listener), or the
    legacy key (`webServicePort`) of an untagged socket."""
    return spec.origin if spec.listener is None else f"bindAddresses: {spec.origin}"


class CannotListen(OSError):
    """A server socket of the config that could not be bound; the message names its entry."""

    def __init__(self, spec: SocketSpec, error: OSError) -> None:
        if isinstance(error, socket.gaierror) or (error.errno or 0) < 0:  # getaddrinfo's
            # (socket.create_server adds "(while attempting to bind on address ...)")
            reason = str(error.strerror or error).partition(" (while attempting")[0]
            what = f"cannot resolve {spec.endpoint.host}: {reason}"
        else:
            # The system's words for the errno: asyncio's create_server wraps them in its own.
            reason = os.strerror(error.errno) if error.errno else (error.strerror or str(error))
            what = f"cannot bind {spec.endpoint.address}: {reason}"
        super().__init__(error.errno, f"{socket_name(spec)}: {what}")
        self.spec = spec

    def __str__(self) -> str:
        return str(self.strerror)
