"""The driver JVM's collector for a local master (zones.spark.driver_java_options)."""

import os

import pytest

from pulsar_lookup_gateway.zones.spark import driver_java_options

SERIAL = "-XX:+UseSerialGC"


@pytest.mark.parametrize("master", ["local", "local[1]", "local[2]", "local[2,3]"])
def test_a_small_local_master_gets_the_serial_collector(master: str) -> None:
    assert driver_java_options(master) == SERIAL
    assert driver_java_options(master, "-Xmx1g") == f"-Xmx1g {SERIAL}"


@pytest.mark.parametrize("master", ["local[4]", "local[0]", "local-cluster[2,1,1024]", "yarn"])
def test_other_masters_keep_the_default_collector(master: str) -> None:
    assert driver_java_options(master, "-Xmx1g") == "-Xmx1g"


def test_local_star_follows_the_cores() -> None:
    expected = SERIAL if (os.cpu_count() or 1) <= 2 else ""
    assert driver_java_options("local[*]") == expected


def test_a_collector_the_user_names_is_kept() -> None:
    assert driver_java_options("local[2]", "-XX:+UseG1GC") == "-XX:+UseG1GC"
