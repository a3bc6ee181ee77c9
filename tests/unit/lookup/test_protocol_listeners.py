"""Protocol handlers' listener names (issue 27, item 6): which gateway listener gets which
endpoint, and the security protocol each endpoint speaks, as Kafka-on-Pulsar, MQTT-on-Pulsar
and the gRPC handler of PIP-59 name their listeners; the keys that map them, as check-config
reports them."""

from __future__ import annotations

from typing import Any

import pytest

from pulsar_lookup_gateway.listeners.config.conf_file import parse_properties
from pulsar_lookup_gateway.listeners.config.model import ConfigError, validate_raw
from pulsar_lookup_gateway.lookup.errors import FailureKind, LookupFailure
from pulsar_lookup_gateway.lookup.protocol_data import ProtocolAnswer, resolve_protocol
from pulsar_lookup_gateway.lookup.resolve import ResolvePolicy
from pulsar_lookup_gateway.lookup.selection import ChoiceSource, ListenerChoice
from pulsar_lookup_gateway.lookup.view import ClusterView
from tests.unit.lookup.protocol_cluster import EXTERNAL, IN_FIRST, INTERNAL, kop_cluster

BASE = (
    "metadataStoreUrl=file:/unused.json\n"
    "advertisedListeners=internal:pulsar://10.0.0.1:6650,external:pulsar://gw.example.com:6650\n"
)
# KoP with kafkaProtocolMap: its listener names are its own (docs/configuration.md's example).
KOP_NAMED = "kafka_internal://10.0.0.{i}:9092,kafka_external://b{i}.example.com:19092"
# KoP without it: each entry is named by its Kafka security protocol.
KOP_PLAIN = "PLAINTEXT://10.0.0.{i}:9092,SASL_SSL://b{i}.example.com:9094"
MOP = "mqtt://b{i}.example.com:1883,mqtt+ssl://b{i}.example.com:8883,ws+ssl://b{i}.example.com:8084"
GRPC = "grpcServiceHost=b{i}.example.com;grpcServicePort=50051;grpcServicePortTls=50052"


def policy(conf: str = "") -> ResolvePolicy:
    """The resolve policy the gateway's config gives (GatewayConfig.resolve_policy)."""
    return validate_raw(parse_properties(BASE + conf, "g.conf")).config.resolve_policy()


def answer(protocol: str, data: str, choice: ListenerChoice, conf: str = "") -> ProtocolAnswer:
    view = ClusterView.from_snapshot(kop_cluster(**{protocol: data}))
    return resolve_protocol(
        IN_FIRST, choice, protocol, view, policy(conf), declared=("internal", "external")
    )


def shown(result: ProtocolAnswer) -> list[tuple[Any, ...]]:
    return [(e.url, e.listener, e.security_protocol) for e in result.endpoints]


def test_kop_security_protocol_names_belong_to_every_listener() -> None:
    """KafkaProtocolHandler.getProtocolDataToAdvertise advertises kafkaAdvertisedListeners;
    without kafkaProtocolMap each entry's name is a Kafka SecurityProtocol (KoP's EndPoint),
    one address per protocol for every client, so no listener owns one."""
    every = [
        ("PLAINTEXT://10.0.0.1:9092", None, "PLAINTEXT"),
        ("SASL_SSL://b1.example.com:9094", None, "SASL_SSL"),
    ]
    assert shown(answer("kafka", KOP_PLAIN, EXTERNAL)) == every
    assert shown(answer("kafka", KOP_PLAIN, INTERNAL)) == every
    assert [e.to_json()["tls"] for e in answer("kafka", KOP_PLAIN, EXTERNAL).endpoints] == [
        False,
        True,
    ]
    # With kafkaListenerMap, a security protocol goes where it is mapped.
    mapped = answer("kafka", KOP_PLAIN, EXTERNAL, "kafkaListenerMap=external:sasl_ssl\n")
    assert shown(mapped) == [("SASL_SSL://b1.example.com:9094", "external", "SASL_SSL")]


def test_kop_listener_names_need_the_map_unless_they_are_listener_names() -> None:
    """With kafkaProtocolMap, KoP answers a Kafka client with the owner's entry named as the
    KoP listener its connection came in on (KopBrokerLookupManager.getAdvertisedListener,
    EndPoint.findListener), and that entry's security protocol is only in kafkaProtocolMap
    (EndPoint's constructor). Which gateway listener is which KoP listener is the operator's
    to say: without kafkaListenerMap an unknown name goes to no listener, and the 404 says so
    (the old guess gave every listener both the internal and the external address)."""
    with pytest.raises(LookupFailure) as refused:
        answer("kafka", KOP_NAMED, EXTERNAL)
    assert refused.value.kind is FailureKind.NO_PROTOCOL_ENDPOINT
    assert "kafkaListenerMap does not map to a listener" in refused.value.message
    assert "10.0.0.1" not in refused.value.message  # (no internal address to a client)
    conf = (
        "kafkaListenerMap=internal:kafka_internal,external:kafka_external\n"
        "kafkaProtocolMap=kafka_internal:PLAINTEXT,kafka_external:SASL_SSL\n"
    )
    assert shown(answer("kafka", KOP_NAMED, EXTERNAL, conf)) == [
        ("kafka_external://b1.example.com:19092", "external", "SASL_SSL")
    ]
    assert shown(answer("kafka", KOP_NAMED, INTERNAL, conf)) == [
        ("kafka_internal://10.0.0.1:9092", "internal", "PLAINTEXT")
    ]
    # No kafkaProtocolMap entry: the security protocol is not known.
    unknown = answer("kafka", KOP_NAMED, EXTERNAL, "kafkaListenerMap=external:kafka_external\n")
    assert shown(unknown) == [("kafka_external://b1.example.com:19092", "external", None)]
    assert unknown.endpoints[0].to_json()["tls"] is None
    # KoP's documented set-up declares its names in advertisedListeners: a name that is a
    # listener's belongs to that listener without a map (never ambiguous).
    own = ListenerChoice("kafka_external", ChoiceSource.EXPLICIT)
    view = ClusterView.from_snapshot(kop_cluster(kafka=KOP_NAMED))
    named = resolve_protocol(IN_FIRST, own, "kafka", view, declared=("kafka_external",))
    assert [e.url for e in named.endpoints] == ["kafka_external://b1.example.com:19092"]


def test_mop_transports_belong_to_every_listener_unless_mapped() -> None:
    """MQTTProtocolHandler.getProtocolDataToAdvertise advertises mqttListeners, whose entries
    are named by transport (ConfigurationUtils: mqtt://, mqtt+ssl://, mqtt+ssl+psk://, ws://,
    ws+ssl://); MoP has no listener names."""
    every = answer("mqtt", MOP, EXTERNAL)
    assert shown(every) == [
        ("mqtt://b1.example.com:1883", None, "PLAINTEXT"),
        ("mqtt+ssl://b1.example.com:8883", None, "SSL"),
        ("ws+ssl://b1.example.com:8084", None, "SSL"),
    ]
    conf = "mqttListenerMap=external:MQTT+SSL,external:ws+ssl,internal:mqtt\n"
    assert shown(answer("mqtt", MOP, EXTERNAL, conf)) == [
        ("mqtt+ssl://b1.example.com:8883", "external", "SSL"),
        ("ws+ssl://b1.example.com:8084", "external", "SSL"),
    ]
    assert shown(answer("mqtt", MOP, INTERNAL, conf)) == [
        ("mqtt://b1.example.com:1883", "internal", "PLAINTEXT")
    ]


def test_grpc_ports_belong_to_every_listener_unless_mapped() -> None:
    """The gRPC handler (PIP-59; GrpcService.getProtocolDataToAdvertise) advertises one host,
    the broker's advertisedAddress, with grpcServicePort and grpcServicePortTls."""
    assert shown(answer("grpc", GRPC, EXTERNAL)) == [
        ("grpc://b1.example.com:50051", None, "PLAINTEXT"),
        ("grpc+tls://b1.example.com:50052", None, "SSL"),
    ]
    mapped = answer("grpc", GRPC, EXTERNAL, "grpcListenerMap=external:grpc+tls\n")
    assert shown(mapped) == [("grpc+tls://b1.example.com:50052", "external", "SSL")]
    with pytest.raises(LookupFailure, match="grpcListenerMap does not map"):
        answer("grpc", GRPC, INTERNAL, "grpcListenerMap=external:grpc+tls\n")


@pytest.mark.parametrize(
    ("conf", "expected"),
    [
        (
            "kafkaListenerMap=internal:kafka_internal,external\n",
            "kafkaListenerMap (g.conf:3): entry 'external': expected <listener>:<KoP listener "
            "name or security protocol>",
        ),
        (
            "mqttListenerMap=external:mqtt+tls\n",
            "mqttListenerMap (g.conf:3): entry 'external:mqtt+tls': 'mqtt+tls' is not one of "
            "mqtt, mqtt+ssl, mqtt+ssl+psk, ws, ws+ssl",
        ),
        (
            "grpcListenerMap=external:grpc+ssl\n",
            "grpcListenerMap (g.conf:3): entry 'external:grpc+ssl': 'grpc+ssl' is not one of "
            "grpc, grpc+tls",
        ),
        (
            "kafkaListenerMap=partner:kafka_external\n",
            "kafkaListenerMap (g.conf:3): entry 'partner:kafka_external': listener 'partner' "
            "is not declared in advertisedListeners (internal, external)",
        ),
        (
            "kafkaProtocolMap=kafka_external:TLS\n",
            "kafkaProtocolMap (g.conf:3): entry 'kafka_external:TLS': 'TLS' is not one of "
            "PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL",
        ),
        (
            "kafkaListenerMap=external:kafka_external,external:kafka_external\n",
            "kafkaListenerMap (g.conf:3): entry 'external:kafka_external': listed twice",
        ),
    ],
)
def test_check_config_names_the_key_and_the_entry(conf: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate_raw(parse_properties(BASE + conf, "g.conf"))
    assert [str(problem) for problem in info.value.problems] == [expected]
