"""How the gateway reaches the brokers (LinkSettings, built where the process is wired) and the
link's default bounds.

- **Bounds**: at most ``max_connections`` connections (the least recently used idle one is
  closed to make room; with none idle the request is refused), at most
  ``max_in_flight_per_broker`` requests waiting on one broker (the excess is refused at once
  with ``TooManyRequests``: there is no queue), and each request ends within
  ``request_timeout`` (``FORWARD_TIMEOUT``, 10 s: below the clients' default operation timeout
  of 30 s, so the client gets the gateway's error rather than its own timeout).
- **Failures**: a broker that could not be reached, or did not answer in time, is skipped for
  ``failure_cooldown`` seconds unless no other broker is left; a request whose connection could
  not be opened tries the next broker (up to ``CONNECT_ATTEMPTS``).
- **The REST topic list's fan-out**: at most ``fan_out`` brokers at a time per list and
  ``fan_out_total`` over all lists (brokers.fan_out).
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

__all__ = [
    "CONNECT_ATTEMPTS",
    "FORWARD_TIMEOUT",
    "LinkSettings",
]

FORWARD_TIMEOUT = 10.0  # seconds one forwarded request may take
CONNECT_TIMEOUT = 5.0  # seconds to open a connection and have CONNECTED back
MAX_IN_FLIGHT_PER_BROKER = 1000
MAX_CONNECTIONS = 64
FAN_OUT = 8  # brokers one REST topic list asks at once
FAN_OUT_TOTAL = 32  # brokers all REST topic lists ask at once
FAILURE_COOLDOWN = 30.0  # seconds a broker that failed is skipped
CONNECT_ATTEMPTS = 3  # brokers tried when connections cannot be opened


@dataclass(frozen=True, slots=True)
class LinkSettings:
    tls: bool = False
    trust_certs_file: str | None = None
    verify_hostname: bool = False
    token: str | None = None  # brokerClientAuthenticationParameters of the token plugin
    forward_credentials: bool = False
    # anonymousUserRole: the original principal of a forwarded request whose client proved no
    # role (None: such requests are refused where the gateway has an identity of its own).
    anonymous_role: str | None = None
    internal_listener: str | None = None
    request_timeout: float = FORWARD_TIMEOUT
    connect_timeout: float = CONNECT_TIMEOUT
    max_in_flight_per_broker: int = MAX_IN_FLIGHT_PER_BROKER
    max_connections: int = MAX_CONNECTIONS
    failure_cooldown: float = FAILURE_COOLDOWN
    fan_out: int = FAN_OUT
    fan_out_total: int = FAN_OUT_TOTAL

    def ssl_context(self) -> ssl.SSLContext | None:
        if not self.tls:
            return None
        context = ssl.create_default_context(cafile=self.trust_certs_file)
        context.check_hostname = self.verify_hostname
        return context
