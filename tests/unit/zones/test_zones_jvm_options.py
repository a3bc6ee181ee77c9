"""The driver JVM's options for a local master (zones.spark.driver_java_options)."""

import os

import pytest

from pulsar_lookup_gateway.zones.spark import C2_THRESHOLD_SCALE, driver_java_options

SERIAL = "-XX:+UseSerialGC"
LATE_C2 = (
    f"-XX:Tier4InvocationThreshold={5000 * C2_THRESHOLD_SCALE} "
    f"-XX:Tier4MinInvocationThreshold={600 * C2_THRESHOLD_SCALE} "
    f"-XX:Tier4CompileThreshold={15000 * C2_THRESHOLD_SCALE} "
    f"-XX:Tier4BackEdgeThreshold={40000 * C2_THRESHOLD_SCALE}"
)


@pytest.mark.parametrize("master", ["local", "local[1]", "local[2]", "local[2,3]"])
def test_a_small_local_master_gets_the_serial_collector_and_late_c2(master: str) -> None:
    assert driver_java_options(master) == f"{SERIAL} {LATE_C2}"
    assert driver_java_options(master, "-Xmx1g") == f"-Xmx1g {SERIAL} {LATE_C2}"


@pytest.mark.parametrize("master", ["local[4]", "local[0]", "local-cluster[2,1,1024]", "yarn"])
def test_other_masters_keep_the_jvm_defaults(master: str) -> None:
    assert driver_java_options(master, "-Xmx1g") == "-Xmx1g"


def test_local_star_follows_the_cores() -> None:
    expected = f"{SERIAL} {LATE_C2}" if (os.cpu_count() or 1) <= 2 else ""
    assert driver_java_options("local[*]") == expected


def test_a_collector_the_user_names_is_kept() -> None:
    assert driver_java_options("local[2]", "-XX:+UseG1GC") == f"-XX:+UseG1GC {LATE_C2}"


@pytest.mark.parametrize(
    "given",
    ["-XX:TieredStopAtLevel=1", "-XX:Tier4InvocationThreshold=9", "-XX:CompileThresholdScaling=2",
     "-XX:-TieredCompilation"],
)  # fmt: skip
def test_compiler_thresholds_the_user_sets_are_kept(given: str) -> None:
    assert driver_java_options("local[2]", given) == f"{given} {SERIAL}"
