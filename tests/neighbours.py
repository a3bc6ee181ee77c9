"""Real neighbours of the gateway for the tests: nginx and HAProxy started from the recipes in
deploy/, on free loopback ports, with temp configs; and the small pieces the tests that stand
them in front of a gateway share (a cluster whose listeners lead to broker test peers, a raw
binary lookup from a chosen source address).

Every start is bounded (START_WAIT), every process is stopped in a `finally`, and a test that
needs a neighbour skips only when its binary is not installed (`make install` installs them).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import shutil
import socket
import ssl
import subprocess
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID

from pulsar_lookup_gateway.listeners.protocol import codec
from pulsar_lookup_gateway.listeners.protocol.codec import BaseCommand, FrameDecoder
from pulsar_lookup_gateway.metadata_store.synthetic import FOUR_BUNDLES

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
START_WAIT = 10.0  # seconds for a neighbour to listen on its ports
STOP_WAIT = 10.0
WAIT = 10.0  # bound on one client exchange
NGINX_STREAM_MODULES = (
    Path("/usr/lib/nginx/modules/ngx_stream_module.so"),  # Debian: libnginx-mod-stream
    Path("/usr/share/nginx/modules/ngx_stream_module.so"),
)


# --- finding the binaries -----------------------------------------------------------------------


def binary(name: str, package: str) -> str:
    """The path of `name` (also looked for in /usr/sbin, which a user's PATH may lack), or a
    skip naming the Debian package that provides it."""
    found = shutil.which(name) or shutil.which(f"/usr/sbin/{name}")
    if found is None:
        pytest.skip(f"{name} is not installed (Debian package '{package}'; `make install` adds it)")
    return found


def nginx_binary() -> str:
    return binary("nginx", "nginx-light")


def haproxy_binary() -> str:
    return binary("haproxy", "haproxy")


def nginx_stream_module() -> Path:
    """nginx's stream (TCP) module, a separate package on Debian; a skip when it is missing."""
    for path in NGINX_STREAM_MODULES:
        if path.is_file():
            return path
    pytest.skip("nginx's stream module is not installed (Debian package 'libnginx-mod-stream')")


# --- recipes ------------------------------------------------------------------------------------


def recipe(relative: str, replacements: Mapping[str, str]) -> str:
    """The text of deploy/`relative` with each example value replaced by the test's (a host
    name and port of the recipe by a loopback address and free port). A value the recipe no
    longer contains fails the test: the recipe and its test must change together."""
    path = DEPLOY / relative
    text = path.read_text()
    for old, new in replacements.items():
        if old not in text:
            raise AssertionError(f"{path}: no '{old}' to replace; update the test with the recipe")
        text = text.replace(old, new)
    return text


# --- processes ----------------------------------------------------------------------------------


PROC_NET_TCP = Path("/proc/net/tcp")
LISTEN = "0A"  # the TCP state's number in /proc/net/tcp


def listening(host: str, port: int) -> bool:
    """Whether a socket listens on host:port (IPv4), read from /proc/net/tcp. Unlike a test
    connection this does not reach the proxy's upstream: a probe that a balancer forwarded to
    the gateway and closed at once would be counted as a refused connection there."""
    wanted = {
        f"{socket.inet_aton(address)[::-1].hex().upper()}:{port:04X}"
        for address in (host, "0.0.0.0")
    }
    for line in PROC_NET_TCP.read_text().splitlines()[1:]:
        fields = line.split()
        if len(fields) > 3 and fields[1] in wanted and fields[3] == LISTEN:
            return True
    return False


@contextlib.asynccontextmanager
async def running(
    name: str, argv: Sequence[str], ports: Sequence[int], log: Path, host: str = "127.0.0.1"
) -> AsyncIterator[subprocess.Popen[bytes]]:
    """Start `argv` (its output to the file `log`, which a pipe nobody reads could not take
    for long) and wait, at most START_WAIT, until it listens on every port; stop it at exit."""
    with log.open("ab") as output:
        process = subprocess.Popen(argv, stdout=output, stderr=subprocess.STDOUT)
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + START_WAIT
        waiting = list(ports)
        while waiting:
            if process.poll() is not None:
                said = log.read_text(errors="replace")[-3000:]
                pytest.fail(f"{name} exited with {process.returncode}: {said}")
            if listening(host, waiting[0]):
                waiting.pop(0)
                continue
            if loop.time() > deadline:
                pytest.fail(f"{name} did not listen on {host}:{waiting[0]} within {START_WAIT}s")
            await asyncio.sleep(0.05)
        yield process
    finally:
        stop(process)


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=STOP_WAIT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=STOP_WAIT)


NGINX_MAIN = """\
{load_module}
daemon off;
master_process off;
pid {dir}/nginx.pid;
error_log stderr warn;
events {{ worker_connections 256; }}
{blocks}
"""

NGINX_HTTP = """\
http {{
    access_log off;
    client_body_temp_path {dir}/client_body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
{directives}
    include {include};
}}
"""

NGINX_STREAM = """\
stream {{
{directives}
    include {include};
}}
"""


@contextlib.asynccontextmanager
async def nginx(
    directory: Path,
    ports: Sequence[int],
    *,
    http: str | None = None,
    stream: str | None = None,
    http_directives: str = "",
    stream_directives: str = "",
) -> AsyncIterator[subprocess.Popen[bytes]]:
    """nginx in the foreground with `http` included in its http {} block and `stream` in its
    stream {} block (texts, e.g. from `recipe`); `*_directives` go before the include (the
    test's own settings, such as proxy_bind). Yields once it listens on every port."""
    executable = nginx_binary()
    directory.mkdir(parents=True, exist_ok=True)
    blocks, load_module = [], ""
    if http is not None:
        include = directory / "http.conf"
        include.write_text(http)
        blocks.append(NGINX_HTTP.format(dir=directory, include=include, directives=http_directives))
    if stream is not None:
        load_module = f"load_module {nginx_stream_module()};"
        include = directory / "stream.conf"
        include.write_text(stream)
        blocks.append(NGINX_STREAM.format(include=include, directives=stream_directives))
    conf = directory / "nginx.conf"
    conf.write_text(
        NGINX_MAIN.format(load_module=load_module, dir=directory, blocks="\n".join(blocks))
    )
    argv = [executable, "-p", str(directory), "-c", str(conf), "-e", "stderr"]
    async with running("nginx", argv, ports, directory / "output.log") as process:
        yield process


HAPROXY_GLOBAL = """\
global
    log stderr format raw local0 warning
"""


@contextlib.asynccontextmanager
async def haproxy(
    directory: Path, configs: Sequence[str], ports: Sequence[int]
) -> AsyncIterator[subprocess.Popen[bytes]]:
    """HAProxy in the foreground on the config texts `configs` (each its own -f file, in
    order, after a minimal global section). Yields once it listens on every port."""
    executable = haproxy_binary()
    directory.mkdir(parents=True, exist_ok=True)
    files = []
    for index, text in enumerate([HAPROXY_GLOBAL, *configs]):
        path = directory / f"{index:02d}.cfg"
        path.write_text(text)
        files.append(path)
    argv = [executable, "-db", *itertools.chain.from_iterable(("-f", str(f)) for f in files)]
    async with running("haproxy", argv, ports, directory / "output.log") as process:
        yield process


# --- the gateway behind them --------------------------------------------------------------------

MODULAR = "org.apache.pulsar.broker.loadbalance.impl.ModularLoadManagerImpl"
UNUSED_HTTP = "http://127.0.0.1:9"  # a web URL no test follows


def one_broker_cluster(listeners: Mapping[str, Mapping[str, str]]) -> dict[str, Any]:
    """Snapshot nodes: broker b1 owns every bundle of public/default and advertises
    `listeners` (name -> brokerServiceUrl / brokerServiceUrlTls / ...); its default URLs are
    those of the listener named 'internal'."""
    internal = listeners["internal"]
    default_url = internal.get("brokerServiceUrl", internal.get("brokerServiceUrlTls", ""))
    advertised = {name: dict(urls) for name, urls in listeners.items()}
    nodes: dict[str, Any] = {
        "/loadbalance/brokers/b1:8080": {
            "webServiceUrl": UNUSED_HTTP,
            "pulsarServiceUrl": default_url,
            "advertisedListeners": advertised,
            "loadManagerClassName": MODULAR,
        },
        "/loadbalance/leader": {"brokerId": "b1:8080", "serviceUrl": UNUSED_HTTP},
        "/admin/policies/public/default": {
            "bundles": {"boundaries": FOUR_BUNDLES, "numBundles": 4}
        },
    }
    for lower, upper in itertools.pairwise(FOUR_BUNDLES):
        nodes[f"/namespace/public/default/{lower}_{upper}"] = {
            "nativeUrl": default_url,
            "httpUrl": UNUSED_HTTP,
            "disabled": False,
            "advertisedListeners": advertised,
        }
    return nodes


def lookups(registry: Any, listener: str, chosen_by: str, protocol: str) -> float:
    """How many lookups were answered with Connect for `listener`, chosen so, over `protocol`."""
    labels = {"listener": listener, "chosen_by": chosen_by, "protocol": protocol}
    value = registry.get_sample_value("pulsar_broker_lookup_answers_total", labels)
    return float(value or 0.0)


def refusals(registry: Any, listener: str, reason: str) -> float:
    labels = {"listener": listener, "reason": reason}
    value = registry.get_sample_value("pulsar_lookup_gateway_connections_refused_total", labels)
    return float(value or 0.0)


# --- a raw binary client ------------------------------------------------------------------------


async def binary_lookup(
    host: str,
    port: int,
    topic: str,
    *,
    local_host: str | None = None,
    preamble: bytes = b"",
    ssl_context: ssl.SSLContext | None = None,
    server_hostname: str | None = None,
    listener: str | None = None,
) -> tuple[BaseCommand, ssl.SSLObject | None]:
    """CONNECT then LOOKUP `topic`, naming `listener` (None: no listener), from `local_host`
    (a loopback source address), after writing `preamble` (a PROXY header) in the clear, over
    TLS with `server_hostname` as SNI when `ssl_context` is given. The LOOKUP_RESPONSE and the
    TLS object (for the certificate); ConnectionError when the server closes instead."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        if local_host is not None:
            sock.bind((local_host, 0))
        loop = asyncio.get_running_loop()
        await asyncio.wait_for(loop.sock_connect(sock, (host, port)), WAIT)
        if preamble:
            await asyncio.wait_for(loop.sock_sendall(sock, preamble), WAIT)
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(
                sock=sock,
                ssl=ssl_context,
                server_hostname=(server_hostname or "") if ssl_context is not None else None,
            ),
            WAIT,
        )
    except BaseException:
        sock.close()
        raise
    decoder = FrameDecoder()

    async def receive() -> BaseCommand:
        while (command := decoder.next_command()) is None:
            data = await asyncio.wait_for(reader.read(65536), WAIT)
            if not data:
                raise ConnectionError("the server closed the connection")
            decoder.feed(data)
        assert isinstance(command, BaseCommand)
        return command

    try:
        writer.write(codec.connect("neighbours-test", 21))
        connected = await receive()
        assert connected.type == BaseCommand.CONNECTED, connected
        writer.write(codec.lookup(topic, 1, advertised_listener_name=listener))
        answer = await receive()
        assert answer.type == BaseCommand.LOOKUP_RESPONSE, answer
        return answer, writer.get_extra_info("ssl_object")
    finally:
        writer.close()
        with contextlib.suppress(OSError, ssl.SSLError, TimeoutError):
            await asyncio.wait_for(writer.wait_closed(), WAIT)


async def closed_without_answer(
    host: str, port: int, data: bytes, *, local_host: str | None = None
) -> bool:
    """Connect (from `local_host`), send `data`, and tell whether the server closed the
    connection without sending a byte back (True), rather than answering (False)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    try:
        if local_host is not None:
            sock.bind((local_host, 0))
        loop = asyncio.get_running_loop()
        await asyncio.wait_for(loop.sock_connect(sock, (host, port)), WAIT)
        with contextlib.suppress(ConnectionError):
            if data:
                await asyncio.wait_for(loop.sock_sendall(sock, data), WAIT)
        try:
            received = await asyncio.wait_for(loop.sock_recv(sock, 65536), WAIT)
        except ConnectionResetError:
            return True
        return received == b""
    finally:
        sock.close()


def common_name(ssl_object: ssl.SSLObject | None) -> str:
    """The common name of the certificate the server showed on a TLS connection."""
    assert ssl_object is not None
    der = ssl_object.getpeercert(binary_form=True)
    assert der is not None
    subject = x509.load_der_x509_certificate(der).subject
    return str(subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)


async def http_broker_url(
    port: int, path: str, *, local_host: str | None = None, headers: dict[str, str] | None = None
) -> str:
    """The `brokerUrl` of an HTTP lookup of `path` on 127.0.0.1:`port`, asked from the source
    address `local_host` (any 127.x; None: the system's choice)."""
    connector = aiohttp.TCPConnector(local_addr=(local_host, 0) if local_host else None)
    timeout = aiohttp.ClientTimeout(total=WAIT)
    async with (
        aiohttp.ClientSession(connector=connector, timeout=timeout) as session,
        session.get(f"http://127.0.0.1:{port}{path}", headers=headers) as response,
    ):
        assert response.status == 200, await response.text()
        return str((await response.json())["brokerUrl"])
