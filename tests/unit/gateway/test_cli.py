from __future__ import annotations

import json
from pathlib import Path

import pytest

from pulsar_lookup_gateway.gateway.cli import main
from pulsar_lookup_gateway.lookup.topics import TopicName
from pulsar_lookup_gateway.tls.material import Pkcs12Keystore
from tests.processes import ROOT

DEMO = f"file:{ROOT / 'configs' / 'demo-cluster.json'}"
CONFIGS = sorted((ROOT / "configs").glob("*.conf"))


@pytest.mark.parametrize("conf", CONFIGS, ids=[c.name for c in CONFIGS])
def test_check_config_accepts_every_shipped_config(
    conf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The shipped configs name files of the host they are written for
    # (/etc/pulsar-lookup-gateway/...).
    assert main(["check-config", "--config", str(conf), "--no-host-checks"]) == 0
    out = capsys.readouterr().out
    assert "ADDRESS" in out and "LISTENER" in out
    # and with --strict, as a CI job would check a config: every key is one the gateway uses
    assert main(["check-config", "--config", str(conf), "--no-host-checks", "--strict"]) == 0


def test_check_config_prints_the_socket_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = tmp_path / "g.conf"
    conf.write_text(
        "metadataStoreUrl=file:/tmp/x.json\n"
        "advertisedListeners=internal:pulsar://10.0.0.1:6650,external:pulsar+ssl://gw:6651\n"
        "bindAddresses=external:pulsar+ssl://127.0.0.1:6651\n"
        "tlsCertificateFilePath=/c\ntlsKeyFilePath=/k\nwebServicePort=\n"
    )
    assert main(["check-config", "--config", str(conf), "--no-host-checks"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert ["0.0.0.0:6650", "pulsar", "-", "no", "brokerServicePort"] in rows
    assert rows[-1][:5] == ["127.0.0.1:6651", "pulsar+ssl", "external", "yes", "entry"]


def test_check_config_prints_the_client_routes_only_when_set(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = tmp_path / "g.conf"
    plain = (
        "metadataStoreUrl=file:/tmp/x.json\n"
        "advertisedListeners=internal:pulsar://10.0.0.1:6650,office:pulsar://gw:6650,"
        "partner:pulsar+ssl://p:6651\n"
        "bindAddresses=office:pulsar://127.0.0.1:6652\n"
    )
    conf.write_text(plain)
    assert main(["check-config", "--config", str(conf), "--no-host-checks"]) == 0
    out = capsys.readouterr().out
    assert "trusted proxies" not in out and "SNI NAMES" not in out
    conf.write_text(
        plain + "listener.office.clientCidrs=10.0.0.0/8, 192.168.0.0/16\n"
        "listener.office.proxyProtocol=true\n"
        "listener.partner.sniHostnames=lookup.partner.example.com,*.partner.example.com\n"
        "trustedProxyCidrs=127.0.0.1/32,10.9.0.0/16\n"
    )
    assert main(["check-config", "--config", str(conf), "--no-host-checks"]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines()]
    assert ["LISTENER", "SNI", "NAMES", "CLIENT", "CIDRS", "PROXY", "PROTOCOL"] in rows
    assert ["office", "-", "10.0.0.0/8,192.168.0.0/16", "yes"] in rows
    partner = "lookup.partner.example.com,*.partner.example.com"
    assert ["partner", partner, "-", "no"] in rows
    assert ["trusted", "proxies", "127.0.0.1/32", "10.9.0.0/16"] in rows
    assert not any(row[:1] == ["internal"] and len(row) == 4 for row in rows)


def test_check_config_shows_trusted_proxies_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """trustedProxyCidrs without any listener rule (forwarded headers only feed the logs)."""
    conf = tmp_path / "g.conf"
    conf.write_text(
        "metadataStoreUrl=file:/tmp/x.json\nadvertisedListeners=internal:pulsar://h:6650\n"
        "trustedProxyCidrs=10.9.0.0/16\n"
    )
    assert main(["check-config", "--config", str(conf), "--no-host-checks"]) == 0
    out = capsys.readouterr().out
    assert "trusted proxies    10.9.0.0/16" in out
    assert "SNI NAMES" not in out


def test_check_config_prints_every_error_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = tmp_path / "bad.conf"
    conf.write_text("advertisedListeners=x:ftp://h:1,pulsar://h:2\nwebServicePort=no\n")
    assert main(["check-config", "--config", str(conf), "--no-host-checks"]) == 2
    err = capsys.readouterr().err
    assert "4 problem(s)" in err
    for fragment in ("metadataStoreUrl", "unknown scheme 'ftp'", "no listener name", "integer"):
        assert fragment in err


def test_a_config_that_opens_no_socket_is_refused_with_a_hint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = tmp_path / "typo.conf"
    conf.write_text(
        "metadataStoreUrl=file:/tmp/x.json\nadvertisedListeners=internal:pulsar://h:6650\n"
        "bindAdresses=internal:pulsar://127.0.0.1:6650\nbrokerServicePort=\nwebServicePort=\n"
    )
    assert main(["check-config", "--config", str(conf)]) == 2
    err = capsys.readouterr().err
    assert "2 problem(s)" in err
    assert "bindAddresses: no socket would open" in err
    # The misspelt key is an error beside the problem it causes, with the key it misspells.
    assert f"bindAdresses ({conf}:3): not a key the gateway uses, one edit from " in err
    assert "did you mean 'bindAddresses'?" in err


def test_check_config_strict_refuses_keys_that_are_only_warned_of_otherwise(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "metadataStoreUrl=file:/tmp/x.json\nadvertisedListeners=internal:pulsar://h:6650\n"
        "managedLedgerDefaultEnsembleSize=2\n"
    )
    assert main(["check-config", "--config", str(conf), "--no-host-checks"]) == 0
    assert "warning: managedLedgerDefaultEnsembleSize" in capsys.readouterr().err
    assert main(["check-config", "--config", str(conf), "--no-host-checks", "--strict"]) == 2
    err = capsys.readouterr().err
    assert "1 problem(s)" in err
    assert f"managedLedgerDefaultEnsembleSize ({conf}:3): not a key the gateway uses" in err


def lookup_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, object]]:
    code = main(["lookup", *args, "--metadata", DEMO])
    return code, json.loads(capsys.readouterr().out)


def test_lookup_on_the_demo_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    code, answer = lookup_json(capsys, "orders-partition-1", "--listener", "external")
    assert code == 0
    assert answer["response"] == "connect" and answer["authoritative"] is True
    assert answer["brokerServiceUrlTls"] == "pulsar+ssl://broker-1.pulsar.example.com:6651"
    assert answer["listenerChosenBy"] == "explicit"

    code, answer = lookup_json(capsys, "orders-partition-1")
    assert answer["brokerServiceUrl"] == "pulsar://10.0.0.1:6650"
    assert answer["listenerChosenBy"] == "internal"
    # an absent URL is "", as in the HTTP answer's LookupData, never null
    assert answer["brokerServiceUrlTls"] == "" and answer["httpUrlTls"] == ""

    code, answer = lookup_json(capsys, "orders")
    assert answer["partitions"] == 4
    code, answer = lookup_json(capsys, "orders-partition-2")  # a partition is not partitioned
    assert answer["partitions"] == 0


def test_the_demo_cluster_has_an_unowned_bundle(capsys: pytest.CaptureFixture[str]) -> None:
    # orders-partition-3 hashes into 0xc0000000_0xffffffff, which no broker owns.
    assert TopicName.parse("orders-partition-3").full.endswith("orders-partition-3")
    code, answer = lookup_json(capsys, "orders-partition-3", "--listener", "external")
    assert code == 0
    assert (answer["response"], answer["authoritative"]) == ("redirect", False)
    assert answer["brokerId"] == "broker-1.pulsar.svc:8080"  # the leader


@pytest.mark.parametrize(
    ("topic", "listener", "error"),
    [
        ("a/b", None, "InvalidTopicName"),
        ("persistent://nope/ns/t", None, "TopicNotFound"),
        ("orders-partition-1", "zone-x", "ServiceNotReady"),
    ],
)
def test_lookup_failures_exit_1_with_the_pulsar_error(
    capsys: pytest.CaptureFixture[str], topic: str, listener: str | None, error: str
) -> None:
    args = [topic] + (["--listener", listener] if listener else [])
    code, answer = lookup_json(capsys, *args)
    assert (code, answer["response"], answer["error"]) == (1, "failed", error)


def test_lookup_with_a_bad_metadata_url_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["lookup", "t", "--metadata", "file:/does/not/exist.json"]) == 2
    assert "cannot read snapshot" in capsys.readouterr().err


def test_certs_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "certs"
    assert (
        main(["certs", "--out", str(out), "--host", "gw.internal", "--p12-password", "pw12"]) == 0
    )
    printed = capsys.readouterr().out
    assert "server.p12 password: pw12" in printed
    assert f"tlsCertificateFilePath={out / 'server.crt'}" in printed
    assert Pkcs12Keystore(out / "server.p12", "pw12").load().subject == "CN=gw.internal"
    assert main(["certs", "--out", str(out)]) == 1
    assert "already exist" in capsys.readouterr().err


def test_lookup_protocol_on_the_demo_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    code, answer = lookup_json(capsys, "orders-partition-1", "--protocol", "kafka", "--listener",
                               "external")  # fmt: skip
    assert (code, answer["response"], answer["brokerId"]) == (
        0,
        "connect",
        "broker-1.pulsar.svc:8080",
    )
    assert answer["endpoints"] == [
        {"url": "SASL_SSL://broker-1.pulsar.example.com:9093", "scheme": "SASL_SSL",
         "host": "broker-1.pulsar.example.com", "port": 9093, "listener": "external",
         "securityProtocol": "SASL_SSL", "tls": True}
    ]  # fmt: skip
    code, answer = lookup_json(capsys, "orders-partition-1", "--protocol", "grpc")
    assert code == 0 and answer["listenerChosenBy"] == "internal"
    assert [e["url"] for e in answer["endpoints"]] == [  # type: ignore[attr-defined]
        "grpc://broker-1.pulsar.example.com:50051",
        "grpc+tls://broker-1.pulsar.example.com:50052",
    ]
    # Unowned: reported (exit 1); the command only reads the metadata.
    code, answer = lookup_json(capsys, "orders-partition-3", "--protocol", "kafka")
    assert (code, answer["response"], answer["endpoints"]) == (1, "unowned", [])
    code, answer = lookup_json(capsys, "orders-partition-1", "--protocol", "mqtt")
    assert (code, answer["response"], answer["error"]) == (1, "failed", "ServiceNotReady")
    assert "the protocols it advertises: grpc, kafka" in str(answer["message"])
    assert main(["lookup", "t", "--protocol", "a/b", "--metadata", DEMO]) == 2
    assert "--protocol" in capsys.readouterr().err


def test_check_config_reports_the_issues_typos_in_one_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 44's first run: a misspelt per-listener key, a listener not declared in
    bindAddresses, a port clash and two keys one edit from gateway keys, all at once."""
    conf = tmp_path / "typos.conf"
    conf.write_text(
        "metadataStoreUrl=file:/tmp/x.json\n"
        "advertisedListeners=internal:pulsar://10.0.0.1:6650,external:pulsar://gw:6650\n"
        "bindAddresses=internal:pulsar://127.0.0.1:16650,ghost:pulsar://127.0.0.1:16651,"
        "external:pulsar://127.0.0.1:16650\n"
        "listener.external.clientCidr=10.0.0.0/8\nbindAdresses=x\nadvertisedListener=y\n"
    )
    assert main(["check-config", "--config", str(conf), "--no-host-checks"]) == 2
    err = capsys.readouterr().err
    assert "5 problem(s)" in err
    for fragment in (
        "did you mean 'clientCidrs'?", "did you mean 'bindAddresses'?",
        "did you mean 'advertisedListeners'?", "listener 'ghost' is not declared",
        "already binds (127.0.0.1:16650)",
    ):  # fmt: skip
        assert fragment in err
