"""The OpenAPI 3 description of the gateway's HTTP routes, served at `/openapi.json`."""

from __future__ import annotations

from typing import Any


def _error(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    }


def _path_param(name: str, description: str, **schema: Any) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "description": description,
        "schema": {"type": "string", **schema},
    }


_TOPIC_PARAMS: list[dict[str, Any]] = [
    _path_param("domain", "topic domain", enum=["persistent", "non-persistent"]),
    _path_param("tenant", "tenant name"),
    _path_param("namespace", "namespace name"),
    _path_param("topic", "local topic name, URL-encoded ('/' is not allowed in it)"),
]

_RETRY_AFTER: dict[str, Any] = {
    "Retry-After": {"description": "seconds to wait before retrying", "schema": {"type": "integer"}}
}
_ACCESS_ERRORS: dict[str, Any] = {
    "401": _error("this socket requires authentication and the credentials prove no role"),
    "403": _error("the role may not do this"),
}
_TOPIC_ERRORS: dict[str, Any] = {
    "400": _error(
        "invalid topic name, a listener the owning broker does not have, or a listener name "
        "this socket does not allow"
    ),
    **_ACCESS_ERRORS,
    "404": _error("the namespace does not exist"),
    "500": _error("the cluster metadata for this topic is malformed"),
    "503": {
        **_error(
            "no broker available (or none with a web URL for the listener to redirect to), "
            "bundle being unloaded, metadata store unreachable, or too many concurrent lookups "
            "(maxConcurrentLookupRequest); retry after Retry-After seconds"
        ),
        "headers": _RETRY_AFTER,
    },
}

_LISTENER_PARAMS: list[dict[str, Any]] = [
    {
        "name": "listenerName",
        "in": "query",
        "required": False,
        "description": "advertised listener to answer for; wins over the header",
        "schema": {"type": "string"},
    },
    {
        "name": "X-Pulsar-ListenerName",
        "in": "header",
        "required": False,
        "description": "advertised listener, as an ingress or mesh injects it",
        "schema": {"type": "string"},
    },
    {
        "name": "authoritative",
        "in": "query",
        "required": False,
        "description": "set by a redirect; accepted and ignored (a lookup gateway owns nothing)",
        "schema": {"type": "boolean"},
    },
]


def _text(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"text/plain": {"schema": {"type": "string"}}}}


def _json(description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


OPENAPI: dict[str, Any] = {
    "openapi": "3.0.3",
    "info": {
        "title": "pulsar-lookup-gateway",
        "version": "1",
        "description": (
            "Apache Pulsar topic lookups answered for the listener (PIP-95) of the network the "
            "client came from: the listenerName query parameter, else the X-Pulsar-ListenerName "
            "header, else the listener of the socket the request arrived on, else the brokers' "
            "internal addresses."
        ),
    },
    "paths": {
        "/lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}": {
            "get": {
                "summary": "Where a topic lives (the owning broker's URLs for the listener)",
                "operationId": "lookupTopic",
                "parameters": _TOPIC_PARAMS + _LISTENER_PARAMS,
                "responses": {
                    "200": _json("the owning broker", {"$ref": "#/components/schemas/LookupData"}),
                    "307": {
                        "description": (
                            "nobody owns the bundle: ask the broker in Location, which carries "
                            "authoritative and listenerName in its query"
                        ),
                        "headers": {"Location": {"schema": {"type": "string"}}},
                    },
                    **_TOPIC_ERRORS,
                },
            }
        },
        "/lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}/bundle": {
            "get": {
                "summary": "The bundle range a topic belongs to",
                "operationId": "topicBundle",
                "parameters": _TOPIC_PARAMS,
                "responses": {
                    "200": _text("bundle range, 0xLOWER_0xUPPER"),
                    **_TOPIC_ERRORS,
                },
            }
        },
        "/lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}/protocol/{protocol}": {
            "get": {
                "summary": (
                    "Where a protocol handler's client (Kafka, MQTT, gRPC, ...) finds the topic: "
                    "the owning broker's endpoints of that handler for the listener, chosen as "
                    "for a lookup; a bundle nobody owns is first taken by the broker the load "
                    "manager picks"
                ),
                "operationId": "lookupTopicProtocol",
                "parameters": [
                    *_TOPIC_PARAMS,
                    _path_param(
                        "protocol",
                        "protocol handler name, as the brokers advertise it (case ignored)",
                        pattern="^[A-Za-z0-9_.+-]{1,64}$",
                    ),
                    *_LISTENER_PARAMS[:2],
                ],
                "responses": {
                    "200": _json(
                        "the owner's endpoints", {"$ref": "#/components/schemas/ProtocolAnswer"}
                    ),
                    **_TOPIC_ERRORS,
                    "400": _error(
                        "invalid topic or protocol name, or a listener name this socket does "
                        "not allow"
                    ),
                    "404": _error(
                        "the namespace (or the topic) does not exist, the owner does not "
                        "advertise the protocol (the reason names those it does), or none of "
                        "its endpoints is the listener's (the reason names the listeners that "
                        "have one)"
                    ),
                    "503": {
                        **_error(
                            "the bundle has no owner and no broker took it within 2 s, no "
                            "broker could be asked, or as for a lookup; retry after Retry-After "
                            "seconds"
                        ),
                        "headers": _RETRY_AFTER,
                    },
                },
            }
        },
        "/admin/v2/{domain}/{tenant}/{namespace}/{topic}/partitions": {
            "get": {
                "summary": "Partitioned-topic metadata (0 partitions: not partitioned)",
                "operationId": "topicPartitions",
                "parameters": [
                    *_TOPIC_PARAMS,
                    {
                        "name": "checkAllowAutoCreation",
                        "in": "query",
                        "required": False,
                        "description": (
                            "true: a missing topic may be created where the cluster allows it "
                            "(allowAutoTopicCreation*, the namespace's override; a partitioned "
                            "one by a broker); false (default): a missing topic is 404"
                        ),
                        "schema": {"type": "boolean"},
                    },
                ],
                "responses": {
                    "200": _json(
                        "partition count", {"$ref": "#/components/schemas/PartitionedTopicMetadata"}
                    ),
                    **_TOPIC_ERRORS,
                    "404": _error("the namespace or the topic does not exist"),
                },
            }
        },
        "/admin/v2/namespaces/{tenant}/{namespace}/topics": {
            "get": {
                "summary": (
                    "The namespace's topics: persistent ones from the metadata store (system "
                    "topics left out), non-persistent ones (mode NON_PERSISTENT, ALL) from a broker"
                ),
                "operationId": "namespaceTopics",
                "parameters": [
                    _path_param("tenant", "tenant name"),
                    _path_param("namespace", "namespace name"),
                    {
                        "name": "mode",
                        "in": "query",
                        "required": False,
                        "schema": {
                            "type": "string",
                            "enum": ["PERSISTENT", "NON_PERSISTENT", "ALL"],
                            "default": "PERSISTENT",
                        },
                    },
                ],
                "responses": {
                    "200": _json(
                        "full topic names", {"type": "array", "items": {"type": "string"}}
                    ),
                    **_TOPIC_ERRORS,
                },
            }
        },
        "/admin/v2/schemas/{tenant}/{namespace}/{topic}/schema": {
            "get": {
                "summary": "The topic's latest schema, asked of a broker",
                "operationId": "schema",
                "parameters": _TOPIC_PARAMS[1:],
                "responses": {
                    "200": _json("the schema", {"$ref": "#/components/schemas/Schema"}),
                    **_TOPIC_ERRORS,
                    "404": _error("the topic has no schema"),
                },
            }
        },
        "/admin/v2/schemas/{tenant}/{namespace}/{topic}/schema/{version}": {
            "get": {
                "summary": "One version of the topic's schema, asked of a broker",
                "operationId": "schemaVersion",
                "parameters": [
                    *_TOPIC_PARAMS[1:],
                    _path_param("version", "schema version (a long)", pattern="^-?[0-9]+$"),
                ],
                "responses": {
                    "200": _json("the schema", {"$ref": "#/components/schemas/Schema"}),
                    **_TOPIC_ERRORS,
                    "404": _error("the topic has no schema of that version"),
                },
            }
        },
        "/lookup/v2/watch": {
            "get": {
                "summary": (
                    "Ownership watch: a WebSocket that pushes where subscribed topics live, and "
                    "every change (docs/protocols/ownership-watch.md)"
                ),
                "operationId": "watchOwnership",
                "parameters": _LISTENER_PARAMS[:2],
                "responses": {
                    "101": {"description": "switched to the WebSocket protocol"},
                    "400": _error("a listener name this socket does not allow"),
                    "401": _ACCESS_ERRORS["401"],
                    "426": _error("not a WebSocket upgrade request"),
                },
            }
        },
        "/status.html": {
            "get": {
                "summary": "Broker-style status page",
                "operationId": "status",
                "responses": {"200": _text("OK")},
            }
        },
        "/health": {
            "get": {
                "summary": "Liveness",
                "operationId": "health",
                "responses": {"200": _json("alive", {"type": "object"})},
            }
        },
        "/ready": {
            "get": {
                "summary": (
                    "Readiness: the metadata source is connected and warm and every socket of "
                    "the process accepts (on a socket that requires authentication the reason "
                    "is generic)"
                ),
                "operationId": "ready",
                "responses": {
                    "200": _json("ready", {"$ref": "#/components/schemas/Readiness"}),
                    "503": _json("not ready", {"$ref": "#/components/schemas/Readiness"}),
                },
            }
        },
        "/metrics": {
            "get": {
                "summary": "Prometheus metrics (pulsar_broker_lookup*)",
                "operationId": "metrics",
                "responses": {"200": _text("Prometheus text exposition"), **_ACCESS_ERRORS},
            }
        },
        "/admin/v2/gateway/listeners": {
            "get": {
                "summary": (
                    "The gateway's sockets and the listener each one is tagged with (super-users "
                    "only on a socket that requires authentication)"
                ),
                "operationId": "listeners",
                "responses": {
                    "200": _json("socket table", {"type": "array", "items": {"type": "object"}}),
                    **_ACCESS_ERRORS,
                },
            }
        },
        "/admin/v2/gateway/explain": {
            "get": {
                "summary": (
                    "Why a client with the facts given gets its answer on one of the gateway's "
                    "sockets: each step of the routing decision, what would be refused, the "
                    "bundle, its owner and the URLs (super-users only on a socket that requires "
                    "authentication)"
                ),
                "operationId": "explain",
                "parameters": [
                    {
                        "name": name,
                        "in": "query",
                        "required": name == "topic",
                        "schema": {"type": "string", "maxLength": 1024},
                    }
                    for name in (
                        "topic",
                        "socket",
                        "clientAddress",
                        "serverName",
                        "header",
                        "listenerName",
                    )
                ],
                "responses": {
                    "200": _json("the explanation", {"type": "object"}),
                    "400": _error("a parameter missing or wrong"),
                    **_ACCESS_ERRORS,
                },
            }
        },
        "/openapi.json": {
            "get": {
                "summary": "This document",
                "operationId": "openapi",
                "responses": {
                    "200": _json("OpenAPI 3 document", {"type": "object"}),
                    **_ACCESS_ERRORS,
                },
            }
        },
    },
    "components": {
        "schemas": {
            "Error": {
                "type": "object",
                "required": ["reason"],
                "properties": {"reason": {"type": "string"}},
            },
            "LookupData": {
                "type": "object",
                "required": [
                    "brokerUrl",
                    "brokerUrlTls",
                    "httpUrl",
                    "httpUrlTls",
                    "nativeUrl",
                    "brokerUrlSsl",
                ],
                "properties": {
                    "brokerUrl": {"type": "string"},
                    "brokerUrlTls": {"type": "string"},
                    "httpUrl": {"type": "string"},
                    "httpUrlTls": {"type": "string"},
                    "nativeUrl": {"type": "string", "description": "same as brokerUrl"},
                    "brokerUrlSsl": {"type": "string", "description": "always empty"},
                },
            },
            "ProtocolAnswer": {
                "type": "object",
                "required": [
                    "topic",
                    "bundle",
                    "brokerId",
                    "protocol",
                    "listener",
                    "listenerChosenBy",
                    "endpoints",
                    "data",
                ],
                "properties": {
                    "topic": {"type": "string"},
                    "bundle": {"type": "string"},
                    "brokerId": {"type": "string"},
                    "protocol": {"type": "string", "description": "as the broker spells it"},
                    "listener": {"type": "string", "nullable": True},
                    "listenerChosenBy": {
                        "type": "string",
                        "enum": ["explicit", "header", "sni", "network", "socket", "internal"],
                    },
                    "endpoints": {
                        "type": "array",
                        "items": {"$ref": "#/components/schemas/ProtocolEndpoint"},
                    },
                    "data": {
                        "type": "string",
                        "description": "the data string the broker advertises, whole",
                    },
                },
            },
            "ProtocolEndpoint": {
                "type": "object",
                "required": ["url", "scheme", "host", "port", "listener"],
                "properties": {
                    "url": {"type": "string", "description": "IPv6 hosts in brackets"},
                    "scheme": {"type": "string"},
                    "host": {"type": "string"},
                    "port": {"type": "integer", "nullable": True},
                    "listener": {
                        "type": "string",
                        "nullable": True,
                        "description": "the listener it belongs to; null: every listener",
                    },
                },
            },
            "Schema": {
                "type": "object",
                "required": ["version", "type", "timestamp", "data", "properties"],
                "properties": {
                    "version": {"type": "integer"},
                    "type": {"type": "string"},
                    "timestamp": {"type": "integer"},
                    "data": {"type": "string"},
                    "properties": {"type": "object", "additionalProperties": {"type": "string"}},
                },
            },
            "PartitionedTopicMetadata": {
                "type": "object",
                "required": ["partitions"],
                "properties": {"partitions": {"type": "integer", "minimum": 0}},
            },
            "Readiness": {
                "type": "object",
                "required": ["ready", "reason"],
                "properties": {
                    "ready": {"type": "boolean"},
                    "stale": {"type": "boolean"},
                    "reason": {"type": "string"},
                },
            },
        },
    },
}
