"""`demo move|unload|stop-broker` and `seed --replace` against a real ZooKeeper: what they
write is what Pulsar's brokers write, so the gateway's lookups (the `lookup` command here, a
running gateway's watch in test_demo_watch) answer the new owner."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kazoo.client import KazooClient

from pulsar_lookup_gateway.gateway.cli import main
from pulsar_lookup_gateway.metadata_store.admin import dump
from pulsar_lookup_gateway.metadata_store.embedded_zookeeper import EmbeddedZooKeeper
from pulsar_lookup_gateway.metadata_store.snapshot import read_snapshot, write_snapshot
from tests.gateways import config_from, running
from tests.processes import DEMO

pytestmark = pytest.mark.zookeeper

TOPIC = "orders-partition-1"  # public/default 0x00000000_0x40000000, broker-1's in the demo
BUNDLE = "/namespace/public/default/0x00000000_0x40000000"
B1, B2 = "broker-1.pulsar.svc:8080", "broker-2.pulsar.svc:8080"
WAIT = 10.0


@pytest.fixture
def url(zookeeper: EmbeddedZooKeeper, zk_chroot: str, capsys: pytest.CaptureFixture[str]) -> str:
    metadata = f"zk:{zookeeper.connect_string}{zk_chroot}"
    assert main(["seed", "--metadata", metadata, "--snapshot", str(DEMO)]) == 0
    capsys.readouterr()
    return metadata


def lookup(capsys: pytest.CaptureFixture[str], url: str) -> dict[str, Any]:
    main(["lookup", TOPIC, "--listener", "internal", "--metadata", url])
    answer: dict[str, Any] = json.loads(capsys.readouterr().out)
    return answer


def demo(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["demo", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_move_writes_what_the_new_owner_would(
    url: str, zk_admin: KazooClient, capsys: pytest.CaptureFixture[str]
) -> None:
    assert lookup(capsys, url)["brokerServiceUrl"] == "pulsar://10.0.0.1:6650"
    code, out, _ = demo(capsys, "move", TOPIC, "broker-2", "--metadata", url)
    assert code == 0
    assert out.strip() == f"bundle public/default/0x00000000_0x40000000 of {TOPIC}: {B1} -> {B2}"
    answer = lookup(capsys, url)
    assert (answer["response"], answer["brokerId"]) == ("connect", B2)
    assert answer["brokerServiceUrl"] == "pulsar://10.0.0.2:6650"
    nodes = dump(zk_admin)
    demo_nodes = read_snapshot(DEMO)
    broker = demo_nodes[f"/loadbalance/brokers/{B2}"]
    assert nodes[BUNDLE] == {
        "nativeUrl": broker["pulsarServiceUrl"],
        "httpUrl": broker["webServiceUrl"],
        "disabled": False,
        "advertisedListeners": broker["advertisedListeners"],
        "brokerId": B2,
    }
    # the load reports follow: the bundle left broker-1's list and joined broker-2's
    assert "public/default/0x00000000_0x40000000" in nodes[f"/loadbalance/brokers/{B2}"]["bundles"]
    assert (
        "public/default/0x00000000_0x40000000"
        not in (nodes[f"/loadbalance/brokers/{B1}"]["bundles"])
    )
    code, _, err = demo(capsys, "move", TOPIC, "broker-9", "--metadata", url)
    assert code == 1 and "broker 'broker-9' is not registered (registered: " in err


def test_unload_leaves_the_bundle_to_nobody(
    url: str, zk_admin: KazooClient, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = demo(capsys, "unload", TOPIC, "--metadata", url)
    assert code == 0 and f"unloaded from {B1}" in out
    assert not zk_admin.exists(BUNDLE)
    answer = lookup(capsys, url)
    assert (answer["response"], answer["authoritative"]) == ("redirect", False)
    code, _, err = demo(capsys, "unload", TOPIC, "--metadata", url)
    assert code == 1 and "nobody owns bundle public/default/0x00000000_0x40000000" in err


def test_stop_broker_takes_its_session_s_nodes(
    url: str, zk_admin: KazooClient, capsys: pytest.CaptureFixture[str]
) -> None:
    before = dump(zk_admin)
    owned = [p for p, d in before.items() if p.startswith("/namespace/") and d["brokerId"] == B1]
    assert owned  # broker-1 owns bundles in the demo, and leads
    code, out, _ = demo(capsys, "stop-broker", B1, "--metadata", url)
    assert code == 0 and f"{len(owned)} bundle(s) unowned" in out
    after = dump(zk_admin)
    assert f"/loadbalance/brokers/{B1}" not in after
    assert not any(path in after for path in owned)
    assert after["/loadbalance/leader"]["brokerId"] == B2  # the next broker took the lead
    assert lookup(capsys, url)["brokerId"] != B1


def test_seed_replace_deletes_what_the_snapshot_no_longer_has(
    url: str, zk_admin: KazooClient, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes = read_snapshot(DEMO)
    del nodes[BUNDLE]
    changed = tmp_path / "changed.json"
    write_snapshot(changed, nodes)
    # without --replace, seed only writes: the bundle stays owned
    assert main(["seed", "--metadata", url, "--snapshot", str(changed)]) == 0
    assert zk_admin.exists(BUNDLE)
    capsys.readouterr()
    assert main(["seed", "--metadata", url, "--snapshot", str(changed), "--replace"]) == 0
    out = capsys.readouterr().out
    assert f"deleted 1 znodes the snapshot does not have\n  {BUNDLE}\n" in out
    assert dump(zk_admin) == nodes
    assert lookup(capsys, url)["response"] == "redirect"
    assert main(["seed", "--metadata", url, "--snapshot", str(DEMO), "--replace"]) == 0
    assert "deleted 0 znodes" in capsys.readouterr().out
    assert dump(zk_admin) == read_snapshot(DEMO)


async def test_the_watch_walkthrough_sees_each_demo_command(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/protocols/ownership-watch.md's walkthrough: a gateway on the demo's ZooKeeper,
    a watch on a topic, then `demo move`, `demo unload`, `demo move` back and `demo
    stop-broker`: each change is pushed."""
    topic = f"persistent://public/default/{TOPIC}"
    config = config_from(
        f"metadataStoreUrl={url}\n"
        "advertisedListeners=internal:pulsar://127.0.0.1:6650,internal:http://127.0.0.1:8080\n"
        "bindAddresses=internal:http://127.0.0.1:0\nbrokerServicePort=\nwebServicePort=\n"
    )

    async def run(*args: str) -> int:
        return await asyncio.to_thread(main, ["demo", *args, "--metadata", url])

    async with (
        running(config) as gateway,
        aiohttp.ClientSession() as session,
        session.ws_connect(
            f"http://127.0.0.1:{gateway.port_of('internal', 'http')}/lookup/v2/watch"
        ) as ws,
    ):

        async def about_topic() -> dict[str, Any]:
            while True:
                message = await asyncio.wait_for(ws.receive(), WAIT)
                assert message.type is aiohttp.WSMsgType.TEXT, message
                body: dict[str, Any] = json.loads(message.data)
                if body.get("topic") == topic:
                    return body

        await ws.send_str(json.dumps({"type": "subscribe", "topics": [topic]}))
        first = await about_topic()
        assert (first["type"], first["brokerUrl"]) == ("owner", "pulsar://10.0.0.1:6650")
        assert await run("move", TOPIC, "broker-2") == 0
        moved = await about_topic()
        assert (moved["type"], moved["brokerUrl"]) == ("owner", "pulsar://10.0.0.2:6650")
        assert moved["generation"] > first["generation"]
        assert await run("unload", TOPIC) == 0
        assert (await about_topic())["type"] == "unowned"
        assert await run("move", TOPIC, "broker-3") == 0
        assert (await about_topic())["brokerUrl"] == "pulsar://10.0.0.3:6650"
        assert await run("stop-broker", "broker-3") == 0
        assert (await about_topic())["type"] == "unowned"
    capsys.readouterr()


def test_seed_replace_leaves_no_empty_parent_behind(
    url: str, zk_admin: KazooClient, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A snapshot without any ownership node of acme/payments: its bundles are deleted, and
    the namespace's ownership parent with them, so a dump is the snapshot again."""
    nodes = {
        path: data
        for path, data in read_snapshot(DEMO).items()
        if not path.startswith("/namespace/acme/")
    }
    changed = tmp_path / "no-acme-owners.json"
    write_snapshot(changed, nodes)
    assert main(["seed", "--metadata", url, "--snapshot", str(changed), "--replace"]) == 0
    assert "deleted 5 znodes" in capsys.readouterr().out
    assert not zk_admin.exists("/namespace/acme")
    assert dump(zk_admin) == nodes
