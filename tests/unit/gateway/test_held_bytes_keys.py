"""The byte budget's keys (heldBytesMax, heldBytesMaxUnread, heldBytesMaxPerClient): read,
checked against each other, accepted by check-config, and divided among workers."""

from __future__ import annotations

from pathlib import Path

import pytest

from pulsar_lookup_gateway.gateway import factories
from pulsar_lookup_gateway.gateway.cli import main
from pulsar_lookup_gateway.gateway.workers import WORKERS_ENV
from pulsar_lookup_gateway.listeners.config.conf_file import parse_properties
from pulsar_lookup_gateway.listeners.config.model import ConfigError, GatewayConfig, validate_raw
from pulsar_lookup_gateway.serving.held_bytes import UNREAD, WATCH
from tests.processes import ROOT

MIB = 1024 * 1024
BASE = f"metadataStoreUrl=file:{ROOT / 'configs' / 'demo-cluster.json'}\n"


def config(text: str) -> GatewayConfig:
    return validate_raw(parse_properties(BASE + text, "test.conf")).config


def test_the_defaults_give_strangers_64_mib_and_watches_128(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(WORKERS_ENV, raising=False)
    budget = factories.held_bytes(config(""))
    assert budget.total == 192 * MIB and budget.per_owner == 16 * MIB
    assert budget.pools[UNREAD].limit == 64 * MIB
    assert budget.pools[WATCH].limit == 128 * MIB


def test_the_keys_set_the_shares(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(WORKERS_ENV, raising=False)
    keys = "heldBytesMax=400000000\nheldBytesMaxUnread=100000000\nheldBytesMaxPerClient=8000000\n"
    budget = factories.held_bytes(config(keys))
    assert (budget.total, budget.per_owner) == (400_000_000, 8_000_000)
    assert budget.pools[UNREAD].limit == 100_000_000
    assert budget.pools[WATCH].limit == 300_000_000


def test_workers_divide_the_total_the_process_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    """`run --workers 4`: each worker holds a quarter, so the process holds the configured
    total in all; one client's bound stays whole unless a worker's total is smaller."""
    monkeypatch.setenv(WORKERS_ENV, "4")
    budget = factories.held_bytes(config(""))
    assert budget.total == 48 * MIB and budget.per_owner == 16 * MIB
    assert budget.pools[UNREAD].limit == 16 * MIB and budget.pools[WATCH].limit == 32 * MIB
    monkeypatch.setenv(WORKERS_ENV, "16")
    assert factories.held_bytes(config("")).per_owner == 12 * MIB


@pytest.mark.parametrize(
    ("keys", "key", "says"),
    [
        ("heldBytesMax=67108864\n", "heldBytesMaxUnread", "less than heldBytesMax"),
        (f"heldBytesMax={32 * MIB}\n", "heldBytesMaxUnread", "the rest is what watch"),
        (
            f"heldBytesMax={32 * MIB}\nheldBytesMaxUnread={8 * MIB}\n"
            f"heldBytesMaxPerClient={33 * MIB}\n",
            "heldBytesMaxPerClient",
            "at most heldBytesMax",
        ),
        ("heldBytesMaxUnread=1000\n", "heldBytesMaxUnread", "greater than or equal"),
    ],
)
def test_shares_that_do_not_add_up_are_problems(keys: str, key: str, says: str) -> None:
    with pytest.raises(ConfigError) as info:
        config(keys)
    found = [str(problem) for problem in info.value.problems]
    assert len(found) == 1 and key in found[0] and says in found[0], found


def test_check_config_accepts_the_keys(tmp_path: Path) -> None:
    conf = tmp_path / "gateway.conf"
    conf.write_text(
        BASE + "advertisedListeners=internal:pulsar://127.0.0.1:6650\n"
        "bindAddresses=internal:pulsar://127.0.0.1:6650\nbrokerServicePort=\nwebServicePort=\n"
        f"heldBytesMax={256 * MIB}\nheldBytesMaxUnread={96 * MIB}\n"
        f"heldBytesMaxPerClient={8 * MIB}\n"
    )
    assert main(["check-config", "--config", str(conf), "--no-host-checks", "--strict"]) == 0
