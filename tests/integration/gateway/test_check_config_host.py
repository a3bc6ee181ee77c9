"""`check-config` reports what would stop `run` on this host: TLS material that cannot be read
or parsed, and sockets that cannot be bound. Real files, real sockets on loopback, the real
command as a process."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from pulsar_lookup_gateway.gateway.startup import bind_problems
from pulsar_lookup_gateway.listeners.endpoints.addresses import Endpoint, Scheme
from pulsar_lookup_gateway.listeners.endpoints.socket_table import SocketSpec
from pulsar_lookup_gateway.metadata_store.embedded_zookeeper import free_port
from pulsar_lookup_gateway.tls.devcerts import DevCerts, key_pem, write_dev_certs
from tests.processes import DEMO, EXE

KEY_PASSWORD = "s3cret-key-password"  # the encrypted key's password
WRONG_PASSWORD = "not-the-password-42"  # what the config says; must never be printed
P12_WRONG = "p12-wrong-password-77"
# TEST-NET-1 (RFC 5737): no interface of this host has it, so binding it fails.
FOREIGN_HOST = "192.0.2.1"


@pytest.fixture
def certs(tmp_path: Path) -> DevCerts:
    return write_dev_certs(tmp_path / "certs")


@pytest.fixture
def occupied() -> Iterator[int]:
    """A loopback port some other process (this test) already listens on."""
    with socket.create_server(("127.0.0.1", 0)) as sock:
        yield sock.getsockname()[1]


def check_config(conf: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [EXE, "check-config", "--config", str(conf), *extra],
        capture_output=True,
        text=True,
        timeout=60,
    )


def write(path: Path, text: str) -> Path:
    path.write_text(f"metadataStoreUrl=file:{DEMO}\nbrokerServicePort=\nwebServicePort=\n{text}")
    return path


def test_a_config_this_host_can_run_passes(tmp_path: Path, certs: DevCerts) -> None:
    conf = write(
        tmp_path / "ok.conf",
        "advertisedListeners=internal:pulsar://127.0.0.1:6650\n"
        f"bindAddresses=internal:pulsar://127.0.0.1:{free_port()},"
        "internal:pulsar+ssl://127.0.0.1:0,internal:https://127.0.0.1:0\n"
        f"tlsCertificateFilePath={certs.server_cert}\ntlsKeyFilePath={certs.server_key}\n",
    )
    result = check_config(conf)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert "pulsar+ssl" in result.stdout


def test_every_problem_that_would_stop_run_is_reported_at_once(
    tmp_path: Path, certs: DevCerts, occupied: int
) -> None:
    garbage = tmp_path / "garbage.key"
    garbage.write_text("-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n")
    encrypted = tmp_path / "encrypted.key"
    key = serialization.load_pem_private_key(certs.server_key.read_bytes(), None)
    encrypted.write_bytes(key_pem(key, KEY_PASSWORD))  # type: ignore[arg-type]
    missing = tmp_path / "missing.crt"
    conf = write(
        tmp_path / "bad.conf",
        "advertisedListeners=a:pulsar://h:1,b:pulsar://h:2,c:pulsar://h:3,d:pulsar://h:4,"
        "e:pulsar://h:5,f:pulsar://h:6\n"
        "bindAddresses=a:pulsar+ssl://127.0.0.1:0,b:pulsar+ssl://127.0.0.1:0,"
        "c:pulsar+ssl://127.0.0.1:0,d:https://127.0.0.1:0,"
        f"e:pulsar://127.0.0.1:{occupied},f:pulsar://{FOREIGN_HOST}:6650,f:http://127.0.0.1:0\n"
        f"listener.a.tlsCertificateFilePath={missing}\n"
        f"listener.a.tlsKeyFilePath={certs.server_key}\n"
        f"listener.b.tlsCertificateFilePath={certs.server_cert}\n"
        f"listener.b.tlsKeyFilePath={garbage}\n"
        f"listener.c.tlsCertificateFilePath={certs.server_cert}\n"
        f"listener.c.tlsKeyFilePath={encrypted}\n"
        f"listener.c.tlsKeyPassword={WRONG_PASSWORD}\n"
        "listener.d.tlsKeyStoreType=PKCS12\n"
        f"listener.d.tlsKeyStore={certs.server_p12}\n"
        f"listener.d.tlsKeyStorePassword={P12_WRONG}\n",
    )
    result = check_config(conf)
    print(result.stderr)
    assert result.returncode == 1
    assert "b:pulsar+ssl://127.0.0.1:0" in result.stdout  # the socket table is still printed
    problems = [line for line in result.stderr.splitlines() if line.startswith("  - ")]
    assert len(problems) == 6, result.stderr
    assert "6 problem(s) on this host would stop `run`" in result.stderr
    expected = {
        "listener 'a'": ["listener.a.tlsCertificateFilePath", str(missing)],
        "listener 'b'": ["listener.b.tlsKeyFilePath", str(garbage)],
        "listener 'c'": ["listener.c.tlsKeyPassword"],
        "listener 'd'": ["listener.d.tlsKeyStorePassword"],
        f"entry 'e:pulsar://127.0.0.1:{occupied}'": ["bindAddresses", "in use"],
        f"entry 'f:pulsar://{FOREIGN_HOST}:6650'": ["bindAddresses", "assign requested address"],
    }
    for who, fragments in expected.items():
        line = next((p for p in problems if who in p), None)
        assert line is not None, f"no problem names {who}: {result.stderr}"
        for fragment in fragments:
            assert fragment in line
    for secret in (WRONG_PASSWORD, KEY_PASSWORD, P12_WRONG, certs.p12_password):
        assert secret not in result.stderr + result.stdout


def test_no_host_checks_validates_the_config_only(tmp_path: Path, occupied: int) -> None:
    conf = write(
        tmp_path / "elsewhere.conf",
        "advertisedListeners=a:pulsar://h:1\n"
        f"bindAddresses=a:pulsar+ssl://127.0.0.1:{occupied}\n"
        f"tlsCertificateFilePath={tmp_path / 'nope.crt'}\ntlsKeyFilePath={tmp_path / 'nope.key'}\n",
    )
    assert check_config(conf).returncode == 1
    result = check_config(conf, "--no-host-checks")
    assert (result.returncode, result.stderr) == (0, "")


def test_the_sockets_tried_are_closed_again() -> None:
    port = free_port()
    specs = [
        SocketSpec(Endpoint(Scheme.PULSAR, "127.0.0.1", port), "a", "entry 'a'"),
        SocketSpec(Endpoint(Scheme.HTTP, "127.0.0.1", 0), "a", "entry 'b'"),
        SocketSpec(Endpoint(Scheme.HTTP, "127.0.0.1", 0), "a", "entry 'c'"),
    ]
    assert bind_problems(specs) == []
    # Closed: the port is free for `run` (or anyone) right after the check.
    with socket.create_server(("127.0.0.1", port)):
        pass


def test_two_entries_that_resolve_to_one_address_cannot_both_bind() -> None:
    port = free_port()
    specs = [
        SocketSpec(Endpoint(Scheme.PULSAR, "127.0.0.1", port), "a", "entry 'a'"),
        SocketSpec(Endpoint(Scheme.PULSAR, "localhost", port), "b", "entry 'b'"),
    ]
    problems = bind_problems(specs)
    assert len(problems) == 1 and problems[0].startswith("bindAddresses: entry 'b'"), problems


def test_a_host_that_does_not_resolve_is_named() -> None:
    spec = SocketSpec(Endpoint(Scheme.HTTP, "gateway.invalid", 0), None, "webServicePort")
    problems = bind_problems([spec])
    assert len(problems) == 1 and problems[0].startswith("webServicePort: cannot resolve"), problems


def test_a_config_with_many_problems_gets_them_all_in_one_run(
    tmp_path: Path, certs: DevCerts, occupied: int
) -> None:
    """Problems of single keys, of the rules between keys and of this host, all at once: the
    host checks run on what validated, not only once the config has no problem left."""
    conf = tmp_path / "many.conf"
    conf.write_text(
        f"metadataStoreUrl=file:{tmp_path / 'no-snapshot.json'}\n"
        "advertisedListeners=internal:pulsar://h:1,external:pulsar+ssl://h:2,"
        "external:gopher://h:3\n"
        "internalListenerName=nobody\n"
        "bindAddresses=internal:pulsar://127.0.0.999:6650,"
        f"internal:pulsar://127.0.0.1:{occupied},external:ftp://127.0.0.1:1,"
        "ghost:http://127.0.0.1:0,external:pulsar+ssl://127.0.0.1:0\n"
        "brokerServicePort=\nwebServicePort=x\nmaxConcurrentLookupRequest=-5\n"
        f"tlsCertificateFilePath={tmp_path / 'missing.crt'}\ntlsKeyFilePath={certs.server_key}\n"
        "authorizationEnabled=true\n"
    )
    result = check_config(conf)
    assert result.returncode == 2, result.stderr
    config_part, _, host_part = result.stderr.partition("on this host would stop `run`:")
    assert config_part.count("problem(s)") == 2  # two lists: the config's, then the host's
    assert "7 problem(s):" in config_part and config_part.endswith("4 problem(s) ")
    expected_config = [
        ("advertisedListeners", "entry 'external:gopher://h:3'", "unknown scheme"),
        ("bindAddresses", "entry 'external:ftp://127.0.0.1:1'", "unknown scheme"),
        ("webServicePort", "(got 'x')", "integer"),
        ("maxConcurrentLookupRequest", "(got '-5')", "greater than"),
        ("internalListenerName", "'nobody'", "not declared"),
        ("bindAddresses", "entry 'ghost:http://127.0.0.1:0'", "listener 'ghost' is not declared"),
        ("authorizationEnabled", "authenticationEnabled=true", "authorization"),
    ]
    expected_host = [
        ("listener 'external'", f"tlsCertificateFilePath {tmp_path / 'missing.crt'}", "read"),
        ("metadataStoreUrl", "no-snapshot.json", "cannot read"),
        ("bindAddresses", "entry 'internal:pulsar://127.0.0.999:6650'", "cannot resolve"),
        ("bindAddresses", f"entry 'internal:pulsar://127.0.0.1:{occupied}'", "in use"),
    ]
    for part, expected in ((config_part, expected_config), (host_part, expected_host)):
        lines = [line for line in part.splitlines() if line.startswith("  - ")]
        assert len(lines) == len(expected), part
        for key, entry, reason in expected:
            assert any(
                line.startswith(f"  - {key}") and entry in line and reason in line for line in lines
            ), f"no problem '{key} ... {entry} ... {reason}' in:\n{part}"


def test_a_misspelt_per_listener_key_hides_neither_rules_nor_host_checks(
    tmp_path: Path, occupied: int
) -> None:
    """Issue 44's config: `listener.external.clientCidr` (for clientCidrs), a listener not
    declared, a port clash, two keys one edit from a gateway key, and a port this host has
    taken: every one in the first run."""
    conf = write(
        tmp_path / "typos.conf",
        "advertisedListeners=internal:pulsar://10.0.0.1:6650,external:pulsar://gw:6650\n"
        f"bindAddresses=internal:pulsar://127.0.0.1:{occupied},"
        "ghost:pulsar://127.0.0.1:0,external:http://127.0.0.1:0,external:pulsar://127.0.0.1:0,"
        "internal:http://127.0.0.1:0\n"
        "listener.external.clientCidr=10.0.0.0/8\nbindAdresses=x\nadvertisedListener=y\n"
        "managedLedgerDefaultEnsembleSize=2\n",
    )
    result = check_config(conf)
    assert result.returncode == 2, result.stderr
    config_part, _, host_part = result.stderr.partition("on this host would stop `run`:")
    assert "warning: managedLedgerDefaultEnsembleSize" in config_part  # another broker key
    assert "4 problem(s):" in config_part
    for fragment in (
        "listener.external.clientCidr", "did you mean 'clientCidrs'?",
        "bindAdresses", "did you mean 'bindAddresses'?",
        "advertisedListener ", "did you mean 'advertisedListeners'?",
        "listener 'ghost' is not declared",
    ):  # fmt: skip
        assert fragment in config_part, config_part
    assert f"entry 'internal:pulsar://127.0.0.1:{occupied}'" in host_part
    assert "in use" in host_part
    strict = check_config(conf, "--strict", "--no-host-checks")
    assert strict.returncode == 2
    assert "5 problem(s):" in strict.stderr
    assert "managedLedgerDefaultEnsembleSize" in strict.stderr
    assert "warning:" not in strict.stderr
