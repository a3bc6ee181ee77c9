from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pulsar_lookup_gateway.lookup.errors import FailureKind, InvalidTopicName, ServerError
from pulsar_lookup_gateway.lookup.topics import MAX_TOPIC_NAME_BYTES, TopicDomain, TopicName


@pytest.mark.parametrize(
    ("given_name", "full", "domain", "tenant", "ns", "local", "index"),
    [
        ("t", "persistent://public/default/t", "persistent", "public", "default", "t", -1),
        ("acme/pay/t", "persistent://acme/pay/t", "persistent", "acme", "pay", "t", -1),
        ("persistent://a/b/c", "persistent://a/b/c", "persistent", "a", "b", "c", -1),
        ("non-persistent://a/b/c", "non-persistent://a/b/c", "non-persistent", "a", "b", "c", -1),
        ("persistent://a/b/c-partition-7", "persistent://a/b/c-partition-7",
         "persistent", "a", "b", "c-partition-7", 7),
        ("x-partition-0", "persistent://public/default/x-partition-0",
         "persistent", "public", "default", "x-partition-0", 0),
        ("persistent://a/b/c-partition-x", "persistent://a/b/c-partition-x",
         "persistent", "a", "b", "c-partition-x", -1),
        ("persistent://a/b/c-partition-2147483648", "persistent://a/b/c-partition-2147483648",
         "persistent", "a", "b", "c-partition-2147483648", -1),
        ("persistent://t=1/ns.2:x/with space", "persistent://t=1/ns.2:x/with space",
         "persistent", "t=1", "ns.2:x", "with space", -1),
    ],
)  # fmt: skip
def test_valid_names(
    given_name: str, full: str, domain: str, tenant: str, ns: str, local: str, index: int
) -> None:
    topic = TopicName.parse(given_name)
    assert (topic.full, topic.domain.value, topic.tenant, topic.namespace) == (
        full,
        domain,
        tenant,
        ns,
    )
    assert (topic.local_name, topic.partition_index) == (local, index)
    assert str(topic) == full


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("a/b", "short name"),
        ("a/b/c/d", "short name"),
        ("kafka://a/b/c", "domain 'kafka'"),
        ("persistent://a/b", "expected"),
        ("persistent://a/b/", "empty local"),
        ("persistent://a/cluster/ns/t", "legacy v1"),
        ("persistent://a b/ns/t", "invalid tenant"),
        ("persistent://a/n$s/t", "invalid namespace"),
        ("persistent:///ns/t", "invalid tenant"),
    ],
)
def test_invalid_names_carry_invalid_topic_name(bad: str, reason: str) -> None:
    with pytest.raises(InvalidTopicName) as info:
        TopicName.parse(bad)
    assert info.value.code is ServerError.InvalidTopicName
    assert info.value.kind is FailureKind.INVALID_TOPIC
    assert reason in info.value.message


def test_partitions_and_base() -> None:
    topic = TopicName.parse("persistent://a/b/orders")
    part = topic.partition(3)
    assert part.full == "persistent://a/b/orders-partition-3"
    assert part.is_partition and part.partition_index == 3
    assert part.base == topic
    assert topic.base is topic
    assert part.partition(1).full == "persistent://a/b/orders-partition-1"


@pytest.mark.parametrize(
    ("encoded", "local"),
    [
        ("plain", "plain"),
        ("a%2Fb", "a/b"),
        ("sp%20ace", "sp ace"),
        ("a+b", "a b"),
        ("%2B", "+"),
        ("%E2%82%AC", "€"),
    ],
)
def test_rest_path_parts_are_url_decoded(encoded: str, local: str) -> None:
    if "/" in local:  # a decoded slash makes a 4-part (v1) name, which we refuse
        with pytest.raises(InvalidTopicName):
            TopicName.from_rest("persistent", "a", "b", encoded)
        return
    topic = TopicName.from_rest("non-persistent", "a", "b", encoded)
    assert topic.domain is TopicDomain.NON_PERSISTENT
    assert topic.local_name == local


@pytest.mark.parametrize(
    ("local", "encoded"),
    [("a b", "a+b"), ("x~y", "x%7Ey"), ("s*t", "s*t"), ("é", "%C3%A9"), ("a.b-c_d", "a.b-c_d")],
)
def test_encoded_local_name_matches_java_urlencoder(local: str, encoded: str) -> None:
    assert TopicName.parse(f"persistent://t/n/{local}").encoded_local_name == encoded


@given(st.text(max_size=60))
def test_parse_raises_only_invalid_topic_name(text: str) -> None:
    try:
        topic = TopicName.parse(text)
    except InvalidTopicName:
        return
    assert TopicName.parse(topic.full) == topic


def test_a_huge_partition_suffix_is_an_ordinary_name_not_a_crash() -> None:
    name = "persistent://a/b/t-partition-" + "9" * 4000
    topic = TopicName.parse(name)
    assert (topic.partition_index, topic.full) == (-1, name)


@pytest.mark.parametrize(
    "name",
    [
        "persistent://../ns/t",
        "persistent://./ns/t",
        "persistent://acme/../t",
        "persistent://acme/./t",
        "persistent://acme/ns/..",
        "persistent://acme/ns/.",
        "../ns/t",
    ],
)
def test_dot_segments_are_refused_before_any_read(name: str) -> None:
    # ZooKeeper refuses "." and ".." as path elements: such a name must never reach a read.
    with pytest.raises(InvalidTopicName):
        TopicName.parse(name)


def test_dots_inside_names_stay_valid() -> None:
    topic = TopicName.parse("persistent://a.b/..ns/...")
    assert (topic.tenant, topic.namespace, topic.local_name) == ("a.b", "..ns", "...")


@pytest.mark.parametrize("char", ["x", "é", "€", "😀"])  # 1, 2, 3 and 4 UTF-8 bytes
def test_names_are_bounded_in_utf8_bytes(char: str) -> None:
    prefix = "persistent://a/b/"
    room = MAX_TOPIC_NAME_BYTES - len(prefix)
    fits = prefix + char * (room // len(char.encode()))
    assert TopicName.parse(fits).full == fits
    with pytest.raises(InvalidTopicName) as refused:
        TopicName.parse(fits + char)
    # The error echoes only the start of a name, never the whole of it.
    assert len(refused.value.message) < 400


def test_an_echoed_name_has_its_control_characters_escaped() -> None:
    with pytest.raises(InvalidTopicName) as refused:
        TopicName.parse("persistent://bad\ntenant/ns/t")
    assert "\n" not in refused.value.message
    assert "\\n" in refused.value.message


def test_valid_tenant_and_namespace_names_are_remembered_within_a_bound() -> None:
    """The names found valid are remembered (a herd's names share a few), never more than the
    bound, never a long one, never one found invalid: strangers' names cost little."""
    from pulsar_lookup_gateway.lookup import topics

    for n in range(topics._VALID_ENTITIES_MAX + 100):
        TopicName.parse(f"persistent://tenant-{n}/ns/t")
    assert len(topics._VALID_ENTITIES) <= topics._VALID_ENTITIES_MAX
    long_tenant = "t" * (topics._VALID_ENTITY_MAX_LENGTH + 1)
    assert TopicName.parse(f"persistent://{long_tenant}/ns/t").tenant == long_tenant
    assert long_tenant not in topics._VALID_ENTITIES
    for bad in ("ten ant", "..", "ten/ant?"):
        with pytest.raises(InvalidTopicName):
            TopicName.parse(f"persistent://{bad}/ns/t")
        assert bad not in topics._VALID_ENTITIES
    # remembered or not, a name is judged the same
    assert TopicName.parse("persistent://tenant-1/ns/t").tenant == "tenant-1"
    with pytest.raises(InvalidTopicName):
        TopicName.parse("persistent://tenant-1/n s/t")
