"""What one HTTP socket's application is built from: plain values, made where the process is
wired (gateway/), frozen, so that every route family is complete once it is built."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from pulsar_lookup_gateway.listeners.auth import Authenticator
from pulsar_lookup_gateway.listeners.endpoints.forwarded import HEADERS
from pulsar_lookup_gateway.lookup.networks import NetworkTable

#: The listener table's rows (every socket's address, listener and settings), read when asked:
#: the process fills it in once its ports are known, after the applications are built.
ListenerTable = Callable[[], Sequence[Mapping[str, object]]]


@dataclass(frozen=True, slots=True)
class WatchSettings:
    """The gateway's watch* keys (the ownership watch's streams, http_api.watch)."""

    max_topics: int = 10_000  # watchMaxTopicsPerStream
    max_streams_per_address: int = 64  # watchMaxStreamsPerAddress (0: no limit)
    max_streams_per_role: int = 1_024  # watchMaxStreamsPerRole (0: no limit)
    max_frame_bytes: int = 1024 * 1024  # watchMaxFrameBytes
    stalled_reader_timeout: float = 30.0  # watchStalledReaderTimeoutSeconds
    #: `run --workers N`: the streams per address and per role are limits for the whole
    #: gateway, so each worker admits its share of them (limit // N, at least 1)
    workers: int = 1

    def share(self, limit: int) -> int:
        """This process's share of a limit for the whole gateway (0: no limit)."""
        return max(1, limit // self.workers) if limit else 0


def no_listener_table() -> Sequence[Mapping[str, object]]:
    return ()


def always_accepting() -> bool:
    return True


@dataclass(frozen=True, slots=True)
class HttpSettings:
    """One HTTP socket: `listener` is the listener it is tagged with (None: a legacy port)."""

    listener: str | None
    #: who must authenticate, and how (the default: nobody, any listener name)
    authenticator: Authenticator = field(default_factory=Authenticator)
    #: the roles that may read the listener table (and /metrics) where authentication is on
    super_users: frozenset[str] = frozenset()
    #: peers whose X-Forwarded-For / Forwarded headers are believed
    trusted_proxies: NetworkTable[bool] = field(default_factory=NetworkTable)
    #: which of the two, in order of preference (trustedForwardedHeaders)
    forwarded_headers: tuple[str, ...] = HEADERS
    authenticate_metrics: bool = True  # authenticateMetricsEndpoint
    #: the watch* keys (the ownership watch of the service's process, shared by its sockets,
    #: is made with the first socket's)
    watch: WatchSettings = WatchSettings()
    #: warm lookups are answered from the answer memo (serving.memo)
    memoise_lookups: bool = True
    listener_table: ListenerTable = no_listener_table
    #: whether every socket of the process accepts now, read when /ready is asked (the process
    #: starts its sockets one by one, a binary one after making its answers ahead, and stops
    #: them all at once); an application served alone: its socket
    accepting: Callable[[], bool] = always_accepting
