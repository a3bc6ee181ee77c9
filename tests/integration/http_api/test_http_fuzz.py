"""Bad input never makes the HTTP API fail with 5xx.

The gateway runs on 127.0.0.1 in a background thread with its own event loop, over a healthy
snapshot (three brokers, one bundle left unowned so redirects are built too). With healthy
metadata none of the documented 503s (no broker, unloading, store unreachable, too many
lookups) can happen, so every status must be below 500. Redirects are never followed.

Two generators, bounded to about a hundred examples each:
- hypothesis over raw request lines: arbitrary paths (route-shaped or not), query strings,
  X-Pulsar-ListenerName values and methods, sent byte for byte with http.client;
- schemathesis over the served /openapi.json (skipped when schemathesis is not installed).
"""

from __future__ import annotations

import asyncio
import http.client
import json
import string
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pulsar_lookup_gateway.brokers.link import BrokerLink
from pulsar_lookup_gateway.http_api.app import build_app
from pulsar_lookup_gateway.http_api.server import SERVER_NAME, HttpServer
from pulsar_lookup_gateway.http_api.settings import HttpSettings
from pulsar_lookup_gateway.listeners.endpoints.addresses import Endpoint, Scheme
from pulsar_lookup_gateway.listeners.endpoints.socket_table import SocketSpec
from pulsar_lookup_gateway.metadata_store.file import FileSource
from pulsar_lookup_gateway.metadata_store.synthetic import cluster
from pulsar_lookup_gateway.serving.service import LookupService
from tests.broker_peer import BrokerPeer

OWNED = {"0x00000000_0x40000000": 1, "0x40000000_0x80000000": 2, "0xc0000000_0xffffffff": 3}
FUZZ_SETTINGS = settings(
    max_examples=100,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


class BackgroundGateway:
    """The gateway on its own event loop in a thread, so synchronous generators can drive it."""

    def __init__(self, snapshot: Path, listener: str | None) -> None:
        self.snapshot = snapshot
        self.listener = listener
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.source = FileSource(snapshot, poll_interval=60)
        self.server: HttpServer | None = None
        # A test peer plays every broker on the internal listener, so that the routes that
        # forward to a broker (schemas, non-persistent topics) have one to ask on 127.0.0.1.
        self.broker = BrokerPeer(name="fuzz-broker")
        self.link: BrokerLink | None = None

    def __enter__(self) -> BackgroundGateway:
        self.thread.start()
        try:
            asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(30)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            asyncio.run_coroutine_threadsafe(self._stop(), self.loop).result(30)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            if not self.thread.is_alive():
                self.loop.close()

    async def _start(self) -> None:
        await self.broker.start()
        nodes = json.loads(self.snapshot.read_text())
        for path, node in nodes.items():
            if path.startswith("/loadbalance/brokers/"):
                node["advertisedListeners"]["internal"]["brokerServiceUrl"] = self.broker.url
                # (a plain web URL too: a plain redirect to an https-only listener is 412)
                number = path.rsplit("/b", 1)[1].split(":")[0]
                external = node["advertisedListeners"]["external"]
                external["brokerHttpUrl"] = f"http://b{number}.example.com:8080"
        self.snapshot.write_text(json.dumps(nodes))
        await self.source.start()
        service = LookupService(self.source, internal_listener="internal")
        self.link = BrokerLink(service)
        spec = SocketSpec(Endpoint(Scheme.HTTP, "127.0.0.1", 0), self.listener, "fuzz socket")
        # The rows the running gateway lists (gateway.process), filled in once the port is known.
        table: list[dict[str, object]] = []
        settings = HttpSettings(self.listener, listener_table=lambda: table)
        app = build_app(service, settings, broker_link=self.link)
        self.server = HttpServer(spec, app)
        await self.server.start()
        row = {"address": f"127.0.0.1:{self.server.port}", "scheme": "http", "tls": False}
        table.append({**row, "listener": self.listener, "origin": spec.origin, "advertised": []})

    async def _stop(self) -> None:
        if self.server is not None:
            await self.server.stop(5)
        if self.link is not None:
            await self.link.close()
        await self.broker.stop()
        await self.source.close()

    @property
    def port(self) -> int:
        assert self.server is not None
        return self.server.port


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BackgroundGateway]:
    snapshot = tmp_path_factory.mktemp("fuzz") / "snapshot.json"
    snapshot.write_text(json.dumps(cluster(3, OWNED)))
    with BackgroundGateway(snapshot, "external") as gateway:
        yield gateway


# -- hypothesis over raw requests -------------------------------------------------------------

# Characters a path segment may carry unencoded, and '%' (so invalid escapes are sent too).
_RAW_CHARS = string.ascii_letters + string.digits + "-._~!$&'()*+,;=:@%"
raw_segment = st.text(alphabet=_RAW_CHARS, min_size=1, max_size=12)
encoded_segment = st.text(max_size=12).map(lambda s: quote(s, safe=""))
segment = st.one_of(
    raw_segment,
    encoded_segment,
    st.sampled_from(["persistent", "non-persistent", "public", "default", "..", ".", ""]),
)
route_shaped = st.one_of(
    st.builds(
        lambda d, t, n, x, tail: f"/lookup/v2/topic/{d}/{t}/{n}/{x}{tail}",
        st.one_of(st.sampled_from(["persistent", "non-persistent"]), segment),
        st.one_of(st.just("public"), segment),
        st.one_of(st.just("default"), segment),
        segment,
        st.sampled_from(["", "/bundle", "/", "/bundle/x"]),
    ),
    st.builds(
        lambda d, t, n, x: f"/admin/v2/{d}/{t}/{n}/{x}/partitions",
        st.one_of(st.just("persistent"), segment),
        st.one_of(st.just("public"), segment),
        st.one_of(st.just("default"), segment),
        segment,
    ),
    st.sampled_from(
        [
            "/status.html",
            "/health",
            "/ready",
            "/metrics",
            "/openapi.json",
            "/admin/v2/gateway/listeners",
        ]
    ),
)
any_path = st.lists(segment, max_size=8).map(lambda parts: "/" + "/".join(parts))
query_key = st.one_of(
    st.sampled_from(["listenerName", "authoritative", "checkAllowAutoCreation"]), raw_segment
)
query = st.lists(st.tuples(query_key, st.one_of(raw_segment, encoded_segment)), max_size=4).map(
    lambda pairs: "&".join(f"{k}={v}" for k, v in pairs)
)
# Any latin-1 text a header value may carry (no CR/LF: http.client refuses to send those).
header_value = st.text(
    alphabet=st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"),
    max_size=40,
)


def send(
    port: int, method: str, target: str, headers: dict[str, str]
) -> tuple[int, dict[str, str], bytes]:
    """One request sent as given (http.client adds no Host header); the raw answer."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
        for name, value in headers.items():
            conn.putheader(name, value.encode("latin-1"))
        conn.endheaders()
        response = conn.getresponse()
        body = response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, body
    finally:
        conn.close()


LOOKUP_DATA_KEYS = {
    "brokerUrl",
    "brokerUrlTls",
    "httpUrl",
    "httpUrlTls",
    "nativeUrl",
    "brokerUrlSsl",
}


def check_answer(
    method: str, target: str, status: int, headers: dict[str, str], body: bytes
) -> None:
    """What must hold for any request: no 5xx, JSON errors, sane redirects, full LookupData,
    no server version."""
    assert status < 500, f"{method} {target} -> {status} {body[:300]!r}"
    assert headers["server"] == SERVER_NAME
    if status >= 400:  # every error leaves as JSON {"reason": ...}
        assert headers["content-type"].startswith("application/json"), (target, status, body)
        if method != "HEAD":
            assert isinstance(json.loads(body)["reason"], str)
    if status == 307:
        location = headers["location"]
        # to the leader (b1), at its web URL for the chosen listener and no other's: a plain
        # request to the external listener's plain URL, never the internal address
        internal = location.startswith("http://10.0.0.1:8080/lookup/v2/topic/")
        external = location.startswith("http://b1.example.com:8080/lookup/v2/topic/")
        assert internal or external, location
        assert ("listenerName=internal" in location) == internal, location
        assert "listenerName=" in location
        assert all(0x20 < ord(c) < 0x7F for c in location), location
    is_lookup = target.startswith("/lookup/") and "/bundle" not in target
    if status == 200 and method == "GET" and is_lookup:
        assert set(json.loads(body)) == LOOKUP_DATA_KEYS


@FUZZ_SETTINGS
@given(
    method=st.sampled_from(["GET", "GET", "GET", "HEAD", "POST", "DELETE", "OPTIONS"]),
    path=st.one_of(route_shaped, route_shaped, any_path),
    query=query,
    listener_header=st.one_of(st.none(), header_value),
)
def test_arbitrary_requests_get_no_5xx(
    gateway: BackgroundGateway,
    method: str,
    path: str,
    query: str,
    listener_header: str | None,
) -> None:
    target = f"{path}?{query}" if query else path
    headers = {"Host": "127.0.0.1"}
    if listener_header is not None:
        headers["X-Pulsar-ListenerName"] = listener_header
    status, response_headers, body = send(gateway.port, method, target, headers)
    check_answer(method, target, status, response_headers, body)


def test_the_generators_reach_the_interesting_answers(gateway: BackgroundGateway) -> None:
    """The oracle above is not vacuous: the same checks see 200, 307, 400 and 404 answers."""
    local = "t2"  # any name works: a bundle is either owned (200) or not (307)
    seen = set()
    for n in range(64):
        target = f"/lookup/v2/topic/persistent/public/default/{local}{n}"
        status, headers, body = send(gateway.port, "GET", target, {"Host": "127.0.0.1"})
        check_answer("GET", target, status, headers, body)
        seen.add(status)
    for target in (
        "/lookup/v2/topic/persistent/public/default/a%2Fb",
        "/x",
        "/lookup/v2/topic/persistent/no/ns/t",
    ):
        status, headers, body = send(gateway.port, "GET", target, {"Host": "127.0.0.1"})
        check_answer("GET", target, status, headers, body)
        seen.add(status)
    assert seen == {200, 307, 400, 404}


# -- schemathesis over /openapi.json ------------------------------------------------------------


def test_openapi_operations_get_no_5xx(gateway: BackgroundGateway) -> None:
    schemathesis: Any = pytest.importorskip("schemathesis")
    checks: Any = pytest.importorskip("schemathesis.checks")
    openapi_checks: Any = pytest.importorskip("schemathesis.specs.openapi.checks")
    base_url = f"http://127.0.0.1:{gateway.port}"
    schema = schemathesis.openapi.from_url(f"{base_url}/openapi.json")
    cases = st.one_of(
        schema.as_strategy(),
        schema.as_strategy(generation_mode=schemathesis.GenerationMode.NEGATIVE),
    )
    selected_checks = [
        checks.not_a_server_error,
        openapi_checks.status_code_conformance,
        openapi_checks.content_type_conformance,
        openapi_checks.response_schema_conformance,
    ]
    calls = 0

    @FUZZ_SETTINGS
    @given(case=cases)
    def run(case: Any) -> None:
        nonlocal calls
        response = case.call(base_url=base_url, allow_redirects=False, timeout=10)
        calls += 1
        case.validate_response(response, checks=selected_checks)

    run()
    assert calls > 0
