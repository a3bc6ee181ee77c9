"""Every recipe in deploy/ that stands a proxy in front of the gateway, read for the headers a
client could use to pass for another network: each HTTP proxy writes or removes every one of them,
each TCP proxy (which can do neither) has the gateway believe none, and each recipe says which
header the gateway trusts. The nginx forwarded recipe and the HAProxy PROXY v2 recipe are also
attacked through the real proxies in tests/e2e/test_forged_forwarded_headers.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pulsar_lookup_gateway.listeners.config.conf_file import parse_properties
from pulsar_lookup_gateway.listeners.config.model import GatewayConfig, load_config, validate_raw
from tests.deploy.artefacts import DEPLOY, configmap_config, yaml_documents
from tests.recipe_keys import gateway_side

NGINX_HTTP = sorted(path for path in (DEPLOY / "nginx").glob("*.conf") if "stream" not in path.name)
NGINX_STREAM = sorted((DEPLOY / "nginx").glob("*stream*.conf"))
HAPROXY = sorted((DEPLOY / "haproxy").glob("*.cfg"))
ISTIO = DEPLOY / "istio" / "pulsar-lookup-gateway.yaml"
RECIPES = [*NGINX_HTTP, *NGINX_STREAM, *HAPROXY, ISTIO]

LISTENER_HEADER = "x-pulsar-listenername"
#: Headers that name a client and that no recipe passes on from a client.
CLEARED = ("forwarded", "x-real-ip")


def ids(paths: list[Path]) -> list[str]:
    return [path.name for path in paths]


# -- a small reader of nginx's configuration syntax --------------------------------------------


@dataclass
class Directive:
    name: str
    args: list[str]
    block: list[Directive] = field(default_factory=list)


_TOKEN = re.compile(r'"((?:[^"\\]|\\.)*)"|([;{}])|([^\s;{}"]+)')


def nginx_directives(text: str) -> list[Directive]:
    """The directives of nginx config text, with their blocks (comments dropped; enough for
    the recipes, which use no `'` quoting and no `#` inside values)."""
    text = "\n".join(line.split("#", 1)[0] for line in text.splitlines())
    stack: list[list[Directive]] = [[]]
    words: list[str] = []
    for match in _TOKEN.finditer(text):
        quoted, punctuation, word = match.groups()
        if punctuation == ";":
            stack[-1].append(Directive(words[0], words[1:]))
            words = []
        elif punctuation == "{":
            directive = Directive(words[0], words[1:])
            stack[-1].append(directive)
            stack.append(directive.block)
            words = []
        elif punctuation == "}":
            assert not words, words
            stack.pop()
        else:
            words.append(quoted if quoted is not None else word)
    assert len(stack) == 1 and not words, "unbalanced braces"
    return stack[0]


def walk(directives: list[Directive]) -> list[Directive]:
    return [d for top in directives for d in [top, *walk(top.block)]]


def test_the_nginx_reader() -> None:
    (server,) = nginx_directives(
        'server { listen 80; # a comment\n location /a/ { proxy_set_header Forwarded ""; } }'
    )
    assert server.name == "server" and server.block[0].args == ["80"]
    (location,) = [d for d in walk([server]) if d.name == "location"]
    assert location.args == ["/a/"]
    assert location.block[0].args == ["Forwarded", ""]


# -- the recipes -------------------------------------------------------------------------------


@pytest.mark.parametrize("path", NGINX_HTTP, ids=ids(NGINX_HTTP))
def test_every_nginx_location_writes_or_removes_each_client_header(path: Path) -> None:
    """nginx passes on every header of a client that no proxy_set_header of the location names;
    a location with one proxy_set_header inherits none from the server block, so each location
    that proxies must name all of them itself."""
    directives = walk(nginx_directives(path.read_text()))
    proxying = [d for d in directives if d.name == "location" and has(d, "proxy_pass")]
    assert proxying, path
    assert not [d for d in directives if d.name == "server" and has(d, "proxy_set_header")]
    for location in proxying:
        headers = {
            d.args[0].lower(): d.args[1] for d in location.block if d.name == "proxy_set_header"
        }
        where = f"{path.name}: location {' '.join(location.args)}"
        for name in CLEARED:
            assert headers.get(name) == "", f"{where}: a client's {name} is passed on"
        # nginx's own view of the client, not a client's value with nginx's appended
        assert headers.get("x-forwarded-for") == "$remote_addr", where
        assert LISTENER_HEADER in headers, f"{where}: a client's listener name is passed on"


def has(directive: Directive, name: str) -> bool:
    return any(d.name == name for d in directive.block)


def test_every_istio_route_sets_the_listener_and_removes_client_headers() -> None:
    routes = [
        route
        for doc in yaml_documents(ISTIO)
        if doc["kind"] == "VirtualService"
        for route in doc["spec"]["http"]
    ]
    assert routes
    for route in routes:
        request: dict[str, Any] = route["headers"]["request"]
        assert LISTENER_HEADER in {name.lower() for name in request["set"]}, route["name"]
        removed = {name.lower() for name in request.get("remove", [])}
        assert set(CLEARED) <= removed, route["name"]
    # with no trusted proxies the gateway believes no forwarded header at all
    assert configmap_config().trusted_proxy_cidrs == ()


@pytest.mark.parametrize("path", HAPROXY, ids=ids(HAPROXY))
def test_haproxy_recipes_are_tcp_proxies(path: Path) -> None:
    """HAProxy in TCP mode can neither set nor remove an HTTP header (the gateway side of each
    TCP recipe is checked below)."""
    modes = re.findall(r"^\s*mode\s+(\S+)", path.read_text(), re.MULTILINE)
    assert modes and set(modes) == {"tcp"}, path


def recipe_config(path: Path) -> tuple[GatewayConfig, list[str]]:
    """The gateway side of a recipe, validated as the gateway would (with the listeners it
    names declared and the legacy ports off, which the recipes leave to the rest of the
    operator's config)."""
    side = gateway_side(path.read_text())
    names = set(re.findall(r"^listener\.([^.]+)\.", side, re.MULTILINE))
    names |= set(re.findall(r"[=,]([a-z]+):(?:pulsar|http)", side))
    listeners = ",".join(f"{name}:pulsar://{name}.example.com:6650" for name in sorted(names))
    text = (
        f"metadataStoreUrl=file:/nonexistent\nadvertisedListeners={listeners}\n"
        f"brokerServicePort=\nwebServicePort=\n{side}"
    )
    loaded = validate_raw(parse_properties(text, path.name))
    return loaded.config, loaded.warnings


WITH_GATEWAY_SIDE = [*NGINX_HTTP, *NGINX_STREAM, *HAPROXY]
WRITES = {  # the forwarded header each proxy writes, by recipe: the one the gateway may believe
    "pulsar-lookup-gateway-forwarded.conf": ("X-Forwarded-For",),
    "pulsar-lookup-gateway-stream.conf": (),
    "pulsar-lookup-gateway-proxy-v2.cfg": (),
    "pulsar-lookup-gateway-sni.cfg": (),
}


@pytest.mark.parametrize(
    "path",
    [p for p in WITH_GATEWAY_SIDE if "Gateway side" in p.read_text()],
    ids=ids([p for p in WITH_GATEWAY_SIDE if "Gateway side" in p.read_text()]),
)
def test_a_recipe_that_trusts_its_proxy_names_the_header_that_proxy_writes(path: Path) -> None:
    config, warnings = recipe_config(path)
    assert warnings == [], warnings  # a misspelt key is only warned about: none here
    if config.trusted_proxy_cidrs:
        assert config.trusted_forwarded_headers == WRITES[path.name], path.name


@pytest.mark.parametrize("path", RECIPES, ids=ids(RECIPES))
def test_every_recipe_says_which_header_the_gateway_trusts(path: Path) -> None:
    assert "# Which header the gateway trusts:" in path.read_text(), path.name


def test_gateway_side_reads_the_recipes_keys() -> None:
    text = (
        "# intro\n#\n# Gateway side (gateway.conf):\n"
        "#   bindAddresses=lb:http://0.0.0.0:8080\n"
        "#   trustedProxyCidrs=10.0.0.20/32          # nginx's own address\n"
        "#   trustedForwardedHeaders=                # none\n"
        "#\n# more\n"
    )
    assert gateway_side(text) == (
        "bindAddresses=lb:http://0.0.0.0:8080\ntrustedProxyCidrs=10.0.0.20/32\n"
        "trustedForwardedHeaders=\n"
    )


def seconds(value: str) -> int:
    """An nginx time value (`90`, `30s`, `5m`, `1h`) in seconds."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    return int(value[:-1]) * units[value[-1]] if value[-1] in units else int(value)


@pytest.mark.parametrize("path", NGINX_HTTP, ids=ids(NGINX_HTTP))
def test_every_server_passes_the_watch_upgrade_and_keeps_it_open(path: Path) -> None:
    """The ownership watch is a WebSocket: nginx passes the upgrade on only when told to, and
    closes a proxied connection that reads nothing for proxy_read_timeout (60 s by default)."""
    directives = walk(nginx_directives(path.read_text()))
    servers = [d for d in directives if d.name == "server" and d.block]  # not an upstream's
    assert servers
    for server in servers:
        (watch,) = [
            d for d in server.block if d.name == "location" and d.args == ["=", "/lookup/v2/watch"]
        ]
        settings = {d.name: d.args for d in watch.block if d.name != "proxy_set_header"}
        headers = {
            d.args[0].lower(): d.args[1] for d in watch.block if d.name == "proxy_set_header"
        }
        assert headers["upgrade"] == "$http_upgrade" and headers["connection"] == "upgrade"
        assert settings["proxy_http_version"] == ["1.1"]
        assert seconds(settings["proxy_read_timeout"][0]) >= 3600
        assert seconds(settings["proxy_send_timeout"][0]) >= 3600


# -- issue 41: no internal address for a client that asks for one ------------------------------

SHIPPED_CONFIGS = sorted((DEPLOY.parent / "configs").glob("*.conf"))


@pytest.mark.parametrize("path", [*SHIPPED_CONFIGS, None], ids=[*ids(SHIPPED_CONFIGS), "configmap"])
def test_every_shipped_listener_but_the_internal_one_bounds_the_names_clients_ask_for(
    path: Path | None,
) -> None:
    """A client of the external listener's sockets that names the internal listener
    (?listenerName=internal, X-Pulsar-ListenerName, the binary field) must get a refusal, not
    the internal addresses: every other listener sets allowedListenerNames without it (was: in
    the Kubernetes ConfigMap and configs/auth.conf only)."""
    config = configmap_config() if path is None else load_config(path, {}).config
    internal = config.internal_listener_name
    outside = [lst.name for lst in config.advertised_listeners if lst.name != internal]
    assert outside, path
    for name in outside:
        allowed = config.settings_for(name).allowed_listener_names
        assert allowed is not None and internal not in allowed, (path, name, allowed)


@pytest.mark.parametrize(
    "path",
    [p for p in WITH_GATEWAY_SIDE if "Gateway side" in p.read_text()],
    ids=ids([p for p in WITH_GATEWAY_SIDE if "Gateway side" in p.read_text()]),
)
def test_every_recipe_socket_bounds_the_names_its_clients_ask_for(path: Path) -> None:
    """Each recipe's sockets face another network, through a proxy that cannot edit (TCP,
    TLS passed through) or does not edit a listener name in every case: the gateway side
    bounds the names a client there may ask for, and leaves out the internal listener."""
    config, _ = recipe_config(path)
    listeners = {spec.listener for spec in config.sockets()}
    assert listeners, path.name
    for name in listeners:
        allowed = config.settings_for(name).allowed_listener_names
        assert allowed is not None, (path.name, name)
        assert "internal" not in allowed, (path.name, name, allowed)


@pytest.mark.parametrize("path", NGINX_HTTP, ids=ids(NGINX_HTTP))
def test_every_nginx_location_outside_drops_the_clients_query(path: Path) -> None:
    """A client's ?listenerName= wins over the header a block sets and over its network: every
    location that does not face the internal listener passes on a query of its own making
    (`set $args`), never the client's ($args, $query_string) nor a listenerName."""
    directives = walk(nginx_directives(path.read_text()))
    proxying = [d for d in directives if d.name == "location" and has(d, "proxy_pass")]
    outside = [
        location
        for location in proxying
        if not [
            d
            for d in location.block
            if d.name == "proxy_set_header" and d.args == ["X-Pulsar-ListenerName", "internal"]
        ]
    ]
    assert outside, path.name
    for location in outside:
        where = f"{path.name}: location {' '.join(location.args)}"
        (query,) = [d.args for d in location.block if d.name == "set" and d.args[0] == "$args"]
        assert "$args" not in query[1] and "$query_string" not in query[1], where
        assert "listenername" not in query[1].lower(), where
