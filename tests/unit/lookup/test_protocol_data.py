"""Protocol-handler data strings (lookup.protocol_data): the shapes real handlers advertise, junk,
the per-listener selection, and resolve_protocol() against snapshots in Pulsar's layout."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pulsar_lookup_gateway.lookup.errors import FailureKind, LookupFailure
from pulsar_lookup_gateway.lookup.model import parse_broker
from pulsar_lookup_gateway.lookup.protocol_data import (
    AdvertisedEndpoint,
    Endpoint,
    endpoints_text,
    is_protocol_name,
    listeners_with_endpoints,
    parse_protocol_data,
    resolve_protocol,
    select_endpoints,
)
from pulsar_lookup_gateway.lookup.selection import ChoiceSource, ListenerChoice
from pulsar_lookup_gateway.lookup.topics import TopicName
from pulsar_lookup_gateway.lookup.view import ClusterView
from pulsar_lookup_gateway.metadata_store.synthetic import broker_id, topic_in_range
from tests.unit.lookup.protocol_cluster import (
    EXTERNAL,
    FIRST,
    IN_FIRST,
    INTERNAL,
    kop_cluster,
)

IN_LAST = TopicName.parse(topic_in_range(0xC0000000, 0xFFFFFFFF))
NO_LISTENER = ListenerChoice(None, ChoiceSource.INTERNAL, internal=True)
KOP_NAMED = "kafka_internal://10.0.0.1:9092,kafka_external://b1.example.com:19092"
EXTENSIBLE = "org.apache.pulsar.broker.loadbalance.extensions.ExtensibleLoadManagerImpl"


def ep(url: str, scheme: str, host: str, port: int | None, prefix: str | None = None) -> Any:
    return AdvertisedEndpoint(url, scheme, host, port, prefix)


# -- parsing: the shapes handlers write ---------------------------------------------------------

SHAPES: list[tuple[str, str, list[AdvertisedEndpoint], list[str]]] = [
    (
        "Kafka-on-Pulsar, listeners named by security protocol",
        "PLAINTEXT://b1.example.com:9092,SSL://b1.example.com:9093",
        [
            ep("PLAINTEXT://b1.example.com:9092", "PLAINTEXT", "b1.example.com", 9092),
            ep("SSL://b1.example.com:9093", "SSL", "b1.example.com", 9093),
        ],
        [],
    ),
    (
        "Kafka-on-Pulsar, SASL",
        "SASL_PLAINTEXT://10.0.0.1:9092, SASL_SSL://b1.example.com:9094",
        [
            ep("SASL_PLAINTEXT://10.0.0.1:9092", "SASL_PLAINTEXT", "10.0.0.1", 9092),
            ep("SASL_SSL://b1.example.com:9094", "SASL_SSL", "b1.example.com", 9094),
        ],
        [],
    ),
    (
        "Kafka-on-Pulsar with kafkaProtocolMap: endpoints named by listener",
        KOP_NAMED,
        [
            ep("kafka_internal://10.0.0.1:9092", "kafka_internal", "10.0.0.1", 9092),
            ep("kafka_external://b1.example.com:19092", "kafka_external", "b1.example.com", 19092),
        ],
        [],
    ),
    (
        "PIP-95 style: listener:scheme://host:port",
        "internal:PLAINTEXT://10.0.0.1:9092,external:SSL://b1.example.com:9093",
        [
            ep("PLAINTEXT://10.0.0.1:9092", "PLAINTEXT", "10.0.0.1", 9092, "internal"),
            ep("SSL://b1.example.com:9093", "SSL", "b1.example.com", 9093, "external"),
        ],
        [],
    ),
    (
        "MQTT-on-Pulsar's mqttListeners",
        "mqtt://127.0.0.1:1883,mqtt+ssl://127.0.0.1:8883,mqtt+ssl+psk://127.0.0.1:8884,"
        "ws://127.0.0.1:8083,ws+ssl://127.0.0.1:8084",
        [
            ep("mqtt://127.0.0.1:1883", "mqtt", "127.0.0.1", 1883),
            ep("mqtt+ssl://127.0.0.1:8883", "mqtt+ssl", "127.0.0.1", 8883),
            ep("mqtt+ssl+psk://127.0.0.1:8884", "mqtt+ssl+psk", "127.0.0.1", 8884),
            ep("ws://127.0.0.1:8083", "ws", "127.0.0.1", 8083),
            ep("ws+ssl://127.0.0.1:8084", "ws+ssl", "127.0.0.1", 8084),
        ],
        [],
    ),
    (
        "the gRPC handler of PIP-59: properties",
        "grpcServiceHost=b1.example.com;grpcServicePort=50051;grpcServicePortTls=50052",
        [
            ep("grpc://b1.example.com:50051", "grpc", "b1.example.com", 50051),
            ep("grpc+tls://b1.example.com:50052", "grpc+tls", "b1.example.com", 50052),
        ],
        [],
    ),
    (
        "the gRPC handler, TLS port only",
        "grpcServiceHost=b1.example.com;grpcServicePortTls=50052",
        [ep("grpc+tls://b1.example.com:50052", "grpc+tls", "b1.example.com", 50052)],
        [],
    ),
    (
        "the gRPC handler without an advertised address",
        "grpcServicePort=50051",
        [],
        ["grpcServicePort=50051"],
    ),
    (
        "the gRPC handler on an IPv6 address",
        "grpcServiceHost=2001:db8::1;grpcServicePort=50051",
        [ep("grpc://[2001:db8::1]:50051", "grpc", "2001:db8::1", 50051)],
        [],
    ),
    ("an early gRPC handler advertised the text null", "null", [], ["null"]),
    ("nothing", "", [], []),
    (
        "bare URLs: no port, a path",
        "http://b1.example.com,ws://b1.example.com:8083/mqtt",
        [
            ep("http://b1.example.com", "http", "b1.example.com", None),
            ep("ws://b1.example.com:8083/mqtt", "ws", "b1.example.com", 8083),
        ],
        [],
    ),
    (
        "IPv6: bracketed, with a zone, and bare as Kafka-on-Pulsar accepts it",
        "PLAINTEXT://[::1]:9092,SSL://[fe80::1%eth0]:9093,SASL_SSL://2001:db8::7:9094",
        [
            ep("PLAINTEXT://[::1]:9092", "PLAINTEXT", "::1", 9092),
            ep("SSL://[fe80::1%eth0]:9093", "SSL", "fe80::1%eth0", 9093),
            ep("SASL_SSL://[2001:db8::7]:9094", "SASL_SSL", "2001:db8::7", 9094),
        ],
        [],
    ),
    (
        "junk beside an endpoint is kept, never dropped",
        "PLAINTEXT://b1:9092,b1:9093,PLAINTEXT://user@b1:9094,SSL://b1:99999,SSL://:9095,"
        "SSL://b1:-1,SSL://[not-v6]:1,a:b:c://b1:1,SSL://b1:port",
        [ep("PLAINTEXT://b1:9092", "PLAINTEXT", "b1", 9092)],
        [
            "b1:9093",
            "PLAINTEXT://user@b1:9094",
            "SSL://b1:99999",
            "SSL://:9095",
            "SSL://b1:-1",
            "SSL://[not-v6]:1",
            "a:b:c://b1:1",
            "SSL://b1:port",
        ],
    ),
    ("unknown properties", "answer=42;grpcServicePort=x", [], ["answer=42", "grpcServicePort=x"]),
]


@pytest.mark.parametrize(
    ("raw", "endpoints", "unparsed"),
    [shape[1:] for shape in SHAPES],
    ids=[shape[0] for shape in SHAPES],
)
def test_data_strings(raw: str, endpoints: list[AdvertisedEndpoint], unparsed: list[str]) -> None:
    data = parse_protocol_data(raw)
    assert list(data.endpoints) == endpoints
    assert list(data.unparsed) == unparsed
    assert data.raw == raw


@given(st.text(max_size=200))
def test_any_text_parses_without_raising_and_every_endpoint_reparses(raw: str) -> None:
    data = parse_protocol_data(raw)
    for endpoint in data.endpoints:
        again = parse_protocol_data(endpoint.url).endpoints
        assert len(again) == 1
        assert (again[0].scheme, again[0].host, again[0].port) == (
            endpoint.scheme,
            endpoint.host,
            endpoint.port,
        )


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["PLAINTEXT", "SSL", "mqtt+ssl", "kafka_external"]),
            st.sampled_from(["b1.example.com", "10.0.0.1", "[::1]", "[2001:db8::1]"]),
            st.integers(1, 65535),
        ),
        max_size=5,
    )
)
def test_well_formed_lists_parse_whole(entries: list[tuple[str, str, int]]) -> None:
    raw = ",".join(f"{scheme}://{host}:{port}" for scheme, host, port in entries)
    data = parse_protocol_data(raw)
    assert not data.unparsed
    assert [e.url for e in data.endpoints] == (raw.split(",") if raw else [])


# -- selection ----------------------------------------------------------------------------------


def urls(endpoints: tuple[Endpoint, ...]) -> list[str]:
    return [endpoint.url for endpoint in endpoints]


def test_scheme_that_is_a_listener_name_belongs_to_that_listener() -> None:
    data = parse_protocol_data(KOP_NAMED)
    names = {"kafka_internal", "kafka_external"}
    assert urls(select_endpoints(data, "kafka_external", names)) == [
        "kafka_external://b1.example.com:19092"
    ]
    assert select_endpoints(data, "kafka_external", names)[0].listener == "kafka_external"
    assert select_endpoints(data, None, names) == ()
    assert listeners_with_endpoints(data, names) == ["kafka_external", "kafka_internal"]
    # Names that are no listener: the endpoints belong to every listener.
    assert urls(select_endpoints(data, "external", {"internal", "external"})) == urls(
        select_endpoints(data, None, ())
    )
    assert listeners_with_endpoints(data, {"external"}) == []


def test_own_endpoints_and_everyones_in_the_order_advertised() -> None:
    raw = "SSL://b1:9093,internal:PLAINTEXT://10.0.0.1:9092,external:SSL://b1:9094"
    data = parse_protocol_data(raw)
    names = {"internal", "external"}
    assert urls(select_endpoints(data, "internal", names)) == [
        "SSL://b1:9093",
        "PLAINTEXT://10.0.0.1:9092",
    ]
    assert [e.listener for e in select_endpoints(data, "internal", names)] == [None, "internal"]
    assert urls(select_endpoints(data, "external", names)) == ["SSL://b1:9093", "SSL://b1:9094"]
    assert urls(select_endpoints(data, "partner", names)) == ["SSL://b1:9093"]
    assert urls(select_endpoints(data, None, names)) == ["SSL://b1:9093"]
    # A prefix names a listener even where the broker does not advertise one by that name.
    assert urls(select_endpoints(data, "internal", ())) == [
        "SSL://b1:9093",
        "PLAINTEXT://10.0.0.1:9092",
    ]


def test_endpoint_json_and_text() -> None:
    data = parse_protocol_data("external:SSL://[::1]:9093,PLAINTEXT://b1:9092")
    chosen = select_endpoints(data, "external", (), protocol="kafka")
    assert [e.to_json() for e in chosen] == [
        {"url": "SSL://[::1]:9093", "scheme": "SSL", "host": "::1", "port": 9093,
         "listener": "external", "securityProtocol": "SSL", "tls": True},
        {"url": "PLAINTEXT://b1:9092", "scheme": "PLAINTEXT", "host": "b1", "port": 9092,
         "listener": None, "securityProtocol": "PLAINTEXT", "tls": False},
    ]  # fmt: skip
    assert endpoints_text(chosen) == "SSL://[::1]:9093,PLAINTEXT://b1:9092"


@pytest.mark.parametrize(
    ("name", "valid"),
    [("kafka", True), ("mqtt", True), ("grpc", True), ("x.y+z_1-2", True), ("", False),
     ("a/b", False), ("k" * 65, False), ("kafka\n", False)],
)  # fmt: skip
def test_protocol_names(name: str, valid: bool) -> None:
    assert is_protocol_name(name) is valid


# -- the registration ---------------------------------------------------------------------------


def test_a_null_or_non_text_protocol_value_keeps_the_registration() -> None:
    broker = parse_broker(
        "/loadbalance/brokers/b1:8080",
        {"pulsarServiceUrl": "pulsar://b1:6650", "protocols": {"grpc": None, "x": {"a": 1}}},
    )
    assert broker.protocols == {"grpc": "", "x": '{"a": 1}'}
    assert parse_protocol_data(broker.protocols["x"]).unparsed == ('{"a": 1}',)


# -- resolve_protocol ---------------------------------------------------------------------------


PIP95 = "internal:PLAINTEXT://10.0.0.{i}:9092,external:SSL://b{i}.example.com:9093"
GRPC = "grpcServiceHost=b{i}.example.com;grpcServicePort=50051"


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        (EXTERNAL, ["SSL://b1.example.com:9093"]),
        (INTERNAL, ["PLAINTEXT://10.0.0.1:9092"]),
        # No listener chosen and no internal listener configured: only endpoints of everyone.
        (ListenerChoice("internal", ChoiceSource.INTERNAL, True), ["PLAINTEXT://10.0.0.1:9092"]),
    ],
)
def test_owned_bundle_answers_the_owners_endpoints_for_the_listener(
    choice: ListenerChoice, expected: list[str]
) -> None:
    view = ClusterView.from_snapshot(kop_cluster(kafka=PIP95, grpc=GRPC))
    answer = resolve_protocol(IN_FIRST, choice, "kafka", view)
    assert answer.owned and answer.broker_id == broker_id(1)
    assert answer.bundle.name == FIRST
    assert urls(answer.endpoints) == expected
    assert answer.data == PIP95.format(i=1)
    body = answer.to_json()
    assert body["protocol"] == "kafka" and body["listener"] == choice.name
    assert body["listenerChosenBy"] == choice.source.value
    grpc = resolve_protocol(IN_FIRST, choice, "GRPC", view)  # the name in any case
    assert grpc.protocol == "grpc"
    assert urls(grpc.endpoints) == ["grpc://b1.example.com:50051"]


def test_unowned_bundle_names_the_broker_a_client_goes_to_first() -> None:
    view = ClusterView.from_snapshot(kop_cluster(kafka=PIP95))
    answer = resolve_protocol(IN_LAST, EXTERNAL, "kafka", view)
    assert not answer.owned
    assert answer.broker_id == broker_id(1)  # the leader
    assert answer.endpoints == () and answer.data is None


def test_a_protocol_the_owner_does_not_advertise_names_those_it_does() -> None:
    view = ClusterView.from_snapshot(kop_cluster(kafka=PIP95, mqtt="mqtt://b{i}:1883"))
    with pytest.raises(LookupFailure) as failed:
        resolve_protocol(IN_FIRST, EXTERNAL, "amqp", view)
    assert failed.value.kind is FailureKind.PROTOCOL_NOT_ADVERTISED
    assert "protocols it advertises: kafka, mqtt" in failed.value.message
    view = ClusterView.from_snapshot(kop_cluster())
    with pytest.raises(LookupFailure) as failed:
        resolve_protocol(IN_FIRST, EXTERNAL, "kafka", view)
    assert "protocols it advertises: none" in failed.value.message


def test_no_endpoint_for_the_listener_names_the_listeners_that_have_one_in_the_log() -> None:
    """The client is told neither the owner nor the data string (internal addresses); the
    failure's detail, which goes to the log only, names both."""
    view = ClusterView.from_snapshot(kop_cluster(kafka="internal:PLAINTEXT://10.0.0.{i}:9092"))
    with pytest.raises(LookupFailure) as failed:
        resolve_protocol(IN_FIRST, EXTERNAL, "kafka", view)
    assert failed.value.kind is FailureKind.NO_PROTOCOL_ENDPOINT
    assert failed.value.message == (
        "the topic's owner advertises no kafka endpoint for listener 'external'"
    )
    assert "the listeners that have one: internal" in (failed.value.detail or "")
    assert "10.0.0.1" in (failed.value.detail or "")
    view = ClusterView.from_snapshot(kop_cluster(grpc="null"))
    with pytest.raises(LookupFailure) as failed:
        resolve_protocol(IN_FIRST, EXTERNAL, "grpc", view)
    assert "the listeners that have one: none (data: 'null')" in (failed.value.detail or "")
    assert "null" not in failed.value.message


def test_kop_named_listeners_match_the_brokers_listener_names() -> None:
    nodes = kop_cluster(kafka="internal://10.0.0.{i}:9092,external://b{i}.example.com:19092")
    answer = resolve_protocol(IN_FIRST, EXTERNAL, "kafka", ClusterView.from_snapshot(nodes))
    assert urls(answer.endpoints) == ["external://b1.example.com:19092"]
    # Names only the gateway declares count too; a KoP listener name that names no listener
    # belongs to none (which listener it serves is anybody's guess without kafkaListenerMap).
    nodes = kop_cluster(kafka="kafka_internal://10.0.0.{i}:9092,edge://b{i}.example.com:19092")
    edge = ListenerChoice("edge", ChoiceSource.SOCKET)
    view = ClusterView.from_snapshot(nodes)
    answer = resolve_protocol(IN_FIRST, edge, "kafka", view, declared=("edge",))
    assert urls(answer.endpoints) == ["edge://b1.example.com:19092"]
    answer = resolve_protocol(IN_FIRST, edge, "kafka", view, declared=("edge", "kafka_internal"))
    assert urls(answer.endpoints) == ["edge://b1.example.com:19092"]


def test_extensible_load_manager_registrations_and_table_view() -> None:
    """BrokerLookupData carries `protocols` as LocalBrokerData does."""
    nodes: dict[str, Any] = {"/admin/policies/public/default": {}}
    for i in (1, 2):
        nodes[f"/loadbalance/brokers/{broker_id(i)}"] = {
            "webServiceUrl": f"http://10.0.0.{i}:8080",
            "pulsarServiceUrl": f"pulsar://10.0.0.{i}:6650",
            "advertisedListeners": {"external": {"brokerServiceUrl": f"pulsar://b{i}:6650"}},
            "protocols": {"kafka": f"external:SSL://b{i}.example.com:9093"},
            "persistentTopicsEnabled": True,
            "nonPersistentTopicsEnabled": True,
            "loadManagerClassName": EXTENSIBLE,
            "startTimestamp": 1700000000000,
            "brokerVersion": "4.0.0",
            "properties": {},
        }
    nodes["/service_unit_state/public/default/0x00000000_0xffffffff"] = {
        "state": "Owned",
        "dstBroker": broker_id(2),
        "versionId": 1,
    }
    answer = resolve_protocol(IN_FIRST, EXTERNAL, "kafka", ClusterView.from_snapshot(nodes))
    assert answer.broker_id == broker_id(2)
    assert urls(answer.endpoints) == ["SSL://b2.example.com:9093"]


def test_an_owner_without_a_registration_is_retriable() -> None:
    nodes = kop_cluster(kafka=PIP95)
    nodes[f"/namespace/public/default/{FIRST}"]["brokerId"] = "gone:8080"
    with pytest.raises(LookupFailure) as failed:
        resolve_protocol(IN_FIRST, EXTERNAL, "kafka", ClusterView.from_snapshot(nodes))
    assert failed.value.kind is FailureKind.OWNER_INACTIVE
    assert failed.value.kind.retriable


def test_namespace_failures_are_the_lookups() -> None:
    view = ClusterView.from_snapshot(kop_cluster(kafka=PIP95))
    with pytest.raises(LookupFailure) as failed:
        resolve_protocol(TopicName.parse("persistent://nope/ns/t"), EXTERNAL, "kafka", view)
    assert failed.value.kind is FailureKind.NAMESPACE_NOT_FOUND
