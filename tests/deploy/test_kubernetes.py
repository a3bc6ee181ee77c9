"""deploy/kubernetes: every object is valid for a current Kubernetes (kubernetes-validate, strict,
offline), and the objects agree with each other, with the gateway's config in the ConfigMap and
with the image."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml
from packaging.version import Version

from pulsar_lookup_gateway.listeners.endpoints import Scheme
from tests.deploy.artefacts import (
    CONFIG_PATH,
    KUBERNETES,
    configmap_config,
    configmap_raw,
    configmap_text,
    dockerfile_instructions,
    files_named,
    kubernetes_object,
    kubernetes_objects,
    yaml_documents,
)
from tests.deploy.prometheus_server import SHIPPED_CONFIG as PROMETHEUS_CONFIG
from tests.processes import EXE

#: The newest Kubernetes whose schemas kubernetes-validate ships (a test fails if it gets old).
KUBERNETES_VERSION = kubernetes_validate.utils.latest_version()
LISTENER_ANNOTATION = "pulsar-lookup-gateway/listener"


def deployment() -> dict[str, Any]:
    return kubernetes_object("Deployment", "pulsar-lookup-gateway")


def pod_spec() -> dict[str, Any]:
    return dict(deployment()["spec"]["template"]["spec"])


def gateway_container() -> dict[str, Any]:
    (container,) = pod_spec()["containers"]
    return dict(container)


def container_ports() -> dict[str, int]:
    return {port["name"]: port["containerPort"] for port in gateway_container()["ports"]}


def resolve_port(port: int | str) -> int:
    return container_ports()[port] if isinstance(port, str) else port


def bind_ports() -> dict[int, tuple[str | None, Scheme]]:
    """The ConfigMap config's sockets: port -> (listener, scheme)."""
    return {
        spec.endpoint.port: (spec.listener, spec.endpoint.scheme)
        for spec in configmap_config().sockets()
    }


def selects_the_pods(selector: dict[str, Any]) -> bool:
    labels = deployment()["spec"]["template"]["metadata"]["labels"]
    return bool(selector) and selector.items() <= labels.items()


# -- schemas -----------------------------------------------------------------------------------


def test_the_schemas_are_of_a_current_kubernetes() -> None:
    assert Version(KUBERNETES_VERSION) >= Version("1.33")


@pytest.mark.parametrize(
    "path, obj",
    [
        pytest.param(path, obj, id=f"{path.name}:{obj['kind']}")
        for path, obj in kubernetes_objects()
    ],
)
def test_every_object_is_valid_in_strict_mode(path: Path, obj: dict[str, Any]) -> None:
    problem = None
    try:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        location = "/".join(str(part) for part in exc.path)
        problem = f"{location}: {exc.message}"
    name = f"{path.name} {obj['kind']}/{obj['metadata']['name']}"
    assert problem is None, f"{name} is not valid for Kubernetes {KUBERNETES_VERSION}: {problem}"


def test_the_kustomization_lists_every_file_and_one_namespace() -> None:
    (kustomization,) = yaml_documents(KUBERNETES / "kustomization.yaml")
    files = {path.name for path in KUBERNETES.glob("*.yaml")} - {"kustomization.yaml"}
    assert sorted(kustomization["resources"]) == sorted(files)
    for _, obj in kubernetes_objects():
        assert obj["metadata"]["namespace"] == kustomization["namespace"], obj["metadata"]


def test_the_expected_objects_are_there() -> None:
    kinds = sorted(obj["kind"] for _, obj in kubernetes_objects())
    expected = ["ConfigMap", "Deployment", "HorizontalPodAutoscaler", "NetworkPolicy"]
    expected += ["PodDisruptionBudget", "Service", "ServiceAccount"]
    assert set(expected) <= set(kinds)


# -- the config in the ConfigMap ---------------------------------------------------------------


def test_the_configmap_config_passes_check_config(tmp_path: Path) -> None:
    conf = tmp_path / "gateway.conf"
    conf.write_text(configmap_text())
    result = subprocess.run(
        [EXE, "check-config", "--no-host-checks", "--config", str(conf)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "warning" not in result.stderr.lower(), result.stderr  # no key the gateway ignores
    config = configmap_config()  # and the loader the gateway runs
    assert {listener.name for listener in config.advertised_listeners} == {"internal", "external"}


def test_the_config_is_mounted_where_the_image_reads_it() -> None:
    (entrypoint,) = [i for i in dockerfile_instructions() if i.keyword == "ENTRYPOINT"]
    assert CONFIG_PATH in entrypoint.arguments
    assert "command" not in gateway_container() and "args" not in gateway_container()
    assert provided_files()[CONFIG_PATH] == ("configMap", "pulsar-lookup-gateway", "gateway.conf")


def provided_files() -> dict[str, tuple[str, str, str]]:
    """Files the pod's volumes put in the container: path -> (kind, object name, key)."""
    volumes = {volume["name"]: volume for volume in pod_spec()["volumes"]}
    files = {}
    for mount in gateway_container()["volumeMounts"]:
        volume = volumes[mount["name"]]
        sources = volume.get("projected", {}).get("sources", [])
        sources += [{kind: volume[kind]} for kind in ("configMap", "secret") if kind in volume]
        for source in sources:
            for kind, spec in source.items():
                name = spec.get("name") or spec.get("secretName")
                for item in spec.get("items", []):
                    path = f"{mount['mountPath'].rstrip('/')}/{item['path']}"
                    files[path] = (kind, name, item["key"])
    return files


def test_tls_and_token_keys_come_from_secrets_at_the_configured_paths() -> None:
    files = provided_files()
    named = files_named(configmap_raw())
    assert {"tlsCertificateFilePath", "tlsKeyFilePath", "tokenPublicKey"} <= set(named)
    for key, path in named.items():
        assert path in files, f"{key}={path}: no volume provides it"
        kind, name, _ = files[path]
        assert kind == "secret", f"{key}: key material comes from a Secret, not a {kind}"
        assert name.startswith("pulsar-lookup-gateway-"), name
    # Read-only, readable by the pod's group only.
    mount = next(m for m in gateway_container()["volumeMounts"] if m["mountPath"] in CONFIG_PATH)
    assert mount["readOnly"] is True


# -- the Deployment ----------------------------------------------------------------------------


def test_replicas_probes_and_resources() -> None:
    spec = deployment()["spec"]
    assert spec["replicas"] == 2
    assert selects_the_pods(spec["selector"]["matchLabels"])
    container = gateway_container()
    ports = bind_ports()
    for probe, path in (("readinessProbe", "/ready"), ("livenessProbe", "/health")):
        get = container[probe]["httpGet"]
        assert get["path"] == path
        assert get.get("scheme", "HTTP") == "HTTP"
        # A plain HTTP socket of the config, one that needs no credentials.
        listener, scheme = ports[resolve_port(get["port"])]
        assert scheme is Scheme.HTTP, probe
        assert not configmap_config().authentication_required(listener), probe
    resources = container["resources"]
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(resources[kind]), kind


def test_the_container_ports_are_the_configs_sockets() -> None:
    ports = bind_ports()
    assert sorted(container_ports().values()) == sorted(ports)
    for name, number in container_ports().items():
        _, scheme = ports[number]
        assert name == scheme.value.replace("+", "-"), (name, number)


def test_it_runs_as_the_images_non_root_user_on_a_read_only_root() -> None:
    pod = pod_spec()["securityContext"]
    container = gateway_container()["securityContext"]
    assert pod["runAsNonRoot"] is True and container["runAsNonRoot"] is True
    (user,) = [i for i in dockerfile_instructions() if i.keyword == "USER"]
    uid, _, gid = user.arguments.partition(":")
    assert pod["runAsUser"] == int(uid) != 0
    assert pod["runAsGroup"] == int(gid)
    assert container["readOnlyRootFilesystem"] is True
    assert container["allowPrivilegeEscalation"] is False
    assert container["capabilities"]["drop"] == ["ALL"]
    assert pod["seccompProfile"]["type"] == "RuntimeDefault"
    # --workers and Python need a writable /tmp on a read-only root.
    assert "/tmp" in [m["mountPath"] for m in gateway_container()["volumeMounts"]]


def test_the_grace_period_outlasts_the_preStop_pause_and_the_shutdown_timeout() -> None:
    pause = gateway_container()["lifecycle"]["preStop"]["sleep"]["seconds"]
    shutdown = configmap_config().shutdown_timeout_seconds
    assert pod_spec()["terminationGracePeriodSeconds"] > pause + shutdown


# -- Services ----------------------------------------------------------------------------------


def services() -> list[dict[str, Any]]:
    return [obj for _, obj in kubernetes_objects() if obj["kind"] == "Service"]


def test_one_service_per_listener_on_that_listeners_sockets_and_advertised_ports() -> None:
    config = configmap_config()
    by_listener = {
        svc["metadata"]["annotations"][LISTENER_ANNOTATION]: svc
        for svc in services()
        if LISTENER_ANNOTATION in svc["metadata"].get("annotations", {})
    }
    assert len(by_listener) == len([s for s in services() if s["metadata"].get("annotations")])
    assert set(by_listener) == {spec.listener for spec in config.sockets()}
    ports = bind_ports()
    for name, svc in by_listener.items():
        assert selects_the_pods(svc["spec"]["selector"])
        advertised = config.listener(name)
        assert advertised is not None
        served = set()
        for port in svc["spec"]["ports"]:
            listener, scheme = ports[resolve_port(port["targetPort"])]
            assert listener == name, (name, port)
            served.add(scheme)
            # What the gateway says about itself is where its clients find it.
            url = advertised.url(scheme)
            assert url is not None and url.endswith(f":{port['port']}"), (url, port)
            if svc["spec"]["type"] == "ClusterIP":
                host = f"{svc['metadata']['name']}.{svc['metadata']['namespace']}.svc"
                assert url.split("://")[1].startswith(host + ":"), (url, host)
        # Every socket of the listener is reachable through its Service.
        assert served == {scheme for listener, scheme in ports.values() if listener == name}


def test_the_metrics_service_reaches_every_pod_and_is_the_one_prometheus_resolves() -> None:
    svc = kubernetes_object("Service", "pulsar-lookup-gateway-metrics")
    spec = svc["spec"]
    assert spec["clusterIP"] == "None" and spec["publishNotReadyAddresses"] is True
    assert selects_the_pods(spec["selector"])
    (port,) = spec["ports"]
    _, scheme = bind_ports()[resolve_port(port["targetPort"])]
    assert scheme is Scheme.HTTP
    (job,) = yaml.safe_load(PROMETHEUS_CONFIG.read_text())["scrape_configs"]
    (sd,) = job["dns_sd_configs"]
    namespace = svc["metadata"]["namespace"]
    srv = f"_{port['name']}._tcp.{svc['metadata']['name']}.{namespace}.svc.cluster.local"
    assert sd["names"] == [srv] and sd["type"] == "SRV"


# -- availability and network ------------------------------------------------------------------


def test_the_disruption_budget_and_the_autoscaler_fit_the_deployment() -> None:
    pdb = kubernetes_object("PodDisruptionBudget")["spec"]
    assert selects_the_pods(pdb["selector"]["matchLabels"])
    assert 1 <= pdb["minAvailable"] < deployment()["spec"]["replicas"]
    hpa = kubernetes_object("HorizontalPodAutoscaler")["spec"]
    target = hpa["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", deployment()["metadata"]["name"])
    assert hpa["minReplicas"] == deployment()["spec"]["replicas"] < hpa["maxReplicas"]
    # Utilization targets are relative to the requests.
    (metric,) = hpa["metrics"]
    assert metric["resource"]["name"] in gateway_container()["resources"]["requests"]


def test_the_network_policy_lets_clients_in_and_only_zookeeper_and_dns_out() -> None:
    policy = kubernetes_object("NetworkPolicy")["spec"]
    assert selects_the_pods(policy["podSelector"]["matchLabels"])
    assert sorted(policy["policyTypes"]) == ["Egress", "Ingress"]
    ingress_ports = sorted(p["port"] for rule in policy["ingress"] for p in rule["ports"])
    assert ingress_ports == sorted(bind_ports())
    egress = {(p["port"], p["protocol"]) for rule in policy["egress"] for p in rule["ports"]}
    zookeeper_ports = {port for _, port in configmap_config().metadata_store_url.hosts}
    assert egress == {(port, "TCP") for port in zookeeper_ports} | {(53, "UDP"), (53, "TCP")}
    for rule in policy["egress"]:
        assert rule["to"], "egress goes to named peers only"
