"""What the request handlers know of one connection: who the client is and what it proved."""

from __future__ import annotations

from dataclasses import dataclass

from pulsar_lookup_gateway.listeners.auth import ANONYMOUS, Identity, Principal
from pulsar_lookup_gateway.listeners.endpoints.client_origin import ClientOrigin
from pulsar_lookup_gateway.listeners.protocol.lookup_frames import AnswerTemplate
from pulsar_lookup_gateway.listeners.routing import Route
from pulsar_lookup_gateway.lookup.selection import ListenerChoice
from pulsar_lookup_gateway.serving.memo import BundleAnswers, Place
from pulsar_lookup_gateway.serving.metrics import LookupTally

#: Memoised LOOKUPs of one listener choice (a table of the answer memo): request key ->
#: (answer template, (tally, connect), the place it is filed under).
Memo = dict[bytes, tuple[AnswerTemplate, tuple[LookupTally, bool], Place]]


# eq=False: a session is one connection's, hashed by identity (its bytes are charged to it in
# the one byte budget, serving.held_bytes).
@dataclass(slots=True, eq=False)
class Session:
    origin: ClientOrigin
    route: Route  # where a request naming no listener goes on this connection
    ssl_object: object = None  # the TLS session (None: plaintext)
    identity: Identity | None = None  # who authenticated (None: not required)
    role: str | None = None
    principal: Principal = ANONYMOUS  # who requests forwarded to a broker are made for
    # The memo table of this connection's listener choice (None: every request takes the
    # full path: before CONNECTED, and where a role is checked per lookup).
    memo: Memo | None = None
    # Cold LOOKUPs of the same choice answered by their bundle (None exactly when memo is).
    bundles: BundleAnswers | None = None
    forwarded: int = 0  # requests of this connection waiting on a broker

    @property
    def choice(self) -> ListenerChoice:
        return self.route.choice

    @property
    def peer(self) -> str:
        return self.origin.client

    def credentials_expired(self) -> bool:
        """Whether the credentials the client authenticated with have expired (a client that
        proved no role has none to expire)."""
        identity = self.identity
        return identity is not None and identity.expired(self.route.guard.authenticator.clock())
