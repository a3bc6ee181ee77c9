"""The Pulsar binary protocol server: one per ``pulsar://`` or ``pulsar+ssl://`` bind address.

A thin asyncio shell around the sans-IO codec (listeners.protocol.codec): bytes from the
socket go into a FrameDecoder, each command goes to the handler of its family, answered from the
LookupService, and the answer frames go back out. Each connection takes its route from the
socket's routing decision (listeners.routing: the client's network or TLS server name where
they choose, else the socket's listener); a non-blank ``advertised_listener_name`` in LOOKUP
overrides it, checked by the same decision (a name that breaks the rule for listener names is
answered as an unknown listener).

What a connection may do:

- CONNECT first, within the handshake deadline, in a frame of at most 64 KiB; anything else
  before it closes the connection. CONNECTED carries the client's protocol version clamped to
  ``[0, ours]`` and the cluster's maxMessageSize, which from then on bounds frames. A CONNECT
  that asks to be proxied to a broker (``proxy_to_broker_url``) gets ERROR ``NotAllowedError``
  and the connection is closed: the gateway relays nothing.
- Connections are capped per socket (brokerMaxConnections) and per client address
  (maxConnectionsPerIp); the excess is closed at accept, logged at most once per interval.
- LOOKUP, PARTITIONED_METADATA, GET_TOPICS_OF_NAMESPACE and GET_SCHEMA are answered
  concurrently (pipelined): a slow lookup does not hold up later ones; answers carry the request
  id. Persistent topic lists and partitioned metadata come from the metadata store, with the
  broker's auto-creation rules (lookup.topic_list, lookup.auto_creation); what only a broker can
  answer (schemas, non-persistent topics, creating a partitioned topic) is forwarded to a broker
  (forwarding.py: the interface gateway/ wires the broker link into) and the broker's answer is
  relayed under the client's request id.
  CONNECTED announces supports_get_partitioned_metadata_without_auto_creation, as a broker does.
- PING is answered with PONG; idle clients (whatever their version) are pinged every keep-alive
  interval and dropped if nothing comes back by the next tick.
- Any other command gets ERROR ``NotAllowedError`` naming it, and the connection stays usable.
- A frame that does not decode (RemoteProtocolError) closes that connection only.

Authentication: on a socket whose listener requires it, CONNECT's ``auth_method_name``
/ ``auth_data`` (and the verified client certificate of a ``pulsar+ssl://`` socket) must prove a
role before CONNECTED; otherwise ERROR ``AuthenticationError`` and the connection is closed. The
role stays with the connection: every LOOKUP and PARTITIONED_METADATA is authorized for it (when
authorization is on). A connection whose token has expired is closed at its next request; the
client reconnects with fresh credentials. A listener name the client asks for outside the
socket's ``allowedListenerNames`` answers Failed ``NotAllowedError``.

No exception raised by a peer's bytes escapes into the event loop.

The package, from the socket inwards:

- server.py: BinaryServer, one bind address: accepting, connection caps, keep-alive ticks,
  graceful stop; the handlers its connections share (handlers.py, one per command family).
- connection.py: the asyncio.Protocol of one connection: framing, its state (state.py:
  awaiting CONNECT, authenticating, connected, closing), flow control and keep-alive.
- handshake.py: CONNECT and credentials. lookups.py: LOOKUP, in full or from the process's
  answer memo (serving.memo; listeners.protocol.lookup_frames reads the requests and writes the
  answer frames at the byte level). broker_requests.py: partitioned metadata,
  topic lists and schemas (forwarding.py: what they ask of a broker). requests.py runs each
  request (a coroutine that ends in its answer frame); replies.py turns failures into frames.
"""

from pulsar_lookup_gateway.listeners.binary.server import BinaryServer
from pulsar_lookup_gateway.listeners.binary.settings import (
    PROTOCOL_VERSION,
    SERVER_VERSION,
    BinarySettings,
)

__all__ = ["PROTOCOL_VERSION", "SERVER_VERSION", "BinaryServer", "BinarySettings"]
