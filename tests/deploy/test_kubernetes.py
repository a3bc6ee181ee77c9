"""deploy/kubernetes: every object is valid for a current Kubernetes (kubernetes-validate, strict,
offline), and the objects agree with each other, with the gateway's config in the ConfigMap and
with the image."""

from __future__ import annotations

import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from packaging.version import Version

from pulsar_lookup_gateway.listeners.endpoints.addresses import Scheme
from pulsar_lookup_gateway.tls.devcerts import write_dev_certs
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
from tests.processes import EXE, ROOT

#: The newest Kubernetes whose schemas kubernetes-validate ships (a test fails if it gets old).
KUBERNETES_VERSION = kubernetes_validate.utils.latest_version()
#: The oldest release the manifests support: every field they use is on by default there
#: (PodDisruptionBudget unhealthyPodEvictionPolicy: beta, on, from 1.27).
OLDEST_SUPPORTED = "1.27.0"
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
    assert OLDEST_SUPPORTED in kubernetes_validate.utils.all_versions()


def problem_of(obj: dict[str, Any], version: str) -> str | None:
    """Why `obj` is not valid for Kubernetes `version` in strict mode; None when it is."""
    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        location = "/".join(str(part) for part in exc.path)
        return f"{location}: {exc.message}"
    return None


@pytest.mark.parametrize("version", [OLDEST_SUPPORTED, KUBERNETES_VERSION])
@pytest.mark.parametrize(
    "path, obj",
    [
        pytest.param(path, obj, id=f"{path.name}:{obj['kind']}")
        for path, obj in kubernetes_objects()
    ],
)
def test_every_object_is_valid_in_strict_mode(
    path: Path, obj: dict[str, Any], version: str
) -> None:
    problem = problem_of(obj, version)
    name = f"{path.name} {obj['kind']}/{obj['metadata']['name']}"
    assert problem is None, f"{name} is not valid for Kubernetes {version}: {problem}"


def test_the_oldest_supported_release_is_the_one_the_manifests_say() -> None:
    """deployment.yaml states the releases it runs on; the tests validate against the oldest."""
    text = (KUBERNETES / "deployment.yaml").read_text()
    assert (
        f"Kubernetes {Version(OLDEST_SUPPORTED).major}.{Version(OLDEST_SUPPORTED).minor} "
        "or newer" in text
    )


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
    command = gateway_container()["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "/bin/sleep", command  # coreutils, in the image's Debian slim base
    pause = int(command[1])
    shutdown = configmap_config().shutdown_timeout_seconds
    assert pod_spec()["terminationGracePeriodSeconds"] > pause + shutdown


def test_no_handler_needs_a_kubernetes_newer_than_the_oldest_supported() -> None:
    """The `sleep` lifecycle action exists from Kubernetes 1.30 on (1.29 has it behind an
    alpha gate, so its schema accepts what its API servers refuse): hooks and probes use exec
    and httpGet, which every supported release has."""
    container = gateway_container()
    handlers = [*container.get("lifecycle", {}).values()]
    handlers += [container[probe] for probe in ("readinessProbe", "livenessProbe")]
    for handler in handlers:
        assert set(handler) & {"exec", "httpGet", "tcpSocket"}, handler
        assert "sleep" not in handler, handler


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


def test_the_network_policy_lets_clients_in_and_only_brokers_zookeeper_and_dns_out() -> None:
    policy = kubernetes_object("NetworkPolicy")["spec"]
    assert selects_the_pods(policy["podSelector"]["matchLabels"])
    assert sorted(policy["policyTypes"]) == ["Egress", "Ingress"]
    ingress_ports = sorted(p["port"] for rule in policy["ingress"] for p in rule["ports"])
    assert ingress_ports == sorted(bind_ports())
    egress = {(p["port"], p["protocol"]) for rule in policy["egress"] for p in rule["ports"]}
    config = configmap_config()
    zookeeper_ports = {port for _, port in config.metadata_store_url.hosts}
    # The broker link: each broker's internal listener's binary URL (pulsar+ssl with TLS).
    broker_port = Scheme.PULSAR_SSL.default_port if config.tls_enabled_with_broker else 6650
    assert egress == {(port, "TCP") for port in zookeeper_ports} | {
        (broker_port, "TCP"),
        (53, "UDP"),
        (53, "TCP"),
    }
    for rule in policy["egress"]:
        assert rule["to"], "egress goes to named peers only"
    egress_values = generated_literals("pulsar-lookup-gateway-egress")
    assert {int(egress_values["zookeeperPort"])} == zookeeper_ports
    assert int(egress_values["brokerServicePort"]) == broker_port


# -- the kustomization -------------------------------------------------------------------------


def kustomization() -> dict[str, Any]:
    (document,) = yaml_documents(KUBERNETES / "kustomization.yaml")
    return document


def generated_literals(name: str) -> dict[str, str]:
    (generator,) = [g for g in kustomization()["configMapGenerator"] if g["name"] == name]
    return dict(literal.split("=", 1) for literal in generator["literals"])


def field_at(obj: Any, field_path: str) -> Any:
    """The value at a kustomize fieldPath made of names and list indexes (a.0.b)."""
    for part in field_path.split("."):
        obj = obj[int(part)] if isinstance(obj, list) else obj[part]
    return obj


def test_the_egress_values_are_set_in_the_kustomization_only() -> None:
    """One place for the brokers' and ZooKeeper's pods and ports: the kustomization's
    local-config ConfigMap, written into the NetworkPolicy by replacements. Each target exists
    in networkpolicy.yaml and holds the same default there (for `kubectl apply -f` of it), and
    the ConfigMap is never applied."""
    (generator,) = kustomization()["configMapGenerator"]
    annotations = generator["options"]["annotations"]
    assert annotations["config.kubernetes.io/local-config"] == "true"
    literals = generated_literals(generator["name"])
    replaced = set()
    for replacement in kustomization()["replacements"]:
        source = replacement["source"]
        assert (source["kind"], source["name"]) == ("ConfigMap", generator["name"])
        key = source["fieldPath"].removeprefix("data.")
        replaced.add(key)
        for target in replacement["targets"]:
            selected = kubernetes_object(target["select"]["kind"], target["select"]["name"])
            for field_path in target["fieldPaths"]:
                assert str(field_at(selected, field_path)) == literals[key], field_path
    assert replaced == set(literals)
    # Each rule's pods and port come from the same peer's values.
    egress = kubernetes_object("NetworkPolicy")["spec"]["egress"]
    for index, peer in ((0, "broker"), (1, "zookeeper")):
        rule = egress[index]
        assert rule["to"][0]["podSelector"]["matchLabels"]["component"] == peer


def test_the_secrets_are_generated_from_the_files_the_pod_reads() -> None:
    """The Secrets the Deployment mounts are made by the kustomization (not left to comments),
    from files in deploy/kubernetes/secrets/ that git ignores, named as `certs` writes them."""
    generated = {g["name"]: g for g in kustomization()["secretGenerator"]}
    mounted = {(name, key) for kind, name, key in provided_files().values() if kind == "secret"}
    assert {name for name, _ in mounted} == set(generated)
    for name, generator in generated.items():
        keys = {entry.split("=", 1)[0] for entry in generator["files"]}
        assert keys == {key for secret, key in mounted if secret == name}, name
        for entry in generator["files"]:
            assert entry.split("=", 1)[1].startswith("secrets/"), entry
    assert generated["pulsar-lookup-gateway-tls"]["type"] == "kubernetes.io/tls"
    sources = {entry.split("=", 1)[1] for g in generated.values() for entry in g["files"]}
    assert {"secrets/server.crt", "secrets/server.key"} <= sources  # `certs --out secrets`
    ignore = (KUBERNETES / "secrets" / ".gitignore").read_text().splitlines()
    assert "*" in ignore and "!.gitignore" in ignore
    listed = subprocess.run(
        ["git", "ls-files", str(KUBERNETES / "secrets")],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=KUBERNETES,
    )
    assert listed.stdout.split() in ([], ["secrets/.gitignore"]), listed.stdout


def test_the_image_is_the_one_the_dockerfile_builds_at_the_projects_version() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    (image,) = kustomization()["images"]
    name, _, tag = gateway_container()["image"].partition(":")
    assert image["name"] == name == "pulsar-lookup-gateway"  # docker build -t <name>:<version>
    assert str(image["newTag"]) == tag == version
    kustomization_text = (KUBERNETES / "kustomization.yaml").read_text()
    assert f"docker build -t {name}:{version} ." in kustomization_text


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """`kubectl kustomize` of deploy/kubernetes with the Secrets' files in place (development
    certificates, a fresh RSA public key); a skip where kubectl is not installed."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed (it renders the kustomization)")
    copy = tmp_path_factory.mktemp("kustomize") / "kubernetes"
    shutil.copytree(KUBERNETES, copy)
    certs = write_dev_certs(copy / "secrets", ["pulsar.example.com"], overwrite=True)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    (certs.directory / "public.key").write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    result = subprocess.run(
        [kubectl, "kustomize", str(copy)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc is not None]


def test_the_rendered_kustomization_is_valid_and_wires_secrets_and_egress(
    rendered: list[dict[str, Any]],
) -> None:
    for obj in rendered:
        for version in (OLDEST_SUPPORTED, KUBERNETES_VERSION):
            problem = problem_of(obj, version)
            assert problem is None, f"{obj['kind']}/{obj['metadata']['name']}: {problem}"
        assert obj["metadata"].get("namespace", "pulsar") == "pulsar"
    kinds = [obj["kind"] for obj in rendered]
    assert kinds.count("Secret") == 2 and kinds.count("ConfigMap") == 1  # egress: local only
    secrets = {obj["metadata"]["name"] for obj in rendered if obj["kind"] == "Secret"}
    (deployment,) = [obj for obj in rendered if obj["kind"] == "Deployment"]
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    referenced = {
        source["secret"]["name"]
        for volume in volumes
        for source in volume.get("projected", {}).get("sources", [])
        if "secret" in source
    }
    assert referenced == secrets  # the generated names, hash suffix and all
    (policy,) = [obj for obj in rendered if obj["kind"] == "NetworkPolicy"]
    assert policy["spec"] == kubernetes_object("NetworkPolicy")["spec"]
