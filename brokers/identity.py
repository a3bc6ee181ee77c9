"""Who asks a broker: the gateway, with Pulsar's proxy keys, on behalf of a client.

The gateway authenticates with ``brokerClientAuthenticationPlugin`` /
``brokerClientAuthenticationParameters`` (a token given as ``token:<jwt>``, ``file:///path``
read at each connection, or the bare token). A client that authenticated to the gateway is
named in CONNECT as ``original_principal`` (its token too, as ``original_auth_data``, with
``forwardAuthorizationCredentials=true``), as a Pulsar proxy does, so the broker authorizes the
client (the gateway's role must be one of the broker's ``proxyRoles``). Connections are
therefore kept per broker and per principal sent (sent_principal).

Credentials are never logged.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlsplit

from pulsar_lookup_gateway.brokers.settings import LinkSettings
from pulsar_lookup_gateway.listeners.auth import Principal
from pulsar_lookup_gateway.lookup.errors import FailureKind, LookupFailure

__all__ = ["TOKEN_METHOD", "sent_principal", "token_bytes"]

#: The auth method name of the broker's token provider, as CONNECT and AUTH_RESPONSE send it.
TOKEN_METHOD = "token"


def token_bytes(parameters: str) -> bytes:
    """The token of the token plugin's parameters (`token:<jwt>`, `file:///path`, or bare);
    a file is read each time, so a rotated token is used by the next connection."""
    if parameters.startswith("file:"):
        return Path(unquote(urlsplit(parameters).path)).read_bytes().strip()
    return parameters.removeprefix("token:").strip().encode()


def sent_principal(settings: LinkSettings, principal: Principal) -> Principal:
    """Who the broker is told a request is made for, and so which pooled connection it takes:
    the client's role, and its credentials only where they are forwarded (connections differ
    by what they send the broker).

    A client that proved no role is not sent as the gateway itself: where the gateway
    authenticates to the brokers (its token), the broker would see the gateway's role with no
    original principal, and either refuse it (Pulsar's brokers refuse a proxy role acting for
    nobody) or grant the stranger the gateway's rights. Such a request goes as
    `anonymousUserRole`, or is refused when that is not set."""
    if principal.role is None and settings.token is not None:
        if settings.anonymous_role is None:
            raise LookupFailure(
                FailureKind.NOT_AUTHORIZED,
                "this request is forwarded to a broker, which needs the client's role: "
                "authenticate to the gateway",
            )
        return Principal(settings.anonymous_role)
    return principal if settings.forward_credentials else Principal(principal.role)
