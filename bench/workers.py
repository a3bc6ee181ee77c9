"""Scale-out on one host: `run --workers 2` against `run --workers 1`, same run.

    .venv/bin/python -m bench.workers [--duration 5] [--connections 64]

Each gateway runs as the real command on a snapshot (`file:` source) with one HTTP socket;
wrk (a C load generator, one thread) drives HTTP lookups of 2,000 distinct topics over
keep-alive connections. wrk, the workers and the supervisor share the machine's 2 cores.
"""

from __future__ import annotations

import argparse
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pulsar_lookup_gateway.metadata_store.embedded_zookeeper import free_port

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "configs" / "demo-cluster.json"
EXE = str(Path(sys.executable).with_name("pulsar-lookup-gateway"))
LUA = """
counter = 0
request = function()
  counter = counter + 1
  return wrk.format("GET", "/lookup/v2/topic/persistent/public/default/t" .. (counter % 2000))
end
"""


def run_gateway(conf: Path, workers: int) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [EXE, "run", "--config", str(conf), "--workers", str(workers)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    seen, deadline = 0, time.monotonic() + 60
    while seen < workers and time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            raise RuntimeError("the gateway exited at start-up")
        seen += "listening on" in line
    subprocess.Popen(["cat"], stdin=process.stdout, stdout=subprocess.DEVNULL)  # drain logs
    return process


def wrk(url: str, connections: int, duration: int, script: Path) -> tuple[float, float]:
    out = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{duration}s", "--latency", "-s", str(script), url],
        capture_output=True,
        text=True,
        timeout=duration + 60,
        check=True,
    ).stdout
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)", out)
    assert p99 is not None, out
    scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}[p99.group(2)]
    return rate, float(p99.group(1)) * scale


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="bench.workers")
    parser.add_argument("--duration", type=int, default=5)
    parser.add_argument("--connections", type=int, default=64)
    args = parser.parse_args(argv)
    if shutil.which("wrk") is None:
        raise SystemExit("bench.workers needs wrk (make install adds it)")
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "topics.lua"
        script.write_text(LUA)
        for workers in (1, 2):
            port = free_port()
            conf = Path(tmp) / f"w{workers}.conf"
            conf.write_text(
                f"metadataStoreUrl=file:{DEMO}\n"
                "advertisedListeners=internal:http://127.0.0.1:8080\n"
                f"bindAddresses=internal:http://127.0.0.1:{port}\n"
                "brokerServicePort=\nwebServicePort=\n"
            )
            gateway = run_gateway(conf, workers)
            try:
                wrk(f"http://127.0.0.1:{port}", args.connections, 1, script)  # warm-up
                results[workers] = wrk(
                    f"http://127.0.0.1:{port}", args.connections, args.duration, script
                )
            finally:
                gateway.send_signal(signal.SIGTERM)
                gateway.wait(30)
    (one, one_p99), (two, two_p99) = results[1], results[2]
    print(
        "| workers | HTTP lookups/s | p99 ms |\n|---|---|---|\n"
        f"| 1 | {one:,.0f} | {one_p99:.2f} |\n| 2 | {two:,.0f} | {two_p99:.2f} |\n"
        f"| **2 / 1** | **{two / one:.2f}** | |"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
