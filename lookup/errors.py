"""One error vocabulary for every lookup failure (Pulsar's ServerError codes)."""

from __future__ import annotations

from enum import Enum, IntEnum

from lookup.untrusted import printable


class ServerError(IntEnum):
    """Pulsar's `ServerError` enum, the codes a lookup can answer with."""

    UnknownError = 0
    MetadataError = 1
    PersistenceError = 2
    AuthenticationError = 3
    AuthorizationError = 4
    ConsumerBusy = 5
    ServiceNotReady = 6
    UnsupportedVersionError = 10
    TopicNotFound = 11
    TooManyRequests = 14
    InvalidTopicName = 17
    NotAllowedError = 22


class FailureKind(Enum):
    """Why a lookup failed; the protocol front ends map a kind to a wire answer in one place."""

    INVALID_TOPIC = "invalid-topic"
    NAMESPACE_NOT_FOUND = "namespace-not-found"
    LISTENER_NOT_FOUND = "listener-not-found"
    BUNDLE_UNLOADING = "bundle-unloading"
    NO_BROKER = "no-broker"
    METADATA_UNAVAILABLE = "metadata-unavailable"
    METADATA_MALFORMED = "metadata-malformed"
    TOO_MANY_REQUESTS = "too-many-requests"
    # Access: who may ask, and for which listener.
    NOT_AUTHENTICATED = "not-authenticated"  # no valid credentials where they are required
    NOT_AUTHORIZED = "not-authorized"  # the role has no lookup permission on the topic
    # The socket's listener does not allow asking for the named listener
    # (listener.<name>.allowedListenerNames).
    LISTENER_NOT_ALLOWED = "listener-not-allowed"

    @property
    def code(self) -> ServerError:
        return _WIRE[self][0]

    @property
    def retriable(self) -> bool:
        """Whether the same lookup may succeed if the client asks again later."""
        return _WIRE[self][1]


_WIRE: dict[FailureKind, tuple[ServerError, bool]] = {
    FailureKind.INVALID_TOPIC: (ServerError.InvalidTopicName, False),
    FailureKind.NAMESPACE_NOT_FOUND: (ServerError.MetadataError, False),
    FailureKind.LISTENER_NOT_FOUND: (ServerError.ServiceNotReady, False),
    FailureKind.BUNDLE_UNLOADING: (ServerError.MetadataError, True),
    FailureKind.NO_BROKER: (ServerError.ServiceNotReady, True),
    FailureKind.METADATA_UNAVAILABLE: (ServerError.ServiceNotReady, True),
    FailureKind.METADATA_MALFORMED: (ServerError.MetadataError, False),
    FailureKind.TOO_MANY_REQUESTS: (ServerError.TooManyRequests, True),
    FailureKind.NOT_AUTHENTICATED: (ServerError.AuthenticationError, False),
    FailureKind.NOT_AUTHORIZED: (ServerError.AuthorizationError, False),
    # NotAllowedError: a refusal by policy, not a missing permission of the role (that is
    # AuthorizationError) nor a transient state (the C++ client retries ServiceNotReady until
    # its operation timeout); the C++ client fails the lookup at once with ResultNotAllowedError.
    FailureKind.LISTENER_NOT_ALLOWED: (ServerError.NotAllowedError, False),
}


class LookupFailure(Exception):
    """A lookup that cannot be answered with an address."""

    def __init__(self, kind: FailureKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message

    @property
    def code(self) -> ServerError:
        return self.kind.code

    def __repr__(self) -> str:
        return f"LookupFailure({self.kind.name}, {self.message!r})"


class InvalidTopicName(LookupFailure):
    def __init__(self, name: str, reason: str) -> None:
        # The name is the client's: echoed escaped and cut short.
        super().__init__(
            FailureKind.INVALID_TOPIC, f"Invalid topic name '{printable(name)}': {reason}"
        )
        self.name = name


class MalformedNode(LookupFailure):
    """A znode whose content does not have Pulsar's shape. Names the path."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(FailureKind.METADATA_MALFORMED, f"malformed metadata at {path}: {reason}")
        self.path = path


class NodeNotLoaded(Exception):
    """The view holds no copy of `path` yet; the metadata source must read it, then retry.

    Not a LookupFailure: it is the core's way of asking its I/O shell for data (sans-IO).
    """

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.path = path
