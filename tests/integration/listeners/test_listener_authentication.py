"""A listener's authentication holds on every route to it (security: a TLS server name, a name
the client gives), over binary and HTTP, with a real gateway on 127.0.0.1.

The set-up: one TLS socket of the `lobby` listener, which requires nothing; the `vault`
listener requires a token and a trusted client certificate, and is chosen on any TLS socket by
the server name `vault.test`. The attack: dial the lobby's socket with the server name
`vault.test` (the handshake then presents the vault's certificate) and present neither, or
name `vault` in the lookup. Before the fix, both were answered with the vault's addresses.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ssl
from pathlib import Path

import aiohttp
import jwt
import pytest
import trustme

from pulsar_lookup_gateway.gateway.process import Gateway
from pulsar_lookup_gateway.listeners.protocol import codec
from pulsar_lookup_gateway.listeners.protocol.codec import BaseCommand, LookupType, ServerError
from pulsar_lookup_gateway.metadata_store.snapshot import write_snapshot
from pulsar_lookup_gateway.metadata_store.synthetic import cluster, topic_in_range
from tests.broker_peer import RawClient
from tests.gateways import config_from, running

WAIT = 10.0
SECRET = bytes(range(32))
LOW = "0x00000000_0x40000000"
TOPIC = topic_in_range(0x00000000, 0x40000000)
LOCAL = TOPIC.rsplit("/", 1)[1]
VAULT_NAME = "vault.test"
LOBBY_NAME = "lobby.test"
VAULT_URL = "pulsar+ssl://vault-broker.example.com:6651"


class Set:
    def __init__(self, tmp_path: Path) -> None:
        self.ca = trustme.CA()
        self.other_ca = trustme.CA()
        self.dir = tmp_path
        for stem, name in (("lobby", LOBBY_NAME), ("vault", VAULT_NAME)):
            leaf = self.ca.issue_cert("127.0.0.1", name, common_name=f"{stem}-gw")
            leaf.private_key_pem.write_to_path(tmp_path / f"{stem}.key")
            leaf.cert_chain_pems[0].write_to_path(tmp_path / f"{stem}.crt")
        self.ca.cert_pem.write_to_path(tmp_path / "ca.pem")
        snapshot = cluster(brokers=1, owned={LOW: 1})
        # the broker advertises both listeners (its registration and its ownership node)
        for path, data in snapshot.items():
            if path.startswith(("/loadbalance/brokers/", "/namespace/")):
                data["advertisedListeners"] = {
                    "lobby": {"brokerServiceUrlTls": "pulsar+ssl://lobby-broker.example.com:6651"},
                    "vault": {"brokerServiceUrlTls": VAULT_URL},
                }
        write_snapshot(tmp_path / "cluster.json", snapshot)

    def config_text(self) -> str:
        key = base64.b64encode(SECRET).decode()
        d = self.dir
        return (
            f"metadataStoreUrl=file:{d / 'cluster.json'}\n"
            "advertisedListeners=lobby:pulsar+ssl://127.0.0.1:6651,lobby:https://127.0.0.1:8443,"
            "vault:pulsar+ssl://127.0.0.2:6651,vault:https://127.0.0.2:8443\n"
            "bindAddresses=lobby:pulsar+ssl://127.0.0.1:0,lobby:https://127.0.0.1:0\n"
            "brokerServicePort=\nwebServicePort=\n"
            f"tlsCertificateFilePath={d / 'lobby.crt'}\ntlsKeyFilePath={d / 'lobby.key'}\n"
            f"listener.vault.tlsCertificateFilePath={d / 'vault.crt'}\n"
            f"listener.vault.tlsKeyFilePath={d / 'vault.key'}\n"
            f"listener.vault.tlsTrustCertsFilePath={d / 'ca.pem'}\n"
            "listener.vault.tlsRequireTrustedClientCertOnConnect=true\n"
            f"listener.vault.sniHostnames={VAULT_NAME}\n"
            "authenticationProviders=token\n"
            f"tokenSecretKey=data:;base64,{key}\n"
            "listener.lobby.authenticationRequired=false\n"
            "listener.vault.authenticationRequired=true\n"
        )

    def client(self, *, certificate: bool, ca: trustme.CA | None = None) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.dir / "ca.pem"))
        if certificate:
            (ca or self.ca).issue_cert("client@example.com").configure_cert(context)
        return context


def token(role: str) -> str:
    return jwt.encode({"sub": role}, SECRET, algorithm="HS256")


@pytest.fixture
def pki(tmp_path: Path) -> Set:
    return Set(tmp_path)


async def binary(
    port: int,
    context: ssl.SSLContext,
    server_name: str,
    *,
    credentials: str | None = None,
    listener: str | None = None,
) -> BaseCommand | None:
    """CONNECT (with a token if given) and LOOKUP over TLS to the lobby's socket dialling
    `server_name`: the answer to the LOOKUP, the ERROR that refused CONNECT, or None when the
    gateway closed the connection (or refused the handshake) without an answer."""
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname=server_name),
            WAIT,
        )
    except (ssl.SSLError, ConnectionError):
        return None
    client = RawClient(reader, writer)
    try:
        method = "token" if credentials is not None else None
        data = credentials.encode() if credentials is not None else None
        client.send(codec.connect("test", 21, auth_method_name=method, auth_data=data))
        try:
            first = await client.receive(WAIT)
        except (ssl.SSLError, ConnectionError):
            return None
        if first is None or not isinstance(first, BaseCommand):
            return None
        if first.type != BaseCommand.CONNECTED:
            return first
        client.send(codec.lookup(TOPIC, 1, advertised_listener_name=listener))
        try:
            answer = await client.receive(WAIT)
        except (ssl.SSLError, ConnectionError):
            return None
        assert answer is None or isinstance(answer, BaseCommand)
        return answer
    finally:
        with contextlib.suppress(ssl.SSLError, ConnectionError):
            await client.close()


async def http(
    port: int,
    context: ssl.SSLContext,
    server_name: str,
    *,
    credentials: str | None = None,
    listener: str | None = None,
) -> int | None:
    """The status of an HTTP lookup on the lobby's HTTPS socket dialling `server_name`; None
    when the connection was refused."""
    headers = {"Authorization": f"Bearer {credentials}"} if credentials else {}
    query = f"?listenerName={listener}" if listener else ""
    url = f"https://127.0.0.1:{port}/lookup/v2/topic/persistent/public/default/{LOCAL}{query}"
    timeout = aiohttp.ClientTimeout(total=WAIT)
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(url, ssl=context, server_hostname=server_name, headers=headers) as reply,
        ):
            return reply.status
    except (aiohttp.ClientConnectionError, ssl.SSLError):
        return None


def answered_for_vault(answer: BaseCommand | None) -> bool:
    return (
        answer is not None
        and answer.type == BaseCommand.LOOKUP_RESPONSE
        and answer.lookupTopicResponse.response == LookupType.Connect
        and answer.lookupTopicResponse.brokerServiceUrlTls == VAULT_URL
    )


def refused_authentication(answer: BaseCommand | None) -> bool:
    """An AuthenticationError: ERROR to CONNECT, or a failed LOOKUP_RESPONSE."""
    if answer is None:
        return False
    if answer.type == BaseCommand.ERROR:
        return answer.error.error == ServerError.AuthenticationError
    response = answer.lookupTopicResponse
    return (
        answer.type == BaseCommand.LOOKUP_RESPONSE
        and response.response == LookupType.Failed
        and response.error == ServerError.AuthenticationError
    )


async def started(pki: Set) -> contextlib.AbstractAsyncContextManager[Gateway]:
    return running(config_from(pki.config_text(), "t.conf"))


async def test_a_server_name_reaching_a_listener_brings_its_client_certificate_rule(
    pki: Set,
) -> None:
    """Dialling `vault.test` on the lobby's socket without a client certificate: the vault
    requires one, so the connection is closed after the handshake, binary and HTTP (before:
    the lobby's context asked for none and the lookup was answered)."""
    async with await started(pki) as gateway:
        binary_port = gateway.port_of("lobby", "pulsar+ssl")
        web_port = gateway.port_of("lobby", "https")
        bare = pki.client(certificate=False)
        vault_token = token("vault-client")
        registry = gateway.service.metrics.registry

        def refused() -> float:
            value = registry.get_sample_value(
                "pulsar_lookup_gateway_connections_refused_total",
                {"listener": "lobby", "reason": "client-certificate"},
            )
            return value or 0.0

        assert await binary(binary_port, bare, VAULT_NAME, credentials=vault_token) is None
        assert refused() == 1
        assert await http(web_port, bare, VAULT_NAME, credentials=vault_token) is None
        assert refused() >= 2  # (a client may try again on a closed connection)
        # a certificate of a CA the vault does not trust fails the handshake itself
        before = refused()
        stranger = pki.client(certificate=True, ca=pki.other_ca)
        assert await binary(binary_port, stranger, VAULT_NAME, credentials=vault_token) is None
        assert refused() == before
        # the lobby's own clients still need no certificate
        lobby = await binary(binary_port, bare, LOBBY_NAME)
        assert lobby is not None and lobby.lookupTopicResponse.response == LookupType.Connect
        assert await http(web_port, bare, LOBBY_NAME) == 200


async def test_a_server_name_reaching_a_listener_brings_its_token_rule(pki: Set) -> None:
    """With a trusted client certificate but no token, the vault's token requirement holds;
    with both, the vault's address is answered."""
    async with await started(pki) as gateway:
        binary_port = gateway.port_of("lobby", "pulsar+ssl")
        web_port = gateway.port_of("lobby", "https")
        certified = pki.client(certificate=True)
        assert refused_authentication(await binary(binary_port, certified, VAULT_NAME))
        assert await http(web_port, certified, VAULT_NAME) == 401
        good = token("vault-client")
        assert answered_for_vault(
            await binary(binary_port, certified, VAULT_NAME, credentials=good)
        )
        assert await http(web_port, certified, VAULT_NAME, credentials=good) == 200


async def test_naming_a_listener_brings_its_token_rule(pki: Set) -> None:
    """On the lobby's own route (no server name of the vault), a lookup that names `vault`
    needs the vault's authentication: binary refuses it on a connection that proved no role,
    HTTP asks for the token (401) and answers with it."""
    async with await started(pki) as gateway:
        binary_port = gateway.port_of("lobby", "pulsar+ssl")
        web_port = gateway.port_of("lobby", "https")
        bare = pki.client(certificate=False)
        named = await binary(binary_port, bare, LOBBY_NAME, listener="vault")
        assert refused_authentication(named)
        assert not answered_for_vault(named)
        assert await http(web_port, bare, LOBBY_NAME, listener="vault") == 401
        good = token("vault-client")
        # the token alone is not enough: the vault also requires its client certificate
        assert await http(web_port, bare, LOBBY_NAME, credentials=good, listener="vault") == 401
        certified = pki.client(certificate=True)
        assert (
            await http(web_port, certified, VAULT_NAME, credentials=good, listener="vault") == 200
        )
        failures = gateway.service.metrics.registry.get_sample_value(
            "pulsar_broker_lookup_failures_total",
            {
                "listener": "vault",
                "chosen_by": "explicit",
                "protocol": "binary",
                "error": "AuthenticationError",
            },
        )
        assert failures == 1


async def test_a_certificate_only_listener_needs_its_certificate_on_every_route(
    pki: Set,
) -> None:
    """The vault requires a client certificate and no token. Naming it from the lobby's route
    (no certificate, or one the lobby's handshake saw) is refused, binary and HTTP; over the
    vault's own server name with a trusted certificate it is answered, named or not."""
    text = pki.config_text().replace(
        "listener.vault.authenticationRequired=true", "listener.vault.authenticationRequired=false"
    )
    async with running(config_from(text, "t.conf")) as gateway:
        binary_port = gateway.port_of("lobby", "pulsar+ssl")
        web_port = gateway.port_of("lobby", "https")
        bare = pki.client(certificate=False)
        certified = pki.client(certificate=True)
        named = await binary(binary_port, bare, LOBBY_NAME, listener="vault")
        assert refused_authentication(named) and not answered_for_vault(named)
        assert await http(web_port, bare, LOBBY_NAME, listener="vault") == 401
        # a certificate offered on the lobby's handshake (which trusts no client CA) is not
        # the vault's: the lobby's handshake refuses it or it is not verified there
        lobby_cert = await binary(binary_port, certified, LOBBY_NAME, listener="vault")
        assert not answered_for_vault(lobby_cert)
        assert answered_for_vault(await binary(binary_port, certified, VAULT_NAME))
        assert answered_for_vault(
            await binary(binary_port, certified, VAULT_NAME, listener="vault")
        )
        assert await http(web_port, certified, VAULT_NAME, listener="vault") == 200
