"""What each TLS connection's handshake chose: the server name (SNI) the client asked for, and
the listener whose certificate and trust store served it, kept while its SSL object lives.

Python offers a server the name only inside the server-name callback, so the callback notes
both here, and the connection reads them once its handshake is done.

Why the serving listener matters: the callback may move a handshake to another listener's
context (OpenSSL's SSL_set_SSL_CTX), which brings that listener's certificate and trust store
but NOT its verify mode: the connection keeps the mode of the socket's own context. So the
socket's context asks for a client certificate whenever a listener it can move to checks them
(tls.reload), and the servers refuse a connection that reached a listener requiring a client
certificate without presenting one (`client_certificate_missing`)."""

from __future__ import annotations

import ssl
import weakref
from dataclasses import dataclass

MAX_NAME = 255  # a DNS name is at most 253 characters; anything longer is not one
#: Why a connection was closed after its handshake, for the log.
CERTIFICATE_MISSING = "the listener it reached requires a client certificate and got none"


@dataclass(frozen=True, slots=True)
class Served:
    """What one handshake chose."""

    server_name: str | None
    listener: str | None  # whose context served it (None: the legacy TLS sockets')
    certificate_required: bool  # that listener's tlsRequireTrustedClientCertOnConnect


_served: weakref.WeakKeyDictionary[ssl.SSLObject | ssl.SSLSocket, Served] = (
    weakref.WeakKeyDictionary()
)


def remember(
    ssl_object: ssl.SSLObject | ssl.SSLSocket,
    server_name: str | None,
    listener: str | None = None,
    certificate_required: bool = False,
) -> None:
    name = server_name if server_name and len(server_name) <= MAX_NAME else None
    _served[ssl_object] = Served(name, listener, certificate_required)


def served(ssl_object: object) -> Served | None:
    """What the handshake of `ssl_object` chose (None: not a TLS connection of ours)."""
    if isinstance(ssl_object, ssl.SSLObject | ssl.SSLSocket):
        return _served.get(ssl_object)
    return None


def server_name_of(ssl_object: object) -> str | None:
    """The name the client sent in its ClientHello (None: none, or not a TLS connection)."""
    record = served(ssl_object)
    return record.server_name if record is not None else None


def client_certificate_missing(ssl_object: object) -> bool:
    """Whether the listener that served this handshake requires a client certificate that the
    client did not present (verified: OpenSSL refuses a presented one that does not verify)."""
    record = served(ssl_object)
    if record is None or not record.certificate_required:
        return False
    assert isinstance(ssl_object, ssl.SSLObject | ssl.SSLSocket)
    return not ssl_object.getpeercert()
