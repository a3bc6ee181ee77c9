"""The one rule of what a metadata write may change (lookup.write_keys), read by the answer
memo and the ownership watch alike."""

from __future__ import annotations

import pytest

from pulsar_lookup_gateway.lookup.view import EVERY_PATH
from pulsar_lookup_gateway.lookup.write_keys import (
    ALL,
    BROKERS,
    LEADER,
    Key,
    bundle_lower,
    keys_of_path,
)

BUNDLE = "0x00000000_0x40000000"


@pytest.mark.parametrize(
    ("path", "keys"),
    [
        (f"/namespace/public/default/{BUNDLE}", [("bundle", "public", "default", BUNDLE)]),
        ("/namespace/public/default/", [("children", "public", "default")]),
        ("/namespace/public/default/x/y", [ALL]),
        ("/namespace//default/x", [ALL]),
        ("/namespace/public", [ALL]),
        ("/service_unit_state/public/default/b", [("bundle", "public", "default", "b")]),
        ("/admin/policies/public/default", [("ns", "public", "default")]),
        ("/admin/local-policies/public/default", [("ns", "public", "default")]),
        ("/admin/policies/public", [("tenant", "public")]),
        ("/admin/policies/public/", [("tenant", "public")]),
        ("/admin/policies/", [ALL]),
        ("/admin/", [ALL]),
        ("/admin/clusters/east", [ALL]),
        ("/admin/partitioned-topics/public/default/persistent/t",
         [("topics", "public", "default")]),
        ("/admin/flags/x", []),
        ("/managed-ledgers/public/default/persistent/", [("topics", "public", "default")]),
        ("/managed-ledgers/public/default/persistent/t", [("topics", "public", "default")]),
        ("/loadbalance/brokers/b1:8080", [("broker", "b1:8080")]),
        ("/loadbalance/brokers/", [BROKERS]),
        ("/loadbalance/leader", [LEADER]),
        ("/loadbalance/", [LEADER]),
        ("/loadbalance/bundle-data/public/default/x", []),
        ("/schemas/public/default/t", []),
        ("//", [ALL]),
        (EVERY_PATH, [ALL]),
        ("/somewhere/else", [ALL]),
    ],
)  # fmt: skip
def test_keys_of_a_written_path(path: str, keys: list[Key]) -> None:
    assert keys_of_path(path) == keys


def test_bundle_lower_reads_a_bundle_name() -> None:
    assert bundle_lower("0x40000000_0x80000000") == 0x40000000
    for name in ("", "0x4000_0x8000", "40000000xx_0x80000000", "0xzzzzzzzz_0x80000000"):
        assert bundle_lower(name) is None, name
