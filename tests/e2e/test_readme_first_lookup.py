"""README's "A first lookup", as written: its curl commands answer the output it shows, its
Python snippet (the real pulsar-client wheel) prints what it says, and its `lookup` command
answers from the snapshot. Against the demo cluster's snapshot behind the listeners of
configs/standalone.conf, on ports of our own: only the README's host:port is replaced."""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import sys
from collections.abc import AsyncIterator

import aiohttp
import pytest

from pulsar_lookup_gateway.gateway.process import Gateway
from pulsar_lookup_gateway.listeners.config.conf_file import parse_properties
from pulsar_lookup_gateway.listeners.config.model import validate_raw
from tests.processes import DEMO, EXE, ROOT

pytestmark = pytest.mark.e2e

BOUND = 90.0  # seconds for one command; the client's own operation timeout is 5 s
LISTENERS = {"127.0.0.1": "internal", "127.0.0.2": "external"}
LOG_LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")


def section() -> str:
    readme = (ROOT / "README.md").read_text()
    start = readme.index("## A first lookup")
    return readme[start : readme.index("\n## ", start + 1)]


def blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", section(), flags=re.S | re.M)


@pytest.fixture
async def demo() -> AsyncIterator[Gateway]:
    binds = ",".join(
        f"{name}:{scheme}://{host}:0"
        for host, name in LISTENERS.items()
        for scheme in ("pulsar", "http")
    )
    raw = parse_properties(
        f"metadataStoreUrl=file:{DEMO}\n"
        "advertisedListeners=internal:pulsar://127.0.0.1:6650,internal:http://127.0.0.1:8080,"
        "external:pulsar://127.0.0.2:6650,external:http://127.0.0.2:8080\n"
        f"bindAddresses={binds}\nbrokerServicePort=\nwebServicePort=\n",
        "demo.conf",
    )
    gateway = Gateway(validate_raw(raw).config)
    await gateway.start()
    try:
        yield gateway
    finally:
        await gateway.stop()


def ours(text: str, gateway: Gateway, scheme: str, port: int) -> str:
    """`text` with the README's host:port of `scheme` replaced by our sockets'."""
    for host, listener in LISTENERS.items():
        text = text.replace(f"{host}:{port}", f"{host}:{gateway.port_of(listener, scheme)}")
    return text


async def test_the_curl_lookups_answer_what_the_readme_shows(demo: Gateway) -> None:
    (console, _) = blocks("console")
    lines = console.splitlines()
    asked = [(n, line) for n, line in enumerate(lines) if line.startswith("$ curl -s ")]
    assert len(asked) == 2
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        for n, line in asked:
            (url,) = shlex.split(line.removeprefix("$ curl -s "))
            async with session.get(ours(url, demo, "http", 8080)) as response:
                assert response.status == 200
                assert await response.text() == lines[n + 1], url


async def test_the_python_snippet_prints_what_the_readme_says(demo: Gateway) -> None:
    (snippet,) = blocks("python")
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        ours(snippet, demo, "pulsar", 6650),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    out, _ = await asyncio.wait_for(process.communicate(), BOUND)
    assert process.returncode == 0
    partitions = [f"persistent://public/default/orders-partition-{i}" for i in range(4)]
    # The client's C++ core logs to stdout too, each line starting with its date.
    printed = [line for line in out.decode().splitlines() if not LOG_LINE.match(line)]
    assert printed == [repr(partitions), "looked up, then the broker"]


async def test_the_lookup_command_answers_from_the_snapshot() -> None:
    (_, console) = blocks("console")
    command = shlex.split(console.replace("\\\n", " ").removeprefix("$ "))
    assert command[0] == ".venv/bin/pulsar-lookup-gateway"
    process = await asyncio.create_subprocess_exec(
        EXE, *command[1:], cwd=ROOT, stdout=asyncio.subprocess.PIPE
    )
    out, _ = await asyncio.wait_for(process.communicate(), BOUND)
    assert process.returncode == 0
    answer = json.loads(out)
    assert answer["brokerServiceUrl"] == "pulsar://broker-1.pulsar.example.com:6650"
    assert answer["listener"] == "external"
