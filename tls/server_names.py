"""The TLS server name (SNI) each connection asked for, kept while its SSL object lives.

Python offers a server the name only inside the server-name callback, so the callback notes it
here, and the connection reads it once its handshake is done."""

from __future__ import annotations

import ssl
import weakref

MAX_NAME = 255  # a DNS name is at most 253 characters; anything longer is not one

_names: weakref.WeakKeyDictionary[ssl.SSLObject | ssl.SSLSocket, str] = weakref.WeakKeyDictionary()


def remember(ssl_object: ssl.SSLObject | ssl.SSLSocket, server_name: str | None) -> None:
    if server_name and len(server_name) <= MAX_NAME:
        _names[ssl_object] = server_name


def server_name_of(ssl_object: object) -> str | None:
    """The name the client sent in its ClientHello (None: none, or not a TLS connection)."""
    if isinstance(ssl_object, ssl.SSLObject | ssl.SSLSocket):
        return _names.get(ssl_object)
    return None
