"""deploy/istio: the shape of what the gateway relies on (kubernetes-validate has no Istio CRDs):
each ingress gateway's VirtualService sets X-Pulsar-ListenerName to one listener and routes to
that listener's Service and port."""

from __future__ import annotations

from typing import Any

from tests.deploy.artefacts import DEPLOY, configmap_config, kubernetes_objects, yaml_documents
from tests.deploy.routes import CLIENT_ROUTES, OPERATIONS, WATCH, istio_matches, path_of

ISTIO = DEPLOY / "istio" / "pulsar-lookup-gateway.yaml"
HEADER = "X-Pulsar-ListenerName"
LISTENER_ANNOTATION = "pulsar-lookup-gateway/listener"


def istio(kind: str) -> list[dict[str, Any]]:
    docs = yaml_documents(ISTIO)
    for doc in docs:
        assert doc["apiVersion"] == "networking.istio.io/v1", doc["metadata"]
        assert set(doc) == {"apiVersion", "kind", "metadata", "spec"}, doc["metadata"]
    return [doc for doc in docs if doc["kind"] == kind]


def services() -> dict[str, dict[str, Any]]:
    """The Services of deploy/kubernetes by cluster DNS name."""
    found = {}
    for _, obj in kubernetes_objects():
        if obj["kind"] == "Service":
            meta = obj["metadata"]
            found[f"{meta['name']}.{meta['namespace']}.svc.cluster.local"] = obj
    return found


def test_only_known_kinds() -> None:
    kinds = {doc["kind"] for doc in yaml_documents(ISTIO)}
    assert kinds == {"Gateway", "VirtualService", "DestinationRule"}


def test_each_virtual_service_names_its_gateways_listener_and_routes_to_that_listener() -> None:
    gateways = {
        f"{g['metadata']['namespace']}/{g['metadata']['name']}": g for g in istio("Gateway")
    }
    declared = {listener.name for listener in configmap_config().advertised_listeners}
    by_gateway: dict[str, set[str]] = {}
    for vs in istio("VirtualService"):
        spec = vs["spec"]
        name = vs["metadata"]["name"]
        assert spec["gateways"], name
        for gateway in spec["gateways"]:
            assert gateway in gateways, f"{name}: no Gateway {gateway}"
            served_hosts = {h for s in gateways[gateway]["spec"]["servers"] for h in s["hosts"]}
            assert set(spec["hosts"]) <= served_hosts, name
        assert spec["http"], name
        for route in spec["http"]:
            set_headers = route["headers"]["request"]["set"]
            listener = set_headers[HEADER]  # set (not add): a client's own value is replaced
            assert listener in declared, f"{name}: listener {listener} is not in the config"
            (destination,) = route["route"]
            host = destination["destination"]["host"]
            service = services().get(host)
            assert service is not None, f"{name}: no Service {host} in deploy/kubernetes"
            # The header names the listener of the socket the route ends on.
            assert service["metadata"]["annotations"][LISTENER_ANNOTATION] == listener, name
            port = destination["destination"]["port"]["number"]
            assert port in [p["port"] for p in service["spec"]["ports"]], name
            for gateway in spec["gateways"]:
                by_gateway.setdefault(gateway, set()).add(listener)
    # Every ingress gateway is routed, each to one listener, a different one for each.
    assert set(by_gateway) == set(gateways)
    assert all(len(listeners) == 1 for listeners in by_gateway.values()), by_gateway
    chosen = [next(iter(listeners)) for listeners in by_gateway.values()]
    assert len(set(chosen)) == len(chosen), by_gateway


def test_tls_to_the_external_socket_is_originated_and_checked() -> None:
    routes = [
        route["route"][0]["destination"]
        for vs in istio("VirtualService")
        for route in vs["spec"]["http"]
    ]
    rules = {rule["spec"]["host"]: rule for rule in istio("DestinationRule")}
    for destination in routes:
        service = services()[destination["host"]]
        (port,) = [
            p for p in service["spec"]["ports"] if p["port"] == destination["port"]["number"]
        ]
        if port["appProtocol"] == "https":  # a TLS socket: the mesh must speak TLS to it
            settings = rules[destination["host"]]["spec"]["trafficPolicy"]["portLevelSettings"]
            (tls,) = [s["tls"] for s in settings if s["port"]["number"] == port["port"]]
            assert tls["mode"] == "SIMPLE" and tls["credentialName"], tls


def test_every_client_route_and_the_watch_are_routed_and_no_operations_route() -> None:
    """The routes of the HTTP API (docs/protocols/http.md) that clients use
    (tests/deploy/routes.py; nginx is tested with the same paths in
    tests/e2e/test_recipe_routes.py) pass every ingress gateway; /metrics, the listener table
    and the probes do not."""
    for vs in istio("VirtualService"):
        name = vs["metadata"]["name"]
        routes = vs["spec"]["http"]
        for path in [*CLIENT_ROUTES.values(), WATCH]:
            assert routed(routes, path_of(path)), f"{name}: nothing routes {path}"
        for path in OPERATIONS:
            assert not routed(routes, path), f"{name}: {path} leaves the mesh's edge"
        # The watch is a WebSocket held open: its route has no timeout (Istio passes upgrades).
        (watch,) = routed(routes, WATCH)
        assert watch["timeout"] == "0s", name


def routed(routes: list[dict[str, Any]], path: str) -> list[dict[str, Any]]:
    """The routes of a VirtualService that match `path`."""
    return [r for r in routes if any(istio_matches(m, path) for m in r["match"])]


def test_every_route_but_the_internal_ones_ends_on_a_socket_that_refuses_other_listeners() -> None:
    """A client's ?listenerName= passes Envoy (a VirtualService cannot remove a query parameter)
    and wins over the header the route sets: the ConfigMap must bound the names a client of
    each non-internal route's listener may ask for, without the internal listener (issue 41)."""
    config = configmap_config()
    internal = config.internal_listener_name
    outside = {
        route["headers"]["request"]["set"][HEADER]
        for vs in istio("VirtualService")
        for route in vs["spec"]["http"]
    } - {internal}
    assert outside
    for listener in outside:
        allowed = config.settings_for(listener).allowed_listener_names
        assert allowed is not None and internal not in allowed, (listener, allowed)
