"""deploy/prometheus: the config and alert rules pass promtool, the rules' unit tests pass, and a
real Prometheus scrapes a real gateway with them; the gateway's exposition passes promtool's
metrics lint."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import yaml

from tests.deploy.artefacts import (
    dashboard,
    dashboard_queries,
    expand_variables,
    label_values_call,
)
from tests.deploy.gateways import LOOKUP, OWNED, ServedGateway, get, metric_object_names
from tests.deploy.prometheus_server import (
    JOB,
    PROMETHEUS_DIR,
    SHIPPED_CONFIG,
    PrometheusServer,
    promtool,
    sample_value,
)
from tests.deploy.promql import series_names

ALERTS = PROMETHEUS_DIR / "alerts.yml"
ALERTS_TEST = PROMETHEUS_DIR / "alerts_test.yml"
#: What the issue asks the rules to watch, by alert.
EXPECTED_ALERTS = {
    "PulsarLookupGatewayDown": "up",
    "PulsarLookupGatewayMetadataNotReady": "pulsar_lookup_gateway_metadata_ready",
    "PulsarLookupGatewayLookupFailures": "pulsar_broker_lookup_failures_total",
    "PulsarLookupGatewayPendingLookupsNearLimit": "pulsar_lookup_gateway_max_concurrent_lookups",
    "PulsarLookupGatewayCertificateExpiresSoon": (
        "pulsar_lookup_gateway_tls_certificate_expiry_seconds"
    ),
    "PulsarLookupGatewayTlsReloadFailed": "pulsar_lookup_gateway_tls_reloads_total",
    "PulsarLookupGatewayWorkerRestarting": "pulsar_lookup_gateway_worker_restarts_total",
}


def alert_rules() -> dict[str, str]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return {rule["alert"]: rule["expr"] for group in groups for rule in group["rules"]}


def test_promtool_checks_the_config_and_its_rule_files() -> None:
    output = promtool("check", "config", str(SHIPPED_CONFIG))
    assert "alerts.yml" in output  # the rule files were found and checked with it
    output = promtool("check", "rules", str(ALERTS))
    assert f"SUCCESS: {len(EXPECTED_ALERTS)} rules found" in output


def test_the_alert_rules_unit_tests_pass() -> None:
    promtool("test", "rules", ALERTS_TEST.name, cwd=PROMETHEUS_DIR)
    tested = set(yaml.safe_load(ALERTS_TEST.read_text())["rule_files"])
    assert tested == {ALERTS.name}
    cases = yaml.safe_load(ALERTS_TEST.read_text())["tests"]
    firing = {
        check["alertname"]
        for case in cases
        for check in case["alert_rule_test"]
        if check.get("exp_alerts")
    }
    assert firing == set(alert_rules()), "every alert has a case where it fires"


def test_every_alert_watches_what_it_is_meant_to_and_only_exported_series() -> None:
    rules = alert_rules()
    assert set(rules) == set(EXPECTED_ALERTS)
    exported = metric_object_names() | {"up"}
    for name, expr in rules.items():
        used = series_names(expr)
        assert EXPECTED_ALERTS[name] in used, name
        assert used <= exported, f"{name}: {sorted(used - exported)} are not exported"


@pytest.mark.zookeeper
def test_the_real_exposition_passes_promtools_lint(served_gateway: ServedGateway) -> None:
    reply = get(served_gateway.gateway.metrics_url)
    assert reply.status == 200
    assert reply.headers["Content-Type"].startswith("text/plain; version=")  # the text format
    text = reply.body.decode()
    assert "pulsar_broker_lookup_bucket{" in text  # lookups were served
    output = promtool("check", "metrics", stdin=text)
    assert output.strip() == "", output  # no lint complaint at all


@pytest.fixture(scope="module")
def prometheus(
    served_gateway: ServedGateway, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PrometheusServer]:
    target = served_gateway.gateway.url("http", "internal").split("://", 1)[1]
    server = PrometheusServer(tmp_path_factory.mktemp("prometheus"), [target])
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.mark.zookeeper
def test_prometheus_scrapes_the_gateway_and_sees_a_new_lookup(
    prometheus: PrometheusServer, served_gateway: ServedGateway
) -> None:
    up = prometheus.wait_for(f'up{{job="{JOB}"}} == 1')
    assert len(up) == 1
    ready = prometheus.wait_for("pulsar_lookup_gateway_metadata_ready")
    assert sample_value(ready) == 1.0  # ZooKeeper connected, through the real scrape

    # A lookup whose labels no earlier one had: the series appears with the next scrape.
    internal = served_gateway.gateway.url("http", "internal")
    reply = get(f"{internal}{LOOKUP}{OWNED}?listenerName=external")
    assert reply.status == 200
    explicit = 'pulsar_broker_lookup_answers_total{chosen_by="explicit",listener="external"}'
    assert sample_value(prometheus.wait_for(explicit)) == 1.0
    buckets = prometheus.wait_for('pulsar_broker_lookup_bucket{chosen_by="explicit"}')
    assert {entry["metric"]["le"] for entry in buckets} >= {"0.001", "+Inf"}


@pytest.mark.zookeeper
def test_the_alert_rules_load_and_evaluate_against_real_series(
    prometheus: PrometheusServer,
) -> None:
    prometheus.wait_for(f'up{{job="{JOB}"}} == 1')
    rules = prometheus.evaluated_rules()
    assert set(rules) == set(EXPECTED_ALERTS)
    for name, rule in rules.items():
        assert rule["health"] == "ok", (name, rule.get("lastError"))
    firing = [alert for alert in prometheus.api("alerts")["alerts"] if alert["state"] == "firing"]
    assert firing == []  # a healthy gateway with a fresh certificate


#: Series that stay without samples on a gateway that refused no connection, reloaded no TLS
#: file and authenticates nobody: their panels are only checked to be valid PromQL.
QUIET = {
    "pulsar_lookup_gateway_connections_refused_total",
    "pulsar_lookup_gateway_tls_reloads_total",
    "pulsar_authentication_success_total",
    "pulsar_authentication_failures_total",
}


@pytest.mark.zookeeper
def test_every_dashboard_query_runs_on_prometheus_and_the_main_ones_show_data(
    prometheus: PrometheusServer,
) -> None:
    prometheus.wait_for(f'up{{job="{JOB}"}} == 1')
    # Rates need two scrapes of a series; the ones made at start are enough after that.
    prometheus.wait_for("count_over_time(pulsar_broker_lookup_count[1m]) > 2")
    for query in dashboard_queries(dashboard()):
        expr = expand_variables(query.expr)
        if (call := label_values_call(expr)) is not None:  # a variable: the series API
            selector, label = call
            params = {"match[]": selector} if selector else {}
            assert prometheus.api(f"label/{label}/values", **params), (query.panel, expr)
        elif series_names(expr) & QUIET:
            prometheus.query(expr)  # accepted: a syntax or type error fails here
        else:
            assert prometheus.wait_for(expr, timeout=10), (query.panel, expr)
