"""CONNECT: the proxy refusal, the credentials of a socket that requires them, CONNECTED."""

from __future__ import annotations

import logging
from collections.abc import Callable

from pulsar_lookup_gateway.listeners.auth import (
    AuthenticationFailed,
    Credentials,
    ListenerGuard,
    Principal,
    verified_peer_certificate,
)
from pulsar_lookup_gateway.listeners.binary.replies import AUTHENTICATION_ERROR, NOT_ALLOWED
from pulsar_lookup_gateway.listeners.binary.session import Memo, Session
from pulsar_lookup_gateway.listeners.binary.settings import (
    PROTOCOL_VERSION,
    SERVER_VERSION,
    BinarySettings,
)
from pulsar_lookup_gateway.listeners.binary.state import ConnectionState
from pulsar_lookup_gateway.listeners.protocol import codec
from pulsar_lookup_gateway.listeners.protocol.codec import BaseCommand, FeatureFlags
from pulsar_lookup_gateway.lookup.selection import ListenerChoice
from pulsar_lookup_gateway.serving.log_throttle import LogThrottle
from pulsar_lookup_gateway.serving.memo import BundleAnswers

log = logging.getLogger(__package__)

#: The ERROR a CONNECT with proxy_to_broker_url gets before the connection is closed.
PROXY_REFUSAL = (
    "the lookup gateway does not proxy connections to brokers (proxy_to_broker_url): "
    "connect to the broker address the lookup answered"
)
# What CONNECTED announces, as a broker does: PARTITIONED_METADATA honours
# metadata_auto_creation_enabled; no topic-list watchers (WATCH_TOPIC_LIST is not served, so
# clients re-list with GET_TOPICS_OF_NAMESPACE).
_FEATURES = FeatureFlags(
    supports_get_partitioned_metadata_without_auto_creation=True,
    supports_topic_watchers=False,
)


REFUSED_CONNECTS_LOGGED = 20  # lines per 10 s about refused CONNECTs of one socket
CERTIFICATE_NEEDED = (
    "Unable to authenticate: the listener requires a client certificate presented to its own "
    "TLS socket or server name"
)


class Handshake:
    """Answers the CONNECT of every connection of one socket."""

    def __init__(
        self,
        settings: BinarySettings,
        tables: Callable[[ListenerChoice], tuple[Memo, BundleAnswers]],
        url: str,
    ) -> None:
        """`tables`: the memo tables of a listener choice (Lookups.tables)."""
        self._settings = settings
        self._tables = tables
        self._url = url
        # A client can open thousands of connections with bad credentials: a few lines per
        # 10 s, the rest counted (and in pulsar_authentication_failures_total).
        self._refused = LogThrottle(log, logging.INFO, burst=REFUSED_CONNECTS_LOGGED)

    @staticmethod
    def requires_credentials(session: Session) -> bool:
        """Whether CONNECT must prove a role: the authentication of the connection's route."""
        return session.route.guard.required

    def connect(
        self,
        session: Session,
        command: BaseCommand,
        ssl_object: object,
        out: list[bytes],
    ) -> ConnectionState:
        """Queue the answer to CONNECT; the state the connection moves to."""
        if command.connect.proxy_to_broker_url:
            # A client told to proxy through its service URL names the broker here and expects
            # its producers and consumers to be relayed; the gateway answers lookups only, so it
            # says so at once instead of accepting a connection that would refuse them.
            self._refused.event(
                "closing connection from %s: CONNECT asks to be proxied", session.peer
            )
            out.append(codec.error(codec.NO_REQUEST, NOT_ALLOWED, PROXY_REFUSAL))
            return ConnectionState.CLOSING
        guard = session.route.guard
        if guard.certificate_missing(ssl_object):
            self._refused.event(
                "closing connection from %s on %s: no client certificate for listener %s",
                session.peer,
                self._url,
                guard.certificate_of,
            )
            out.append(codec.error(codec.NO_REQUEST, AUTHENTICATION_ERROR, CERTIFICATE_NEEDED))
            return ConnectionState.CLOSING
        if guard.required and not self._authenticate(guard, session, command, ssl_object, out):
            return ConnectionState.CLOSING
        # A client's version is any int32: answer within what this server speaks.
        version = max(0, min(command.connect.protocol_version, PROTOCOL_VERSION))
        size = self._settings.announced_message_size
        out.append(codec.connected(SERVER_VERSION, version, size, _FEATURES))
        if session.identity is None and session.role is None and self._settings.memoise_lookups:
            session.memo, session.bundles = self._tables(session.choice)
        return ConnectionState.CONNECTED

    def _authenticate(
        self,
        guard: ListenerGuard,
        session: Session,
        command: BaseCommand,
        ssl_object: object,
        out: list[bytes],
    ) -> bool:
        """Check CONNECT's credentials; on failure queue ERROR (the caller closes)."""
        connect = command.connect
        credentials = Credentials(
            method=connect.auth_method_name or None,
            data=connect.auth_data if connect.HasField("auth_data") else None,
            peer_certificate=verified_peer_certificate(ssl_object),
        )
        try:
            identity = guard.authenticate(credentials)
        except AuthenticationFailed as failed:
            self._refused.event(
                "closing connection from %s on %s: authentication failed: %s",
                session.peer,
                self._url,
                failed.reason,
            )
            message = f"Unable to authenticate: {failed.reason}"
            out.append(codec.error(codec.NO_REQUEST, AUTHENTICATION_ERROR, message))
            return False
        if identity is not None:
            session.identity = identity
            session.role = identity.role
            data = connect.auth_data.decode(errors="replace") if connect.auth_data else None
            session.principal = Principal(identity.role, identity.method, data)
        return True
