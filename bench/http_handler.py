"""The HTTP lookup handler's own CPU per request, without sockets or HTTP parsing.

`python -m bench.http_handler`: the gateway's `GET /lookup/v2/topic/...` handler is called on
prepared aiohttp requests (one per call, as aiohttp makes them), answering from the same snapshot
as bench.http_lookup; the baseline is a handler that answers the same pre-encoded body, called the
same way in the same process. What wrk measures (bench.http_lookup) is mostly aiohttp's own
parsing and writing, which varies from run to run by more than the handler costs; this isolates
the part that is ours. Request shapes: no listener named (the common case), `?listenerName=`,
and the `X-Pulsar-ListenerName` header; each answered from the socket's memo of warm answers
(serving.memo, as served) and by the full path (the memo off, as on a socket that
requires authentication).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import cast

from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from multidict import CIMultiDict

from bench.http_lookup import LISTENER, OWNED, PATH
from pulsar_lookup_gateway.http_api.app import build_app
from pulsar_lookup_gateway.http_api.settings import HttpSettings
from pulsar_lookup_gateway.metadata_store.file import FileSource
from pulsar_lookup_gateway.metadata_store.synthetic import cluster
from pulsar_lookup_gateway.serving.service import LookupService

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

SHAPES: dict[str, tuple[str, dict[str, str]]] = {
    "no listener named": (PATH, {}),
    "?listenerName=external": (f"{PATH}?listenerName={LISTENER}", {}),
    "X-Pulsar-ListenerName: external": (PATH, {"X-Pulsar-ListenerName": LISTENER}),
}


async def _requests(
    app: web.Application, path: str, headers: dict[str, str], count: int
) -> tuple[Handler, list[web.Request]]:
    match = await app.router.resolve(make_mocked_request("GET", path, app=app))
    return match.handler, [
        make_mocked_request("GET", path, headers=CIMultiDict(headers), app=app, match_info=match)
        for _ in range(count)
    ]


async def _cpu_per_call(handler: Handler, requests: list[web.Request], rounds: int) -> float:
    """The best, over `rounds`, of the process CPU per call (microseconds)."""
    best = float("inf")
    for _ in range(rounds):
        started = time.process_time()
        for request in requests:
            await handler(request)
        best = min(best, (time.process_time() - started) / len(requests) * 1e6)
    return best


async def measure(count: int, rounds: int) -> list[tuple[str, float, float, float]]:
    """(shape, memoised us/request, full path us/request, baseline us/request) per shape."""
    with tempfile.TemporaryDirectory() as scratch:
        snapshot = Path(scratch) / "cluster.json"
        snapshot.write_text(json.dumps(cluster(3, OWNED)))
        source = FileSource(snapshot, poll_interval=3600)
        await source.start()
        try:
            service = LookupService(source, internal_listener="internal")
            memoised, full = (
                build_app(service, HttpSettings(LISTENER, memoise_lookups=memoise))
                for memoise in (True, False)
            )
            rows = []
            for shape, (path, headers) in SHAPES.items():
                # One set of requests for both (the lookup route reads neither the request's
                # app nor its match): mock requests are large.
                _, requests = await _requests(memoised, path, headers, count)
                figures = []
                for app in (memoised, full):
                    handler = (await _requests(app, path, headers, 0))[0]
                    answer = await handler(requests[0])
                    assert isinstance(answer, web.Response) and answer.status == 200, shape
                    body = cast(bytes, answer.body)
                    figures.append(await _cpu_per_call(handler, requests, rounds))

                async def fixed(request: web.Request, body: bytes = body) -> web.Response:
                    return web.Response(body=body, content_type="application/json")

                baseline = await _cpu_per_call(fixed, requests, rounds)
                rows.append((shape, figures[0], figures[1], baseline))
                del requests
            return rows
        finally:
            await source.close()


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.http_handler", description=__doc__)
    parser.add_argument("--requests", type=int, default=20_000, help="calls per round")
    parser.add_argument("--rounds", type=int, default=7, help="rounds; the best one counts")
    args = parser.parse_args(argv)
    rows = asyncio.run(measure(args.requests, args.rounds))
    print(
        "| request | fixed-body handler us | gateway, memoised us | gateway, full path us "
        "| memoised - fixed us | full path - fixed us |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for shape, memoised, full, baseline in rows:
        print(
            f"| {shape} | {baseline:.2f} | {memoised:.2f} | {full:.2f} | "
            f"{memoised - baseline:.2f} | {full - baseline:.2f} |"
        )


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
