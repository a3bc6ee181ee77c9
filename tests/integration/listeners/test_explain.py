"""`explain` against the lookups themselves: for each client (its network, header, listener
name, socket), the explanation a running gateway's admin route gives, and the `explain`
command's, name the listener and URLs that a real lookup through that socket answers. A
refusal explained is not counted; the route is for super-users."""

from __future__ import annotations

import base64
import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import jwt
import pytest

from pulsar_lookup_gateway.gateway.cli import main
from pulsar_lookup_gateway.gateway.process import Gateway
from pulsar_lookup_gateway.listeners.config.model import GatewayConfig
from pulsar_lookup_gateway.metadata_store.snapshot import write_snapshot
from pulsar_lookup_gateway.tls.devcerts import write_dev_certs
from tests.gateways import config_from, running
from tests.neighbours import WAIT, binary_lookup, http_broker_url, one_broker_cluster

TOPIC = "persistent://public/default/t1"
LOOKUP_PATH = "/lookup/v2/topic/persistent/public/default/t1"
OFFICE, PARTNER, STRANGER = "127.0.0.7", "127.0.0.8", "127.0.0.1"
URLS = {
    "internal": "pulsar://127.0.0.2:6650",
    "office": "pulsar://127.0.0.3:6650",
    "partner": "pulsar://127.0.0.4:6650",
}
GATEWAY = (
    "advertisedListeners=internal:pulsar://127.0.0.1:16650,office:pulsar://gw-office:6650,"
    "partner:pulsar://gw-partner:6650\n"
    "bindAddresses=internal:pulsar://127.0.0.1:0,internal:http://127.0.0.1:0,"
    "partner:http://127.0.0.1:0\n"
    "brokerServicePort=\nwebServicePort=\n"
    f"listener.office.clientCidrs={OFFICE}/32\n"
    f"listener.partner.clientCidrs={PARTNER}/32\n"
    "listener.partner.allowedListenerNames=partner\n"
)
SECRET = bytes(range(32))
RULES = ("explicit", "header", "sni", "network", "socket", "internal")  # in precedence order


def snapshot(tmp_path: Path) -> Path:
    path = tmp_path / "cluster.json"
    write_snapshot(path, one_broker_cluster({n: {"brokerServiceUrl": u} for n, u in URLS.items()}))
    return path


def config_of(tmp_path: Path, extra: str = "") -> GatewayConfig:
    return config_from(f"metadataStoreUrl=file:{snapshot(tmp_path)}\n{GATEWAY}{extra}")


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[Gateway]:
    async with running(config_of(tmp_path)) as started:
        yield started


async def explained(
    gateway: Gateway, *, bearer: str | None = None, **query: str
) -> tuple[int, Any]:
    port = gateway.port_of("internal", "http")
    timeout = aiohttp.ClientTimeout(total=WAIT)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.get(
            f"http://127.0.0.1:{port}/admin/v2/gateway/explain",
            params={"topic": TOPIC, **query},
            headers={"Authorization": f"Bearer {bearer}"} if bearer else None,
        ) as response,
    ):
        return response.status, await response.json()


# (source address, X-Pulsar-ListenerName, ?listenerName) -> the listener and its rule
HTTP_CASES = [
    (OFFICE, None, None, "office", "network"),
    (PARTNER, None, None, "partner", "network"),
    (STRANGER, None, None, "internal", "socket"),
    (OFFICE, "partner", None, "partner", "header"),
    (STRANGER, "partner", "office", "office", "explicit"),
]


@pytest.mark.parametrize(("address", "header", "name", "listener", "rule"), HTTP_CASES)
async def test_the_explanation_names_what_an_http_lookup_answers(
    gateway: Gateway,
    address: str,
    header: str | None,
    name: str | None,
    listener: str,
    rule: str,
) -> None:
    path = LOOKUP_PATH + (f"?listenerName={name}" if name else "")
    headers = {"X-Pulsar-ListenerName": header} if header else None
    port = gateway.port_of("internal", "http")
    answered = await http_broker_url(port, path, local_host=address, headers=headers)
    query = {"socket": "internal:http", "clientAddress": address}
    query |= {"header": header} if header else {}
    query |= {"listenerName": name} if name else {}
    status, explanation = await explained(gateway, **query)
    assert status == 200, explanation
    assert explanation["answer"]["brokerServiceUrl"] == answered == URLS[listener]
    assert (explanation["listener"], explanation["chosenBy"]) == (listener, rule)
    steps = explanation["request"] or explanation["connection"]
    [decided] = [step for step in steps if step["decided"]]
    assert decided["rule"] == rule
    # the rules before the one that chose found nothing; those after it were not consulted
    sources = [step for step in steps if step["rule"] in RULES]
    assert [step["rule"] for step in sources] == list(RULES)
    later = sources[RULES.index(rule) + 1 :]
    assert all("not consulted" in step["found"] for step in later)


@pytest.mark.parametrize(("address", "listener"), [(OFFICE, "office"), (STRANGER, "internal")])
async def test_the_explanation_names_what_a_binary_lookup_answers(
    gateway: Gateway, address: str, listener: str
) -> None:
    port = gateway.port_of("internal", "pulsar")
    answer, _ = await binary_lookup("127.0.0.1", port, TOPIC, local_host=address)
    status, explanation = await explained(
        gateway, socket="internal:pulsar", clientAddress=address, header="partner"
    )
    assert status == 200, explanation
    url = answer.lookupTopicResponse.brokerServiceUrl
    assert explanation["answer"]["brokerServiceUrl"] == url == URLS[listener]
    assert explanation["listener"] == listener
    assert any("no headers" in note for note in explanation["notes"])  # binary: not read
    bundle = explanation["answer"]["bundle"]
    assert (
        explanation["owner"]
        == f"broker b1:8080 owns bundle {bundle} (/namespace/public/default/{bundle})"
    )


async def test_a_refusal_is_explained_as_the_lookup_is_refused_and_not_counted(
    gateway: Gateway,
) -> None:
    port = gateway.port_of("partner", "http")
    timeout = aiohttp.ClientTimeout(total=WAIT)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.get(f"http://127.0.0.1:{port}{LOOKUP_PATH}?listenerName=office") as response,
    ):
        assert response.status == 400
        refused = await response.json()
    registry = gateway.service.metrics.registry
    labels = {"listener": "office", "chosen_by": "explicit", "protocol": "http"}
    labels["error"] = "NotAllowedError"
    failed = registry.get_sample_value("pulsar_broker_lookup_failures_total", labels)
    assert failed == 1  # the lookup's refusal was counted
    status, explanation = await explained(gateway, socket="partner:http", listenerName="office")
    assert status == 200
    assert explanation["refused"]["error"] == labels["error"]
    assert explanation["refused"]["message"] in refused["reason"]
    assert explanation["request"][-1] == {
        "rule": "refused",
        "found": f"{labels['error']}: {explanation['refused']['message']}",
        "decided": True,
    }
    assert "answer" not in explanation
    again = registry.get_sample_value("pulsar_broker_lookup_failures_total", labels)
    assert again == failed  # the explanation refused no lookup


async def test_bad_parameters_are_400(gateway: Gateway) -> None:
    assert (await explained(gateway, socket="nowhere:http"))[0] == 400
    assert (await explained(gateway, clientAddress="not-an-address"))[0] == 400
    assert (await explained(gateway, serverName="x" * 2000))[0] == 400


async def test_the_route_is_for_super_users(tmp_path: Path) -> None:
    key = base64.b64encode(SECRET).decode()
    auth = (
        "authenticationEnabled=true\nauthenticationProviders=token\n"
        f"tokenSecretKey=data:;base64,{key}\nsuperUserRoles=root\n"
    )
    async with running(config_of(tmp_path, auth)) as gateway:
        assert (await explained(gateway))[0] == 401
        for role, status in (("someone", 403), ("root", 200)):
            bearer = jwt.encode({"sub": role}, SECRET, algorithm="HS256")
            got, body = await explained(gateway, bearer=bearer)
            assert got == status, body
        assert any(d.startswith("authentication") for d in body["demands"])


def test_the_command_explains_as_the_running_gateway_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = tmp_path / "g.conf"
    conf.write_text(f"metadataStoreUrl=file:{snapshot(tmp_path)}\n{GATEWAY}")
    argv = ["explain", TOPIC, "--config", str(conf), "--socket", "internal:http"]
    assert main([*argv, "--client-address", OFFICE, "--json"]) == 0
    explanation = json.loads(capsys.readouterr().out)
    assert explanation["answer"]["brokerServiceUrl"] == URLS["office"]
    assert main([*argv, "--client-address", PARTNER]) == 0
    text = capsys.readouterr().out
    assert f"network  -> {PARTNER} matches clientCidrs of 'partner'" in text
    assert "socket      not consulted: network chose first" in text
    assert main([*argv, "--listener", "nope!"]) == 1
    assert "refused     " in capsys.readouterr().out


@pytest.mark.parametrize(
    ("server_name", "listener", "rule"),
    [("partner.example.com", "partner", "sni"), ("gw.example.com", "internal", "socket")],
)
async def test_the_explanation_names_what_a_tls_lookup_by_server_name_answers(
    tmp_path: Path, server_name: str, listener: str, rule: str
) -> None:
    certs = write_dev_certs(tmp_path / "certs", ["partner.example.com", "gw.example.com"])
    tls = (
        "bindAddresses=internal:pulsar+ssl://127.0.0.1:0,internal:http://127.0.0.1:0\n"
        f"tlsCertificateFilePath={certs.server_cert}\ntlsKeyFilePath={certs.server_key}\n"
        "listener.partner.sniHostnames=partner.example.com\n"
    )
    async with running(config_of(tmp_path, tls)) as gateway:
        context = ssl.create_default_context(cafile=str(certs.ca_cert))
        port = gateway.port_of("internal", "pulsar+ssl")
        answer, _ = await binary_lookup(
            "127.0.0.1", port, TOPIC, ssl_context=context, server_hostname=server_name
        )
        status, explanation = await explained(
            gateway, socket="internal:pulsar+ssl", serverName=server_name
        )
    assert status == 200, explanation
    url = answer.lookupTopicResponse.brokerServiceUrl
    assert explanation["answer"]["brokerServiceUrl"] == url == URLS[listener]
    assert (explanation["listener"], explanation["chosenBy"]) == (listener, rule)
    [sni] = [step for step in explanation["connection"] if step["rule"] == "sni"]
    assert (sni["decided"], server_name in sni["found"]) == (rule == "sni", True)
