"""One gateway for the deployment tests that read its metrics: a `run` process with TLS on the
external listener, its cluster in the session's real ZooKeeper, lookups already served."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from pulsar_lookup_gateway.metadata_store.admin import connected, seed
from pulsar_lookup_gateway.metadata_store.embedded_zookeeper import EmbeddedZooKeeper
from pulsar_lookup_gateway.tls.devcerts import write_dev_certs
from tests.deploy.gateways import (
    GatewayProcess,
    ServedGateway,
    demo_nodes,
    peer_cluster_nodes,
    serve_lookups,
    tls_config,
)


@pytest.fixture(scope="session")
def served_gateway(
    zookeeper: EmbeddedZooKeeper, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServedGateway]:
    workdir = tmp_path_factory.mktemp("served-gateway")
    chroot = f"/deploy-{uuid.uuid4().hex[:12]}"
    with connected(zookeeper.connect_string) as admin:
        admin.ensure_path(chroot)
    with connected(zookeeper.connect_string + chroot) as admin:
        seed(admin, demo_nodes() | peer_cluster_nodes())
    certs = write_dev_certs(workdir / "certs")
    config = workdir / "gateway.conf"
    metadata = f"zk:{zookeeper.connect_string}{chroot}"
    config.write_text(tls_config(metadata, certs.directory) + "clusterName=demo\n")
    gateway = GatewayProcess(config, workdir / "gateway.log")
    try:
        served = serve_lookups(gateway, certs.directory / "ca.crt")
        yield ServedGateway(gateway, certs.directory / "ca.crt", served)
    finally:
        code = gateway.stop()
    assert code == 0, gateway.text()
