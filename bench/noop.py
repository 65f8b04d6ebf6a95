"""(z) The no-op, and which code answered: ``GET /healthz`` on one connection for a moment.

The smallest scenario, for a smoke run of ``python -m bench.ab`` (its test runs this one): the
figure is requests per second, and the series holds the SHA-256 of the server's
``/openapi.json``, which tells one commit's API from another's.
"""

from __future__ import annotations

import hashlib
import time

import httpx

from bench import http
from bench.context import Context
from bench.report import Result
from bench.server import Server

TITLE = "The no-op (GET /healthz, one connection), and which code answered"


async def _measure(ctx: Context, result: Result, server: Server) -> None:
    seconds = ctx.pick(2.0, 0.3)
    conn = await http.connect(server.url)
    raw = http.request_bytes("GET", "/healthz")
    done = 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        status, answer = await conn.send(raw)
        if status != 200:
            raise http.HttpError(f"/healthz answered {status}: {answer[:300]!r}")
        done += 1
    conn.close()
    result.add("healthz", "GET /healthz, one connection", done / (time.perf_counter() - started), "req/s")


def run(ctx: Context) -> Result:
    result = Result("z", TITLE)
    with Server() as server:
        http.run(_measure(ctx, result, server))
        openapi = httpx.get(server.url + "/openapi.json", timeout=30).content
    result.series["openapi_sha256"] = hashlib.sha256(openapi).hexdigest()
    result.note(f"served by {server.code.tree} ({server.code.package}.cli); /openapi.json "
                f"sha256 {result.series['openapi_sha256'][:12]}")
    return result
