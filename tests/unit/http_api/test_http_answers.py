"""The HTTP app's pure parts: error mapping, LookupData, 307 Location, topic from a raw path."""

from __future__ import annotations

import json

import pytest

from pulsar_lookup_gateway.http_api.errors import failure_response
from pulsar_lookup_gateway.http_api.lookup_answers import lookup_data, redirect_location
from pulsar_lookup_gateway.lookup.bundles import BundleRange
from pulsar_lookup_gateway.lookup.errors import FailureKind, InvalidTopicName, LookupFailure
from pulsar_lookup_gateway.lookup.resolve import BrokerUrls, LookupAnswer, ResponseKind
from pulsar_lookup_gateway.lookup.selection import ChoiceSource, ListenerChoice
from pulsar_lookup_gateway.lookup.topics import TopicName


@pytest.mark.parametrize("kind", list(FailureKind))
def test_every_failure_is_a_json_reason_with_an_error_status(kind: FailureKind) -> None:
    response = failure_response(LookupFailure(kind, f"because {kind.value}"))
    assert 400 <= response.status < 600
    assert response.content_type == "application/json"
    assert isinstance(response.body, bytes)
    assert json.loads(response.body) == {"reason": f"because {kind.value}"}
    challenge = response.headers.get("WWW-Authenticate")
    assert challenge == ("Bearer" if kind is FailureKind.NOT_AUTHENTICATED else None)
    # every 503 is retriable, and says when to retry
    assert response.headers.get("Retry-After") == ("1" if response.status == 503 else None)


@pytest.mark.parametrize(
    ("kind", "status"),
    [
        # Pulsar's REST answers (per request: tests/integration/http_api/test_http_api)
        (FailureKind.NOT_AUTHENTICATED, 401),
        (FailureKind.NOT_AUTHORIZED, 403),
        (FailureKind.TOO_MANY_REQUESTS, 503),
        (FailureKind.NO_TLS_REDIRECT, 412),
    ],
)
def test_access_and_overload_answers_are_pulsars(kind: FailureKind, status: int) -> None:
    assert failure_response(LookupFailure(kind, "x")).status == status


def test_lookup_data_has_six_string_keys() -> None:
    urls = BrokerUrls("pulsar://b:6650", None, "http://b:8080", None)
    assert lookup_data(urls) == {
        "brokerUrl": "pulsar://b:6650",
        "brokerUrlTls": "",
        "httpUrl": "http://b:8080",
        "httpUrlTls": "",
        "nativeUrl": "pulsar://b:6650",
        "brokerUrlSsl": "",
    }


def redirect(
    local: str = "t",
    *,
    http: str | None = "http://b2:8080",
    https: str | None = "https://b2:8443",
    authoritative: bool = False,
    listener: ListenerChoice | None = None,
) -> LookupAnswer:
    return LookupAnswer(
        topic=TopicName.parse(f"persistent://public/default/{local}"),
        bundle=BundleRange(0, 0x40000000),
        response=ResponseKind.REDIRECT,
        authoritative=authoritative,
        broker_id="b2:8080",
        urls=BrokerUrls("pulsar://b2:6650", None, http, https),
        listener=listener or ListenerChoice("edge", ChoiceSource.SOCKET),
    )


ROUTE = "/lookup/v2/topic/persistent/public/default"


@pytest.mark.parametrize(
    ("answer", "secure", "location"),
    [
        (redirect(), False, f"http://b2:8080{ROUTE}/t?authoritative=false&listenerName=edge"),
        (redirect(), True, f"https://b2:8443{ROUTE}/t?authoritative=false&listenerName=edge"),
        (
            redirect(http="http://b2:8080/"),
            False,
            f"http://b2:8080{ROUTE}/t?authoritative=false&listenerName=edge",
        ),
        (  # internal: the brokers' default URLs, no listenerName
            redirect(listener=ListenerChoice("internal", ChoiceSource.INTERNAL)),
            False,
            f"http://b2:8080{ROUTE}/t?authoritative=false",
        ),
        (
            redirect(listener=ListenerChoice("external", ChoiceSource.HEADER)),
            False,
            f"http://b2:8080{ROUTE}/t?authoritative=false&listenerName=external",
        ),
        (
            redirect("a b+c%dé?#"),
            False,
            f"http://b2:8080{ROUTE}/a%20b%2Bc%25d%C3%A9%3F%23?authoritative=false"
            "&listenerName=edge",
        ),
    ],
)
def test_redirect_location(answer: LookupAnswer, secure: bool, location: str) -> None:
    assert redirect_location(answer, secure=secure) == location


def test_an_https_lookup_is_never_redirected_to_http() -> None:
    # The target has only a plain web URL: Pulsar answers 412, never a downgrade to http://.
    with pytest.raises(LookupFailure) as failure:
        redirect_location(redirect(https=None, authoritative=True), secure=True)
    assert failure.value.kind is FailureKind.NO_TLS_REDIRECT
    assert failure_response(failure.value).status == 412
    assert "b2" not in failure.value.message


def test_a_plain_lookup_is_never_redirected_to_https() -> None:
    # The target has only an https URL: master answers 412 with its own message (the gateway
    # used to send the plain client to https://).
    with pytest.raises(LookupFailure) as failure:
        redirect_location(redirect(http=None), secure=False)
    assert failure.value.kind is FailureKind.NO_TLS_REDIRECT
    assert failure.value.message == "Redirected cluster's service url is not configured."
    assert failure_response(failure.value).status == 412


def test_redirect_without_any_http_url_is_no_broker() -> None:
    with pytest.raises(LookupFailure) as failure:
        redirect_location(redirect(http=None, https=None), secure=False)
    assert failure.value.kind is FailureKind.NO_BROKER
    assert "b2" not in failure.value.message  # no internal address reaches the client


@pytest.mark.parametrize(
    ("raw", "full"),
    [
        (("persistent", "public", "default", "t"), "persistent://public/default/t"),
        (("persistent", "public", "default", "a%20b"), "persistent://public/default/a b"),
        (("persistent", "public", "default", "a+b"), "persistent://public/default/a b"),
        (("persistent", "public", "default", "a%2Bb"), "persistent://public/default/a+b"),
        (("persistent", "public", "default", "a%252Fb"), "persistent://public/default/a%2Fb"),
        (("non-persistent", "my-t", "n.s", "x-partition-3"), "non-persistent://my-t/n.s/x-partition-3"),
        (("persistent", "public", "default", "%C3%A9"), "persistent://public/default/é"),
    ],
)  # fmt: skip
def test_topic_from_path(raw: tuple[str, str, str, str], full: str) -> None:
    assert TopicName.from_rest(*raw).full == full


@pytest.mark.parametrize(
    "raw",
    [
        ("persistent", "public", "default", "a%2Fb"),
        ("persistent", "public", "default", "a%2fb"),
        ("persistent", "pub%2Flic", "default", "t"),
        ("persistent", "public", "def%2Fault", "t"),
        ("durable", "public", "default", "t"),
        ("persistent", "pub lic", "default", "t"),
    ],
)
def test_topic_from_path_refuses(raw: tuple[str, str, str, str]) -> None:
    with pytest.raises(InvalidTopicName):
        TopicName.from_rest(*raw)
