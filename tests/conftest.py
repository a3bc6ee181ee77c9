"""Shared fixtures: hypothesis profiles, and a real ZooKeeper server for the whole session with
a fresh chroot for every test that asks for one."""

from __future__ import annotations

import functools
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import settings
from kazoo.client import KazooClient

from pulsar_lookup_gateway.metadata_store.admin import connected
from pulsar_lookup_gateway.metadata_store.embedded_zookeeper import (
    EmbeddedZooKeeper,
    ZooKeeperUnavailable,
)

# CI machines are small and shared: no deadlines, a bounded number of examples.
settings.register_profile("ci", deadline=None, max_examples=200)
settings.register_profile("dev", deadline=None, max_examples=100)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


# Helper modules whose use means a test starts a Debian neighbour (nginx, HAProxy, Prometheus).
NEIGHBOUR_HELPERS = {"tests.neighbours", "tests.deploy.prometheus_server", "tests.deploy.gateways"}


@functools.cache  # (asked once per test; a module's answer is the same for all of them)
def _uses_neighbours(module: Any) -> bool:
    return any(
        getattr(value, "__module__", None) in NEIGHBOUR_HELPERS or value_name in NEIGHBOUR_HELPERS
        for value_name, value in vars(module).items()
    )


def pytest_itemcollected(item: pytest.Item) -> None:
    """Markers by what a test starts, so `-m "not spark and not neighbours"` needs no list kept
    by hand; and the plan for xdist (`--dist loadgroup`; set here, as each test is collected,
    because xdist reads the groups in its own collection hook):
    - a module's tests stay on one worker, so what its module-scoped fixtures start (Prometheus,
      a served gateway) starts once;
    - everything that starts Spark (the one session, a standalone cluster, resolve-zones as a
      process) is one group: one JVM-heavy job at a time on 2 cores, a Spark cluster once."""
    path = item.path.as_posix()
    group = f"module:{item.path.relative_to(item.config.rootpath).as_posix()}"
    if "spark" in getattr(item, "fixturenames", ()) or "/tests/integration/zones/" in path:
        item.add_marker(pytest.mark.spark)
        group = "spark"
    item.add_marker(pytest.mark.xdist_group(group))
    module = getattr(item, "module", None)
    if "/tests/deploy/" in path or (module is not None and _uses_neighbours(module)):
        item.add_marker(pytest.mark.neighbours)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The Spark group first in line: the longest group starts at once while the other workers
    share the rest."""
    items.sort(key=lambda item: item.get_closest_marker("spark") is None)  # (stable)


@pytest.fixture(scope="session")
def zookeeper() -> Iterator[EmbeddedZooKeeper]:
    server = EmbeddedZooKeeper()
    try:
        server.start()
    except ZooKeeperUnavailable as exc:  # `make test` installs it; a bare pytest may not have it
        pytest.fail(f"cannot start ZooKeeper for the integration tests: {exc}")
    yield server
    server.close()


@pytest.fixture
def zk_chroot(zookeeper: EmbeddedZooKeeper) -> Iterator[str]:
    """A fresh chroot path, created empty; the tests' metadataStoreUrl is zk:<server><chroot>."""
    chroot = f"/t-{uuid.uuid4().hex[:12]}"
    with connected(zookeeper.connect_string) as admin:
        admin.ensure_path(chroot)
    yield chroot


@pytest.fixture
def zk_admin(zookeeper: EmbeddedZooKeeper, zk_chroot: str) -> Iterator[KazooClient]:
    """A client inside the test's chroot, playing the brokers and the admin tools."""
    with connected(zookeeper.connect_string + zk_chroot) as client:
        yield client


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local[2] SparkSession for every test that needs one (a JVM start is seconds);
    pyspark is imported only by the tests that ask for it."""
    from pulsar_lookup_gateway.zones.spark import local_session

    session = local_session(
        "local[2]",
        {
            "spark.sql.shuffle.partitions": "4",
            "spark.default.parallelism": "2",
            "spark.driver.memory": "1g",
            # Small jobs in a JVM that lives a minute: the quick compiler only, one GC thread
            # (C2 compiles cost more CPU than they save here, on 2 shared cores).
            "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
        },
        app_name="tests",
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
