"""``python -m bench.ds_stages``: the instructions of a ``/ds`` append, layer by layer, in process.

Scenario (s) compares lastword's Durable Streams face with the protocol's Node reference server,
which keeps its streams in memory. This says where lastword's CPU per append goes, under
callgrind, without the machine's noise: a real core (:func:`lastword.core.open_core`, SQLite in a
temporary directory, its writer thread included) and the app ``lastword serve`` runs
(:func:`lastword.main.create_app`), without a socket. Two stretches over the same kind of append
(scenario s's message, ``text/plain``, one per request, one after the other), each between two
marker calls (:func:`bench.stages.marker`):

* ``app``: the ASGI app called as uvicorn calls it (its middlewares, the short way in, the route,
  the service, the store, the answer);
* ``service``: :meth:`lastword.ds_service.StreamService.append` alone (the service and the
  store's transaction with its commit).

``app - service`` is then the HTTP layer inside the app; what uvicorn and the socket add is
scenario (v)'s ``ds`` count (a real server) minus ``app``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import shutil
import tempfile
from collections.abc import Callable
from typing import Any

from bench.ds import MESSAGE
from bench.stages import callgrind_counts, marker

STRETCHES = ("app", "service")
PATH = "/v1/stream/ds-stages"


def _scope(method: str, path: str, headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
            "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
            "headers": [(b"host", b"127.0.0.1"), *headers], "client": ("127.0.0.1", 50000),
            "server": ("127.0.0.1", 8000), "state": {}}


async def _call(app: Any, method: str, path: str, body: bytes, headers: list[tuple[bytes, bytes]]) -> int:
    """One request through the ASGI app; its status."""
    received = False
    status = 0

    async def receive() -> dict[str, Any]:
        nonlocal received
        if received:
            await asyncio.Event().wait()  # the client stays: nothing more comes
        received = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    await app(_scope(method, path, headers), receive, send)
    return status


async def measure(appends: int, mark: Callable[[], None]) -> None:
    from lastword.core import open_core
    from lastword.main import create_app
    from lastword.rules.ds import AppendRequest
    from lastword.settings import Settings

    directory = tempfile.mkdtemp(prefix="lastword-ds-stages-")
    try:
        settings = Settings(database_url=f"sqlite:///{directory}/ds.db", log_level="warning")
        async with open_core(settings, background=False) as core:
            app = create_app(core=core)
            async with app.router.lifespan_context(app):
                headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(MESSAGE)).encode())]
                if await _call(app, "PUT", "/ds" + PATH, b"", [(b"content-type", b"text/plain")]) != 201:
                    raise RuntimeError("the stream was not created")
                for _ in range(50):  # warm-up: imports, caches, the first transactions
                    if await _call(app, "POST", "/ds" + PATH, MESSAGE, headers) not in (200, 204):
                        raise RuntimeError("an append was refused")
                streams = core.streams
                request = AppendRequest(path=PATH, content_type="text/plain", body=MESSAGE, close=False,
                                        producer=None, stream_seq=None, max_messages=streams.max_json_messages)
                gc.collect()
                gc.freeze()  # as lastword serve does
                mark()
                for _ in range(appends):
                    await _call(app, "POST", "/ds" + PATH, MESSAGE, headers)
                mark()
                for _ in range(appends):
                    await streams.append(request)
                mark()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.ds_stages", description=__doc__.split("\n\n")[0])
    parser.add_argument("--appends", type=int, default=1000, help="appends a stretch counts (default 1,000)")
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)  # the run callgrind counts
    args = parser.parse_args(argv)
    if args.inside:
        import uvloop

        uvloop.run(measure(args.appends, marker()))  # the loop lastword serve runs on
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed")
    counts = callgrind_counts("bench.ds_stages", ["--inside", "--appends", str(args.appends)])
    # Dump 1 is everything before the first marker; dumps 2 and 3 the stretches.
    app, service = (counts[1 + position] / args.appends for position in range(len(STRETCHES)))
    print(f"instructions per /ds append ({args.appends:,} appends of {len(MESSAGE)} bytes, text/plain, in process):")
    print(f"  app (ASGI, as uvicorn calls it)  {app:>10,.0f}")
    print(f"  service and store                {service:>10,.0f}")
    print(f"  the app's HTTP layer             {app - service:>10,.0f}")


if __name__ == "__main__":
    main()
