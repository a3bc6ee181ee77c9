"""Gateway processes for the deployment tests, and what their /metrics says.

`GatewayProcess` runs `pulsar-lookup-gateway run` the way the image and the systemd unit do, with
its log going to a file (a pipe nobody reads would stall a gateway that logs a lot), and waits,
bounded, for its sockets. `serve_lookups` makes the lookups that bring every lookup series to
life; `exported_series` names the samples of an exposition or of the metric objects.
"""

from __future__ import annotations

import http.client
import json
import re
import signal
import ssl
import subprocess
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Metric
from prometheus_client.parser import text_string_to_metric_families

from pulsar_lookup_gateway.http_api.watch import WatchMetrics
from pulsar_lookup_gateway.listeners.auth import Authenticator
from pulsar_lookup_gateway.metadata_store.open import open_source
from pulsar_lookup_gateway.metadata_store.synthetic import topic_in_range
from pulsar_lookup_gateway.metadata_store.url import parse_metadata_url
from pulsar_lookup_gateway.serving.forwarded_lookups import ForwardedLookups
from pulsar_lookup_gateway.serving.held_bytes import HeldBytes
from pulsar_lookup_gateway.serving.metrics import LookupMetrics
from pulsar_lookup_gateway.serving.service import LookupService
from pulsar_lookup_gateway.tls.metrics import TlsMetrics
from tests.processes import DEMO, EXE

LISTENING = re.compile(r"listening on (\S+) listener=(\S+) tls=(\S+)")
# Topics of the demo cluster (configs/demo-cluster.json): an owned bundle, an unowned one.
OWNED = "persistent/public/default/orders-partition-1"
UNOWNED = topic_in_range(0xC0000000, 0xFFFFFFFF).replace("://", "/")
# A namespace only a peer cluster serves (peer_cluster_nodes): its lookups are a Redirect there
# (an unowned bundle's lookup is forwarded to a broker by a running gateway, issue 40).
PEER_TOPIC = "persistent/public/west-only/t"


def peer_cluster_nodes() -> dict[str, Any]:
    """The demo cluster (`clusterName=demo`) with a peer, `west`, and a namespace only it serves."""
    return {
        "/admin/clusters/demo": {"peerClusterNames": ["west"]},
        "/admin/clusters/west": {
            "serviceUrl": "http://west.example.com:8080",
            "brokerServiceUrl": "pulsar://west.example.com:6650",
        },
        "/admin/policies/public/west-only": {"replication_clusters": ["west"]},
    }


NO_NAMESPACE = "persistent/public/nowhere/t"
LOOKUP = "/lookup/v2/topic/"


def demo_nodes() -> dict[str, Any]:
    return dict(json.loads(DEMO.read_text()))


def tls_config(metadata_url: str, certs: Path, *, ports: Mapping[str, int] | None = None) -> str:
    """Two listeners, four sockets on 127.0.0.1 (port 0 unless `ports` gives one per scheme:
    pulsar, http, pulsar+ssl, https); the external ones terminate TLS with `certs`."""
    port = dict.fromkeys(("pulsar", "http", "pulsar+ssl", "https"), 0) | dict(ports or {})
    return (
        f"metadataStoreUrl={metadata_url}\n"
        "advertisedListeners=internal:pulsar://127.0.0.1:6650,internal:http://127.0.0.1:8080,"
        "external:pulsar+ssl://127.0.0.2:6651,external:https://127.0.0.2:8443\n"
        f"bindAddresses=internal:pulsar://127.0.0.1:{port['pulsar']},"
        f"internal:http://127.0.0.1:{port['http']},"
        f"external:pulsar+ssl://127.0.0.1:{port['pulsar+ssl']},"
        f"external:https://127.0.0.1:{port['https']}\n"
        "brokerServicePort=\nwebServicePort=\n"
        f"tlsCertificateFilePath={certs / 'server.crt'}\n"
        f"tlsKeyFilePath={certs / 'server.key'}\n"
        "shutdownTimeoutSeconds=2\n"
    )


class GatewayProcess:
    """`pulsar-lookup-gateway run --config FILE [ARGS]`, logging to `log`. Waits until
    `sockets` "listening on" lines were logged (each worker logs its own)."""

    def __init__(
        self,
        config: Path,
        log: Path,
        *args: str,
        sockets: int = 4,
        env: Mapping[str, str] | None = None,
        timeout: float = 60.0,
    ) -> None:
        self.log = log
        self._log_file = log.open("w")
        self.process = subprocess.Popen(
            [EXE, "run", "--config", str(config), *args],
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
        )
        self.urls: dict[tuple[str, str], str] = {}  # (scheme, listener) -> url
        try:
            self.wait_for_lines(LISTENING, sockets, timeout=timeout)
        except BaseException:
            self.stop()
            raise
        for match in LISTENING.finditer(self.text()):
            url, listener = match.group(1), match.group(2)
            self.urls[(url.split("://")[0], listener)] = url

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for_lines(self, pattern: re.Pattern[str], count: int, *, timeout: float) -> str:
        """Wait until the log holds `count` lines matching `pattern`; the log's text."""
        deadline = time.monotonic() + timeout
        while True:
            text = self.text()
            if len(pattern.findall(text)) >= count:
                return text
            if self.process.poll() is not None:
                raise AssertionError(f"the gateway exited with {self.process.returncode}:\n{text}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {count} lines like {pattern.pattern!r}:\n{text}")
            time.sleep(0.05)

    def url(self, scheme: str, listener: str) -> str:
        return self.urls[(scheme, listener)]

    @property
    def metrics_url(self) -> str:
        return self.url("http", "internal") + "/metrics"

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        """Signal the process and wait (bounded) for its exit code."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
                raise
        self._log_file.close()
        return self.process.returncode


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    headers: dict[str, str]

    def json(self) -> Any:
        return json.loads(self.body)


def get(
    url: str,
    headers: Mapping[str, str] | None = None,
    *,
    context: ssl.SSLContext | None = None,
    timeout: float = 10.0,
) -> Reply:
    """One GET on a new connection, redirects not followed (a lookup's redirect names a broker,
    never reachable from here)."""
    scheme, rest = url.split("://", 1)
    host, _, path = rest.partition("/")
    connection: http.client.HTTPConnection
    if scheme == "https":
        connection = http.client.HTTPSConnection(host, timeout=timeout, context=context)
    else:
        connection = http.client.HTTPConnection(host, timeout=timeout)
    try:
        connection.request("GET", "/" + path, headers=dict(headers or {}))
        response = connection.getresponse()
        return Reply(response.status, response.read(), dict(response.getheaders()))
    finally:
        connection.close()


def client_context(ca: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(ca))


@dataclass(frozen=True)
class Served:
    """How many lookups `serve_lookups` made, by outcome."""

    answered: int
    redirected: int
    failed: int


@dataclass
class ServedGateway:
    """A running gateway that has served `served`; `ca` trusts its TLS sockets."""

    gateway: GatewayProcess
    ca: Path
    served: Served


def serve_lookups(gateway: GatewayProcess, ca: Path) -> Served:
    """Lookups over both HTTP sockets that leave a Connect, a Redirect and a failure behind,
    by socket and by header (the binary sockets count in the same series)."""
    internal = gateway.url("http", "internal") + LOOKUP
    external = gateway.url("https", "external") + LOOKUP
    tls = client_context(ca)
    answered = redirected = failed = 0
    for _ in range(3):
        assert get(internal + OWNED).status == 200
        answered += 1
        assert get(external + OWNED, context=tls).status == 200
        answered += 1
        header = {"X-Pulsar-ListenerName": "external"}
        assert get(internal + OWNED, header).status == 200
        answered += 1
    assert get(internal + PEER_TOPIC).status == 307
    redirected += 1
    assert get(internal + NO_NAMESPACE).status >= 400
    failed += 1
    return Served(answered, redirected, failed)


# -- what an exposition holds ------------------------------------------------------------------

SAMPLE_SUFFIXES = {
    "counter": ("_total",),
    "gauge": ("",),
    "histogram": ("_bucket", "_count", "_sum"),
    "summary": ("", "_count", "_sum"),
    "info": ("_info",),
}


def parse(exposition: str) -> list[Metric]:
    return list(text_string_to_metric_families(exposition))


def sample_names(families: Iterable[Metric]) -> set[str]:
    """The names a PromQL query can use: every family's sample names by its type, whether or not
    it has samples yet (a labelled series appears at its first use)."""
    names: set[str] = set()
    for family in families:
        names.update(family.name + suffix for suffix in SAMPLE_SUFFIXES[family.type])
        names.update(sample.name for sample in family.samples)
    return names


def metric_object_names() -> set[str]:
    """The sample names of every metric object a gateway registers: the lookup service's, TLS's,
    authentication's, the ownership watch's, the byte budget's and the forwarded lookups'."""
    registry = CollectorRegistry()
    service = LookupService(
        open_source(parse_metadata_url(f"file:{DEMO}")), metrics=LookupMetrics(registry)
    )  # never started: only its metrics are read
    TlsMetrics(registry)
    Authenticator(registry=registry)
    WatchMetrics(service, lambda: 0)
    HeldBytes().expose(service.metrics)
    ForwardedLookups(service.memo, lambda: service.source.view, _NoBroker()).expose(service.metrics)
    return sample_names(registry.collect())


class _NoBroker:
    """A forwarder that is never asked (only the forwarded lookups' metrics are read)."""

    async def owner(self, answer: Any, properties: Any, principal: Any) -> Any:
        raise AssertionError("not asked")


def values(families: Iterable[Metric], name: str, **labels: str) -> list[float]:
    """Every sample called `name` whose labels include `labels`."""
    return [
        sample.value
        for family in families
        for sample in family.samples
        if sample.name == name and labels.items() <= sample.labels.items()
    ]


def total(families: Iterable[Metric], name: str, **labels: str) -> float:
    return sum(values(families, name, **labels))
