"""One error vocabulary for every lookup failure (Pulsar's ServerError codes)."""

from __future__ import annotations

from enum import Enum, IntEnum

from pulsar_lookup_gateway.lookup.untrusted import printable


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
    # Geo-replication (clusterName): the namespace's policies are marked deleted; the local
    # cluster does not serve the namespace and no peer cluster does; a peer cluster named in
    # peerClusterNames has no /admin/clusters node.
    NAMESPACE_DELETED = "namespace-deleted"
    NOT_IN_CLUSTER = "not-in-cluster"
    PEER_CLUSTER_MISSING = "peer-cluster-missing"
    # Extensible load manager: the bundle's owner has no registration (it went away), or the
    # bundle itself was deleted (split); both pass, the client retries.
    OWNER_INACTIVE = "owner-inactive"
    BUNDLE_DELETED = "bundle-deleted"
    # An HTTPS lookup whose redirect target has no HTTPS URL for the listener (HTTP only: a
    # TLS client is never sent to a plain http:// address).
    NO_TLS_REDIRECT = "no-tls-redirect"
    # A topic that does not exist where it may not be created (allowAutoTopicCreation), and a
    # request only a broker can answer when no broker could be reached over the broker link.
    TOPIC_NOT_FOUND = "topic-not-found"
    BROKER_UNAVAILABLE = "broker-unavailable"
    # Protocol-handler lookups (HTTP only): the owner advertises no data for the protocol, or
    # none of its endpoints belongs to the chosen listener.
    PROTOCOL_NOT_ADVERTISED = "protocol-not-advertised"
    NO_PROTOCOL_ENDPOINT = "no-protocol-endpoint"
    # A topic-list pattern the broker's filtering throws on (a scheme other than persistent://
    # or non-persistent://, a regex neither RE2J nor the JDK compiles).
    INVALID_PATTERN = "invalid-pattern"

    @property
    def code(self) -> ServerError:
        return _WIRE[self][0]

    @property
    def retriable(self) -> bool:
        """Whether the same lookup may succeed if the client asks again later."""
        return _WIRE[self][1]


_WIRE: dict[FailureKind, tuple[ServerError, bool]] = {
    FailureKind.INVALID_TOPIC: (ServerError.InvalidTopicName, False),
    # A namespace with no policies: master's lookup (TopicLookupBase.lookupTopicAsync) and
    # partitioned metadata (ServerCnx.handlePartitionMetadataRequest) answer the 404 of
    # PulsarWebResource.checkLocalOrGetPeerReplicationCluster as TopicNotFound (older brokers
    # answered MetadataError "Policies not found for <ns> namespace").
    FailureKind.NAMESPACE_NOT_FOUND: (ServerError.TopicNotFound, False),
    FailureKind.LISTENER_NOT_FOUND: (ServerError.ServiceNotReady, False),
    # A bundle being unloaded: Pulsar's NamespaceService fails the lookup with an
    # IllegalStateException, which the broker's lookup handler answers as MetadataError (not
    # ServiceNotReady); the C++ client retries it.
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
    # Pulsar's brokers answer a deleted namespace as not found (TopicNotFound), and a namespace
    # the local cluster may not serve, or a peer cluster without a binary URL, as MetadataError.
    FailureKind.NAMESPACE_DELETED: (ServerError.TopicNotFound, False),
    FailureKind.NOT_IN_CLUSTER: (ServerError.MetadataError, False),
    FailureKind.PEER_CLUSTER_MISSING: (ServerError.TopicNotFound, False),
    # The extensible load manager fails a lookup whose owner is not registered with an
    # IllegalStateException, which brokers answer as MetadataError; a deleted bundle with an
    # IllegalArgumentException, which they answer as ServiceNotReady.
    FailureKind.OWNER_INACTIVE: (ServerError.MetadataError, True),
    FailureKind.BUNDLE_DELETED: (ServerError.ServiceNotReady, True),
    # HTTP only (412); never sent on the binary protocol.
    FailureKind.NO_TLS_REDIRECT: (ServerError.ServiceNotReady, False),
    FailureKind.TOPIC_NOT_FOUND: (ServerError.TopicNotFound, False),
    FailureKind.BROKER_UNAVAILABLE: (ServerError.ServiceNotReady, True),
    # HTTP only (404); never sent on the binary protocol.
    FailureKind.PROTOCOL_NOT_ADVERTISED: (ServerError.ServiceNotReady, False),
    FailureKind.NO_PROTOCOL_ENDPOINT: (ServerError.ServiceNotReady, False),
    # ServerCnx.internalHandleGetTopicsOfNamespace answers the exception as
    # getClientErrorCode(new ServerMetadataException(ex)): MetadataError.
    FailureKind.INVALID_PATTERN: (ServerError.MetadataError, False),
}


#: What master says of a namespace that does not exist (PulsarWebResource.
#: checkLocalOrGetPeerReplicationCluster: RestException 404 "Namespace not found").
NAMESPACE_NOT_FOUND_MESSAGE = "Namespace not found"

# Broker registrations (lookup.model's BROKERS_ROOT), whose node names are broker ids.
_BROKER_NODES = "/loadbalance/brokers/"


class LookupFailure(Exception):
    """A lookup that cannot be answered with an address."""

    def __init__(self, kind: FailureKind, message: str, detail: str | None = None) -> None:
        """`message` goes to the client: it never names an internal address, a broker id or
        a znode of a broker; `detail`, for the gateway's log only, may (operators need it)."""
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.detail = detail
        self.logged = False  # the lookup service wrote its log line already

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
        # A broker's registration is named by its internal address: told to the log only.
        full = f"malformed metadata at {path}: {reason}"
        if path.startswith(_BROKER_NODES):
            super().__init__(
                FailureKind.METADATA_MALFORMED,
                "malformed broker registration in the metadata",
                full,
            )
        else:
            super().__init__(FailureKind.METADATA_MALFORMED, full)
        self.path = path


class NodeNotLoaded(Exception):
    """The view holds no copy of `path` yet; the metadata source must read it, then retry.

    Not a LookupFailure: it is the core's way of asking its I/O shell for data (sans-IO).
    """

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.path = path
