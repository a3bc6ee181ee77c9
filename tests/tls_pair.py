"""A TLS server context with a certificate for one address and a client context that trusts it,
from a throwaway CA (trustme): for tests that need real TLS and nothing else of the CA."""

from __future__ import annotations

import ssl

import trustme


def server_and_client(host: str) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    ca = trustme.CA()
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(host).configure_cert(server)
    client = ssl.create_default_context()
    ca.configure_trust(client)
    return server, client
