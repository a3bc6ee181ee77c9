"""The server session cache is off on every context that checks client certificates (a TLS 1.2
session ID would otherwise be resumed from it past a trust file rotation), and on the listening
context of a listener whose handshakes may be moved to one that checks them. No sockets."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from pulsar_lookup_gateway.tls import session_cache
from pulsar_lookup_gateway.tls.context import build_context
from pulsar_lookup_gateway.tls.devcerts import DevCA, certificate_pem, key_pem
from pulsar_lookup_gateway.tls.material import PemFiles, PemTrustFile
from pulsar_lookup_gateway.tls.reload import ListenerTls
from pulsar_lookup_gateway.tls.settings import TlsSettings

OFF, SERVER = 0x0, 0x2  # SSL_SESS_CACHE_OFF, SSL_SESS_CACHE_SERVER (OpenSSL's default)


@pytest.fixture(scope="module")
def ca() -> DevCA:
    return DevCA.create("session cache test CA")


@pytest.fixture
def files(tmp_path: Path, ca: DevCA) -> tuple[PemFiles, Path]:
    key, cert = ca.issue("server", ["127.0.0.1"])
    crt, pem_key, trust = tmp_path / "s.crt", tmp_path / "s.key", tmp_path / "ca.pem"
    crt.write_bytes(certificate_pem(cert))
    pem_key.write_bytes(key_pem(key, None))
    trust.write_bytes(certificate_pem(ca.certificate))
    return PemFiles(crt, pem_key), trust


def test_disable_turns_the_cache_off_and_reads_it_back() -> None:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.verify_mode = ssl.CERT_REQUIRED
    assert session_cache.cache_mode(context) == SERVER
    assert session_cache.disable(context) is None
    assert session_cache.cache_mode(context) == OFF
    assert context.session_stats()["number"] == 0


def test_what_is_not_a_context_is_refused_without_a_crash() -> None:
    assert session_cache.disable(object()) is not None  # type: ignore[arg-type]


def test_contexts_checking_client_certificates_cache_no_session(
    files: tuple[PemFiles, Path],
) -> None:
    identity, trust = files
    material, trust_pem = identity.load(), trust.read_text()
    for required in (False, True):
        settings = TlsSettings(
            certificate_file="s.crt",
            key_file="s.key",
            trust_certs_file=str(trust),
            require_client_cert=required,
        )
        context = build_context(settings, material, trust_pem)
        assert session_cache.cache_mode(context) == OFF
        assert context.options & ssl.OP_NO_TICKET and context.num_tickets == 0
    plain = build_context(TlsSettings(certificate_file="s.crt", key_file="s.key"), material, None)
    assert session_cache.cache_mode(plain) == SERVER  # nothing checked: resumption stays


def test_the_listening_context_and_every_reload_cache_no_session(
    files: tuple[PemFiles, Path],
) -> None:
    identity, trust = files
    settings = TlsSettings(
        certificate_file="s.crt",
        key_file="s.key",
        trust_certs_file=str(trust),
        require_client_cert=True,
    )
    tls = ListenerTls("checking", settings, identity, PemTrustFile(trust))
    trust.write_bytes(certificate_pem(DevCA.create("rotated CA").certificate))
    assert tls.check()
    assert tls.current is not tls.context
    assert session_cache.cache_mode(tls.context) == OFF
    assert session_cache.cache_mode(tls.current) == OFF


def test_a_socket_that_may_move_handshakes_to_a_checking_listener_caches_no_session(
    files: tuple[PemFiles, Path],
) -> None:
    identity, _ = files
    tls = ListenerTls(None, TlsSettings(certificate_file="s.crt", key_file="s.key"), identity)
    assert session_cache.cache_mode(tls.context) == SERVER
    tls.ask_for_client_certificates()
    assert session_cache.cache_mode(tls.context) == OFF
