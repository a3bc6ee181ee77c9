"""deploy/grafana: the dashboard's queries read only series the gateway exports, and it has the
panels an operator needs."""

from __future__ import annotations

import pytest

from tests.deploy.artefacts import dashboard, dashboard_queries, panels
from tests.deploy.gateways import ServedGateway, get, metric_object_names, parse, sample_names
from tests.deploy.promql import series_names

#: Series Prometheus makes itself for every target.
SCRAPE_SERIES = {"up"}


def test_the_query_reader_finds_series_and_skips_the_rest() -> None:
    assert series_names(
        'histogram_quantile(0.99, sum by (listener, le) (rate(pulsar_broker_lookup_bucket{job=~"$job"}[$__rate_interval])))'  # noqa: E501
    ) == {"pulsar_broker_lookup_bucket"}
    assert series_names("a_total / on(instance) group_left(version) b > 1e3 offset 5m") == {
        "a_total",
        "b",
    }
    assert series_names('label_values(x_info{job=~"$job"}, instance)') == {"x_info"}
    assert series_names("label_values(instance)") == set()


@pytest.mark.zookeeper
def test_every_query_reads_only_series_the_gateway_exports(served_gateway: ServedGateway) -> None:
    scrape = get(served_gateway.gateway.metrics_url)
    assert scrape.status == 200
    scraped = sample_names(parse(scrape.body.decode()))
    objects = metric_object_names()
    # The metric objects are what a gateway with TLS, serving lookups, exports: no more, no less.
    assert scraped == objects, (sorted(scraped - objects), sorted(objects - scraped))
    exported = scraped | objects | SCRAPE_SERIES
    queries = dashboard_queries(dashboard())
    assert len(queries) >= 10
    for query in queries:
        names = series_names(query.expr)
        assert names, f"{query.panel}: {query.expr} names no series"
        assert names <= exported, f"{query.panel}: {sorted(names - exported)} are not exported"


def test_the_dashboard_has_the_panels_an_operator_needs() -> None:
    queries = dashboard_queries(dashboard())

    def reading(name: str, *fragments: str) -> list[str]:
        return [
            q.panel
            for q in queries
            if name in series_names(q.expr) and all(f in q.expr for f in fragments)
        ]

    assert reading("pulsar_broker_lookup_count", "by (listener, chosen_by)", "rate(")
    assert reading("pulsar_broker_lookup_failures_total", "by (error)", "rate(")
    assert reading("pulsar_broker_lookup_bucket", "histogram_quantile(0.5,", "by (le)")
    assert reading("pulsar_broker_lookup_bucket", "histogram_quantile(0.99,", "by (le)")
    assert reading("pulsar_broker_lookup_pending_requests")
    assert reading("pulsar_lookup_gateway_max_concurrent_lookups")
    assert reading("pulsar_lookup_gateway_metadata_ready")
    assert reading("pulsar_lookup_gateway_tls_certificate_expiry_seconds", "time()")


def test_the_dashboard_is_well_formed() -> None:
    board = dashboard()
    assert board["uid"] and board["title"]
    ids = [panel["id"] for panel in panels(board)]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for panel in panels(board):
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] == "row":
            continue
        # Every query goes to the chosen Prometheus, filtered by the job and gateway chosen.
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"], panel["title"]
        refs = [target["refId"] for target in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]
            assert 'job=~"$job"' in target["expr"], (panel["title"], target["expr"])
            assert 'instance=~"$instance"' in target["expr"], (panel["title"], target["expr"])
