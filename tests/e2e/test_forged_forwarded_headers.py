"""Clients that write their own forwarded headers, through a real nginx and a real HAProxy on the
recipes in deploy/ as shipped, gateway side included (read from the recipe's "Gateway side"
comment, so the keys the recipe tells an operator to set are the keys tested).

The attack: a client names an address of another listener's network (here 'office',
10.1.0.0/16, standing for the internal network) in `Forwarded`, `X-Forwarded-For`, `X-Real-IP`
or `X-Pulsar-ListenerName`, hoping for that listener's broker URL. It must get the listener of
the address the proxy really saw: 'lb', the socket's own (no rule names 127.0.0.7), or
'partner' for a client at 127.0.0.8 (the test maps it there, so the answer shows the proxy's
view of the client is still used). No test here measures time.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from pulsar_lookup_gateway.gateway.process import Gateway
from pulsar_lookup_gateway.metadata_store.embedded_zookeeper import free_port
from pulsar_lookup_gateway.metadata_store.snapshot import write_snapshot
from tests.gateways import config_from, running
from tests.neighbours import (
    WAIT,
    haproxy,
    haproxy_binary,
    lookups,
    nginx,
    nginx_binary,
    one_broker_cluster,
    recipe,
)
from tests.recipe_keys import gateway_side

pytestmark = pytest.mark.e2e

LOOKUP_PATH = "/lookup/v2/topic/persistent/public/default/forged-t1"
STRANGER, PARTNER = "127.0.0.7", "127.0.0.8"  # clients: no rule's address; 'partner''s
NGINX = "127.0.0.9"  # nginx's source address towards the gateway (the test's proxy_bind)
INTERNAL = "10.1.2.3"  # an address of 'office''s network (10.1.0.0/16 in the recipes)
URLS = {
    name: f"pulsar://{name}.broker.test:6650" for name in ("internal", "office", "partner", "lb")
}
ADVERTISED = (
    "advertisedListeners="
    + ",".join(f"{name}:pulsar://gw-{name}.test:6650" for name in URLS)
    + "\nbrokerServicePort=\nwebServicePort=\n"
)

Headers = Sequence[tuple[str, str]]

#: What a client writes to pass for a client of 'office''s network, by name.
FORGERIES: dict[str, Headers] = {
    "Forwarded": [("Forwarded", f"for={INTERNAL}")],
    "Forwarded, quoted with a port": [("Forwarded", f'for="{INTERNAL}:4711";proto=http')],
    "Forwarded, the proxy's hop forged too": [("Forwarded", f"for={INTERNAL}, for={NGINX}")],
    "two Forwarded headers": [("Forwarded", "for=192.0.2.1"), ("Forwarded", f"for={INTERNAL}")],
    "Forwarded, mixed case": [("fOrWaRdEd", f"FoR={INTERNAL}")],
    "X-Real-IP": [("X-Real-IP", INTERNAL)],
    "X-Forwarded-For": [("X-Forwarded-For", INTERNAL)],
    "X-Forwarded-For, the proxy's hop forged too": [("X-Forwarded-For", f"{INTERNAL}, {NGINX}")],
    "two X-Forwarded-For headers": [("X-Forwarded-For", INTERNAL), ("x-forwarded-for", INTERNAL)],
    "every header at once": [
        ("X-Forwarded-For", INTERNAL),
        ("Forwarded", f"for={INTERNAL}"),
        ("X-Real-IP", INTERNAL),
        ("X-Forwarded-Host", "lookup.pulsar.corp.example.com"),
    ],
    "the listener by name": [("X-Pulsar-ListenerName", "office")],
}


async def broker_url(port: int, local_host: str, headers: Headers = ()) -> str:
    """The brokerUrl of an HTTP/1.0 lookup sent from `local_host` with `headers` written as
    given (names, case, repetitions): raw bytes, no client library in between."""
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection("127.0.0.1", port, local_addr=(local_host, 0)), WAIT
    )
    try:
        lines = [f"GET {LOOKUP_PATH} HTTP/1.0", "Host: lookup.pulsar.example.com"]
        lines += [f"{name}: {value}" for name, value in headers]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
        raw = await asyncio.wait_for(reader.read(), WAIT)
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await asyncio.wait_for(writer.wait_closed(), WAIT)
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.split(b" ", 2)[1:2] == [b"200"], raw[:500]
    return str(json.loads(body)["brokerUrl"])


async def wrong_answers(
    port: int, local_host: str, expected: str, forgeries: Mapping[str, Headers] = FORGERIES
) -> dict[str, str]:
    """The forgeries that got another broker URL than `expected`, with the URL they got."""
    wrong = {}
    for name, headers in forgeries.items():
        got = await broker_url(port, local_host, headers)
        if got != URLS[expected]:
            wrong[name] = got
    return wrong


@dataclass
class Deployment:
    gateway: Gateway
    port: int  # the proxy's HTTP port

    def office_lookups(self) -> float:
        return lookups(self.gateway.service.metrics.registry, "office", "network", "http")


@contextlib.asynccontextmanager
async def gateway_of(tmp_path: Path, side: str) -> AsyncIterator[Gateway]:
    snapshot = tmp_path / "cluster.json"
    nodes = one_broker_cluster({name: {"brokerServiceUrl": url} for name, url in URLS.items()})
    write_snapshot(snapshot, nodes)
    async with running(config_from(f"metadataStoreUrl=file:{snapshot}\n{ADVERTISED}{side}")) as gw:
        yield gw


# -- nginx, forwarded headers (deploy/nginx/pulsar-lookup-gateway-forwarded.conf) ---------------

NGINX_RECIPE = "nginx/pulsar-lookup-gateway-forwarded.conf"


@contextlib.asynccontextmanager
async def nginx_deployment(tmp_path: Path, *, drop: str = "") -> AsyncIterator[Deployment]:
    """The recipe's nginx and gateway side (without the key `drop`, when given)."""
    nginx_binary()  # skip before starting anything when nginx is not installed
    side = gateway_side(
        recipe(
            NGINX_RECIPE,
            {
                "0.0.0.0:8080": "127.0.0.1:0",
                "10.0.0.20/32": f"{NGINX}/32",
                "192.168.0.0/16": f"{PARTNER}/32",
            },
        )
    )
    if drop:
        kept = [line for line in side.splitlines() if not line.startswith(f"{drop}=")]
        assert len(kept) == len(side.splitlines()) - 1, f"the recipe does not set {drop}"
        side = "".join(f"{line}\n" for line in kept)
    async with gateway_of(tmp_path, side) as gateway:
        port, upstream = free_port(), gateway.port_of("lb", "http")
        text = recipe(
            NGINX_RECIPE,
            {
                "listen 8080;": f"listen 127.0.0.1:{port};",
                "gateway-1.pulsar.example.com:8080": f"127.0.0.1:{upstream}",
                "gateway-2.pulsar.example.com:8080": f"127.0.0.1:{upstream}",
            },
        )
        directives = f"    proxy_bind {NGINX};"
        async with nginx(tmp_path / "nginx", [port], http=text, http_directives=directives):
            yield Deployment(gateway, port)


@pytest.fixture
async def behind_nginx(tmp_path: Path) -> AsyncIterator[Deployment]:
    async with nginx_deployment(tmp_path) as deployment:
        yield deployment


@pytest.fixture(params=["as shipped", "gateway reading both headers"])
async def behind_nginx_either_way(
    tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[Deployment]:
    """As shipped, and with the gateway left at its default trustedForwardedHeaders (Forwarded
    preferred): nginx's own clearing must hold without the gateway's key, and the reverse."""
    drop = "trustedForwardedHeaders" if request.param != "as shipped" else ""
    async with nginx_deployment(tmp_path, drop=drop) as deployment:
        yield deployment


async def test_through_nginx_a_forged_header_never_gets_the_internal_listener(
    behind_nginx_either_way: Deployment,
) -> None:
    deployment = behind_nginx_either_way
    port = deployment.port
    # the routing works: the proxy's view of each client chooses its listener
    assert await broker_url(port, STRANGER) == URLS["lb"]
    assert await broker_url(port, PARTNER) == URLS["partner"]
    # and no header a client writes changes that view
    assert await wrong_answers(port, STRANGER, "lb") == {}
    assert await wrong_answers(port, PARTNER, "partner") == {}
    assert deployment.office_lookups() == 0


async def test_the_gateway_reads_only_the_header_the_recipe_names(
    behind_nginx: Deployment,
) -> None:
    """A proxy at nginx's address that writes X-Forwarded-For but passes a client's Forwarded
    on (the misconfiguration the recipe's clearing line guards against): with the recipe's
    trustedForwardedHeaders=X-Forwarded-For the gateway still goes by X-Forwarded-For."""
    port = behind_nginx.gateway.port_of("lb", "http")
    passed_on = [("Forwarded", f"for={INTERNAL}"), ("X-Forwarded-For", STRANGER)]
    assert await broker_url(port, NGINX, passed_on) == URLS["lb"]
    assert await broker_url(port, NGINX, [("Forwarded", f"for={INTERNAL}")]) == URLS["lb"]
    assert await broker_url(port, NGINX, [("X-Forwarded-For", PARTNER)]) == URLS["partner"]
    assert behind_nginx.office_lookups() == 0


# -- HAProxy, PROXY v2 in TCP mode (deploy/haproxy/pulsar-lookup-gateway-proxy-v2.cfg) ----------

HAPROXY_RECIPE = "haproxy/pulsar-lookup-gateway-proxy-v2.cfg"
PROXIES_SUBNET = "127.0.0.0/29"  # HAProxy connects from 127.0.0.1; STRANGER shares the subnet
OUTSIDER = "127.0.0.12"  # outside that subnet, in no rule
#: In TCP mode HAProxy cannot remove X-Pulsar-ListenerName: naming a listener is the client's
#: right there, as in the binary protocol, bounded by allowedListenerNames. Addresses it forges.
FORGED_ADDRESSES = {name: h for name, h in FORGERIES.items() if name != "the listener by name"}


@pytest.fixture
async def behind_haproxy(tmp_path: Path) -> AsyncIterator[Deployment]:
    """HAProxy passes the client's bytes through (TCP mode): every HTTP header arrives as the
    client wrote it, and only the PROXY header is HAProxy's. The trusted range is written as the
    proxies' subnet, which holds a client too (STRANGER): the case where the gateway would
    otherwise believe a client's headers."""
    haproxy_binary()
    side = gateway_side(
        recipe(
            HAPROXY_RECIPE,
            {
                "0.0.0.0:6650": "127.0.0.1:0",
                "0.0.0.0:8080": "127.0.0.1:0",
                "10.0.0.10/32,10.0.0.11/32": PROXIES_SUBNET,
                "192.168.0.0/16": f"{PARTNER}/32",
            },
        )
    )
    async with gateway_of(tmp_path, side) as gateway:
        ports = {"binary": free_port(), "http": free_port()}
        binary, http = gateway.port_of("lb", "pulsar"), gateway.port_of("lb", "http")
        text = recipe(
            HAPROXY_RECIPE,
            {
                "bind :6650": f"bind 127.0.0.1:{ports['binary']}",
                "bind :8080": f"bind 127.0.0.1:{ports['http']}",
                "gateway-1.pulsar.example.com:6650": f"127.0.0.1:{binary}",
                "gateway-2.pulsar.example.com:6650": f"127.0.0.1:{binary}",
                "gateway-1.pulsar.example.com:8080": f"127.0.0.1:{http}",
                "gateway-2.pulsar.example.com:8080": f"127.0.0.1:{http}",
            },
        )
        async with haproxy(tmp_path / "haproxy", [text], list(ports.values())):
            yield Deployment(gateway, ports["http"])


async def test_through_haproxy_a_forged_header_never_gets_the_internal_listener(
    behind_haproxy: Deployment,
) -> None:
    port = behind_haproxy.port
    assert await broker_url(port, STRANGER) == URLS["lb"]
    assert await broker_url(port, PARTNER) == URLS["partner"]
    for client in (STRANGER, OUTSIDER):
        assert await wrong_answers(port, client, "lb", FORGED_ADDRESSES) == {}, client
    assert await wrong_answers(port, PARTNER, "partner", FORGED_ADDRESSES) == {}
    assert behind_haproxy.office_lookups() == 0


def test_the_forgeries_name_another_listeners_network() -> None:
    """The checks above can only catch a forged header if it names a network the recipe maps
    to another listener, whose broker URL differs."""
    assert len(set(URLS.values())) == len(URLS)
    for name in (NGINX_RECIPE, HAPROXY_RECIPE):
        config = config_from(
            f"metadataStoreUrl=file:/x\n{ADVERTISED}" + gateway_side(recipe(name, {}))
        )
        cidrs = config.settings_for("office").client_cidrs or ()
        assert any(ipaddress.ip_address(INTERNAL) in ipaddress.ip_network(c) for c in cidrs), name
