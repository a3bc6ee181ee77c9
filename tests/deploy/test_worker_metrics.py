"""/metrics under `run --workers 2`: whichever worker answers a scrape reports the whole process
tree (prometheus-client's multiprocess mode), before and after a worker dies."""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from prometheus_client import Metric

from pulsar_lookup_gateway.metadata_store.admin import seed
from pulsar_lookup_gateway.metadata_store.embedded_zookeeper import EmbeddedZooKeeper, free_port
from pulsar_lookup_gateway.serving.metrics import LATENCY_BUCKETS
from pulsar_lookup_gateway.tls.devcerts import write_dev_certs
from tests.deploy.gateways import (
    LISTENING,
    LOOKUP,
    NO_NAMESPACE,
    OWNED,
    GatewayProcess,
    demo_nodes,
    get,
    parse,
    tls_config,
    total,
    values,
)
from tests.deploy.prometheus_server import promtool

pytestmark = pytest.mark.zookeeper

ACCESS = re.compile(r'worker (\d+) aiohttp\.access: .*"GET (/lookup/v2/topic/|/metrics)')
STARTED = re.compile(r"started 2 workers: (\d+) (\d+)")
METRICS_DIR = "pulsar-lookup-gateway-metrics-*"
ANSWERS = "pulsar_broker_lookup_answers_total"
FAILURES = "pulsar_broker_lookup_failures_total"
#: Gauges that stand for the gateway as a whole: one sample each, whatever the workers.
WHOLE = (
    "pulsar_broker_lookup_pending_requests",
    "pulsar_lookup_gateway_metadata_ready",
    "pulsar_lookup_gateway_metadata_stale",
    "pulsar_lookup_gateway_max_concurrent_lookups",
)


class Tree:
    """The workers' gateway, and what each scrape of it said."""

    def __init__(self, gateway: GatewayProcess) -> None:
        self.gateway = gateway
        self.lookups = 0
        self.failures = 0
        self.answered_seen: list[float] = []

    def lookup(self) -> None:
        assert get(self.gateway.url("http", "internal") + LOOKUP + OWNED).status == 200
        self.lookups += 1

    def fail(self) -> None:
        assert get(self.gateway.url("http", "internal") + LOOKUP + NO_NAMESPACE).status >= 400
        self.failures += 1

    def scrape(self) -> list[Metric]:
        """A scrape on a new connection, checked against every lookup made so far."""
        reply = get(self.gateway.metrics_url)
        assert reply.status == 200
        families = parse(reply.body.decode())
        answered = total(families, ANSWERS)
        self.answered_seen.append(answered)
        assert answered == self.lookups, "a scrape misses some worker's lookups"
        assert total(families, "pulsar_broker_lookup_count") == self.lookups
        assert total(families, FAILURES) == self.failures
        assert not [s.name for f in families for s in f.samples if s.name.endswith("_created")]
        return families

    def served_by(self, path: str) -> set[str]:
        """The workers whose access log shows a GET of `path`."""
        return {m.group(1) for m in ACCESS.finditer(self.gateway.text()) if m.group(2) == path}


def check_latency_histogram(families: list[Metric]) -> None:
    """`pulsar_broker_lookup` is a histogram: per label set, the configured buckets, cumulative,
    the last one (+Inf) equal to the count."""
    (latency,) = [f for f in families if f.name == "pulsar_broker_lookup"]
    assert latency.type == "histogram"
    by_series: dict[frozenset[tuple[str, str]], list[tuple[float, float]]] = {}
    counts = {}
    for sample in latency.samples:
        labels = frozenset((k, v) for k, v in sample.labels.items() if k != "le")
        if sample.name == "pulsar_broker_lookup_bucket":
            bucket = (float(sample.labels["le"]), sample.value)
            by_series.setdefault(labels, []).append(bucket)
        elif sample.name == "pulsar_broker_lookup_count":
            counts[labels] = sample.value
    assert by_series and set(by_series) == set(counts)
    for labels, buckets in by_series.items():
        assert [bound for bound, _ in buckets] == [*LATENCY_BUCKETS, float("inf")]
        cumulative = [value for _, value in buckets]
        assert cumulative == sorted(cumulative), "buckets are cumulative"
        assert cumulative[-1] == counts[labels]


def check_one_sample_each(families: list[Metric]) -> None:
    for name in WHOLE:
        assert len(values(families, name)) == 1, name
    assert len(values(families, "pulsar_lookup_gateway_tls_certificate_expiry_seconds")) == 1


def wait_until(check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition still false"
        time.sleep(0.1)


def test_every_scrape_reports_the_whole_process_tree(
    tmp_path: Path, zookeeper: EmbeddedZooKeeper, zk_chroot: str, zk_admin: KazooClient
) -> None:
    seed(zk_admin, demo_nodes())
    certs = write_dev_certs(tmp_path / "certs")
    ports = {scheme: free_port() for scheme in ("pulsar", "http", "pulsar+ssl", "https")}
    config = tmp_path / "gateway.conf"
    metadata = f"zk:{zookeeper.connect_string}{zk_chroot}"
    config.write_text(tls_config(metadata, certs.directory, ports=ports))
    scratch = tmp_path / "scratch"  # the supervisor makes its metrics directory here
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch)}
    gateway = GatewayProcess(
        config, tmp_path / "gateway.log", "--workers", "2", "--access-log", sockets=8, env=env
    )
    tree = Tree(gateway)
    try:
        assert len(list(scratch.glob(METRICS_DIR))) == 1

        # Lookups and scrapes, each on a new connection, until both workers served both.
        deadline = time.monotonic() + 60
        while min(len(tree.served_by(path)) for path in (LOOKUP, "/metrics")) < 2 or (
            tree.lookups < 20
        ):
            assert time.monotonic() < deadline, gateway.text()
            tree.lookup()
            tree.scrape()
        tree.fail()
        families = tree.scrape()
        check_latency_histogram(families)
        check_one_sample_each(families)
        assert values(families, "pulsar_lookup_gateway_metadata_ready") == [1.0]
        assert values(families, "pulsar_lookup_gateway_worker_restarts_total") == [0.0]
        promtool("check", "metrics", stdin=get(gateway.metrics_url).body.decode())

        # A worker dies: the supervisor starts another; the dead one's counts stay in the sums.
        started = STARTED.search(gateway.text())
        assert started is not None
        os.kill(int(started.group(1)), signal.SIGKILL)
        gateway.wait_for_lines(re.compile(r"restarting it"), 1, timeout=30)
        gateway.wait_for_lines(LISTENING, 12, timeout=60)  # the new worker's 4 sockets

        def restart_counted() -> bool:
            families = tree.scrape()
            return values(families, "pulsar_lookup_gateway_worker_restarts_total") == [1.0]

        wait_until(restart_counted)
        for _ in range(20):
            tree.lookup()
            families = tree.scrape()
            check_one_sample_each(families)  # still one sample each, a dead worker or not

        def ready() -> bool:  # the new worker is connected too (the gauge is the workers' min)
            return values(tree.scrape(), "pulsar_lookup_gateway_metadata_ready") == [1.0]

        wait_until(ready)
        assert tree.answered_seen == sorted(tree.answered_seen), "a total went down"
    finally:
        code = gateway.stop()
    assert code == 0, gateway.text()
    assert list(scratch.glob(METRICS_DIR)) == [], "the supervisor removes its metrics directory"
