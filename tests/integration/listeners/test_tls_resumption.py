"""No TLS session resumption where client certificates are checked, whatever the order of
connections and trust file rotations: a resumed session would skip the current trust store.

The order is forced: one listener's TLS (tls.reload.ListenerTls) serves real handshakes on a
socket of 127.0.0.1 with its listening context, as the gateway's servers do, and the trust file
is rotated by calling its check at chosen moments (no reload timer). TLS 1.2 resumes by session
ID from the listening context's server session cache, which keeps sessions across rotations
(OpenSSL looks the session up before the server-name callback moves the handshake to the newest
context); TLS 1.3 resumes with tickets. Every network wait is bounded.
"""

from __future__ import annotations

import socket
import ssl
import threading
from pathlib import Path

import pytest
import trustme

from pulsar_lookup_gateway.tls.material import PemFiles, PemTrustFile
from pulsar_lookup_gateway.tls.reload import ListenerTls
from pulsar_lookup_gateway.tls.settings import TlsSettings

WAIT = 10.0  # bound on one connection
HOST = "127.0.0.1"
VERSIONS = pytest.mark.parametrize(
    "version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3], ids=["TLSv1.2", "TLSv1.3"]
)


class Listener:
    """A listening socket whose connections are served, one at a time, with `tls.context`:
    the handshake, b"ok" (only a client whose certificate was accepted reads it), a clean
    shutdown."""

    def __init__(self, tls: ListenerTls) -> None:
        self.tls = tls
        self.socket = socket.create_server((HOST, 0))
        self.socket.settimeout(WAIT)
        self.port = self.socket.getsockname()[1]

    def serve_one(self) -> threading.Thread:
        def serve() -> None:
            try:
                raw, _ = self.socket.accept()
            except OSError:
                return
            with raw:
                raw.settimeout(WAIT)
                try:
                    with self.tls.context.wrap_socket(raw, server_side=True) as tls:
                        tls.sendall(b"ok")
                        # close_notify both ways: OpenSSL keeps the session cached only
                        # after a clean shutdown (a fatal alert or lost EOF drops it)
                        tls.unwrap()
                except (ssl.SSLError, OSError):
                    pass

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        return thread

    def connect(
        self, context: ssl.SSLContext, session: ssl.SSLSession | None = None
    ) -> tuple[bool, ssl.SSLSession | None, bool]:
        """(the server accepted the client's certificate, the session, whether it resumed)."""
        server = self.serve_one()
        try:
            with socket.create_connection((HOST, self.port), timeout=WAIT) as raw:
                try:
                    tls = context.wrap_socket(raw, server_hostname=HOST, session=session)
                except (ssl.SSLError, OSError):
                    return False, None, False
                with tls:
                    try:
                        accepted = tls.recv(2) == b"ok"  # TLS 1.3: a refusal arrives here
                    except (ssl.SSLError, OSError):
                        accepted = False
                    got = accepted, tls.session, bool(tls.session_reused)
                    if accepted:
                        tls.unwrap()
                    return got
        finally:
            server.join(WAIT)
            assert not server.is_alive()


class Pki:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.server_ca, self.ca, self.other_ca = trustme.CA(), trustme.CA(), trustme.CA()
        leaf = self.server_ca.issue_cert(HOST)
        self.certificate = directory / "server.crt"
        self.key = directory / "server.key"
        self.certificate.write_bytes(b"".join(blob.bytes() for blob in leaf.cert_chain_pems))
        self.key.write_bytes(leaf.private_key_pem.bytes())
        self.trust_file = directory / "clients-ca.pem"
        self.trust(self.ca)

    def trust(self, ca: trustme.CA) -> None:
        self.trust_file.write_bytes(ca.cert_pem.bytes())

    def client(self, ca: trustme.CA | None, version: ssl.TLSVersion) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        self.server_ca.configure_trust(context)
        context.minimum_version = context.maximum_version = version
        if ca is not None:
            ca.issue_cert("client@example.com").configure_cert(context)
        return context

    def listener_tls(self, *, trusting: bool) -> ListenerTls:
        settings = TlsSettings(
            certificate_file=str(self.certificate),
            key_file=str(self.key),
            trust_certs_file=str(self.trust_file) if trusting else None,
            require_client_cert=trusting,
        )
        identity = PemFiles(self.certificate, self.key)
        return ListenerTls(
            "l", settings, identity, PemTrustFile(self.trust_file) if trusting else None
        )


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return Pki(tmp_path)


def rotate(pki: Pki, tls: ListenerTls, ca: trustme.CA) -> None:
    pki.trust(ca)
    assert tls.check()


def test_the_test_sees_resumption_where_nothing_is_checked(pki: Pki) -> None:
    """The control: without a trust file, a TLS 1.2 session resumes on these sockets."""
    listener = Listener(pki.listener_tls(trusting=False))
    with listener.socket:
        client = pki.client(None, ssl.TLSVersion.TLSv1_2)
        accepted, session, _ = listener.connect(client)
        assert accepted and session is not None
        assert listener.connect(client, session)[::2] == (True, True)


@VERSIONS
def test_no_session_resumes_while_the_trust_file_is_unchanged(
    pki: Pki, version: ssl.TLSVersion
) -> None:
    listener = Listener(pki.listener_tls(trusting=True))
    with listener.socket:
        client = pki.client(pki.ca, version)
        accepted, session, _ = listener.connect(client)
        assert accepted and session is not None
        # a full handshake, checked again
        assert listener.connect(client, session)[::2] == (True, False)


@VERSIONS
@pytest.mark.parametrize("rotations_before", [0, 1], ids=["listening-context", "moved"])
def test_a_session_from_before_a_rotation_is_not_resumed(
    pki: Pki, version: ssl.TLSVersion, rotations_before: int
) -> None:
    """The session is made on the listening context itself (no rotation yet) or on a context
    the handshake was moved to (after one rotation); then the trust file drops its CA."""
    tls = pki.listener_tls(trusting=True)
    listener = Listener(tls)
    with listener.socket:
        for _ in range(rotations_before):  # same CA, new file contents: a new context
            pki.trust_file.write_bytes(pki.ca.cert_pem.bytes() + pki.other_ca.cert_pem.bytes())
            assert tls.check()
        old_client = pki.client(pki.ca, version)
        accepted, session, _ = listener.connect(old_client)
        assert accepted and session is not None
        rotate(pki, tls, pki.other_ca)
        assert listener.connect(pki.client(pki.other_ca, version))[0]
        assert not listener.connect(old_client)[0]
        # nor does the old client get in by resuming its session
        assert listener.connect(old_client, session)[::2] == (False, False)
