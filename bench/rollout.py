"""(r) A rollout seen from a parent: two replicas on PostgreSQL restarted one after the other
while children stream, measured from the parent's streams (issue 24's closing figure).

Two ``lastword serve`` replicas share one PostgreSQL database. A client-side balancer stands in
for a Kubernetes Service: each request goes to a replica in rotation, round robin; a request
refused (connection refused or reset, 503) is retried at once on another, with the same
``eventId`` (so a retry of a write that was stored is counted as a duplicate, not stored twice).
A rollout restarts each replica in turn as a Deployment would: out of rotation and SIGTERM
together (the endpoint is removed as the pod terminates), its drain, then a new process on the
same database, back in rotation once its ``/readyz`` answers 200; then the other one.

Each of the children posts an ``assistant/chunk`` every :data:`CHUNK_INTERVAL` seconds for the
whole rollout; the parent follows every child's stream (``/v1/runs/{id}/stream?include=chunks``)
and resumes each, by its last id, on whichever replica the balancer gives it after the drain's
``server/reconnect`` or a cut. Figures: how long the parent's streams pause (the longest gap
between two chunks one stream gives, against the children's steady interval; and each chunk's
time from its post being answered to the parent holding it), and the chunks lost or repeated
(counted over every chunk a child's post was answered 200 for; zero of each is the claim).
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from bench import http
from bench.context import Context
from bench.report import Result
from bench.server import Server

TITLE = "Rollout: two replicas on PostgreSQL restarted in turn while children stream"
#: Seconds between two chunks of one child.
CHUNK_INTERVAL = 0.2
#: Refused requests are retried on another replica after this pause (a client's backoff).
RETRY_PAUSE = 0.05


class Balancer:
    """The replicas in rotation, handed out round robin."""

    def __init__(self) -> None:
        self.rotation: list[str] = []
        self._turn = itertools.count()

    def pick(self) -> str:
        if not self.rotation:
            raise RuntimeError("no replica in rotation")
        return self.rotation[next(self._turn) % len(self.rotation)]


@dataclass
class Child:
    run_id: str
    posted: dict[int, float] = field(default_factory=dict)  # n -> when its post was answered 200
    received: list[tuple[int, float]] = field(default_factory=list)  # (n, when the parent had it)
    post_retries: int = 0
    resumes: int = 0


async def _post(client: httpx.AsyncClient, balancer: Balancer, path: str, body: Any, child: Child | None) -> None:
    """POST through the balancer until a replica answers 200 or 201."""
    while True:
        try:
            response = await client.post(balancer.pick() + path, json=body)
            if response.status_code in (200, 201):
                return
            if response.status_code != 503:
                raise RuntimeError(f"POST {path}: {response.status_code} {response.text[:300]}")
        except (httpx.TransportError, RuntimeError) as error:
            if isinstance(error, RuntimeError) and "no replica" not in str(error):
                raise
        if child is not None:
            child.post_retries += 1
        await asyncio.sleep(RETRY_PAUSE)


async def _produce(client: httpx.AsyncClient, balancer: Balancer, child: Child, stop: asyncio.Event) -> None:
    n = 0
    next_at = time.perf_counter()
    while not stop.is_set():
        body = {"type": "assistant/chunk", "eventId": f"{child.run_id}-{n}", "delta": {"type": "text", "text": f"{n} "}}
        await _post(client, balancer, f"/v1/runs/{child.run_id}/events", body, child)
        child.posted[n] = time.perf_counter()
        n += 1
        next_at += CHUNK_INTERVAL
        await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
    await _post(client, balancer, f"/v1/runs/{child.run_id}/end", {"stopReason": "completed"}, child)


async def _follow(client: httpx.AsyncClient, balancer: Balancer, child: Child) -> None:
    """The parent's stream of one child, resumed by its last id until the child's end."""
    last_id: str | None = None
    while True:
        headers = {"accept": "text/event-stream"}
        if last_id is not None:
            headers["last-event-id"] = last_id
        try:
            url = balancer.pick() + f"/v1/runs/{child.run_id}/stream?include=chunks"
            async with client.stream("GET", url, headers=headers) as response:
                if response.status_code != 200:
                    await response.aread()
                    raise httpx.TransportError(f"stream refused: {response.status_code}")
                event, data, event_id = "", "", None
                async for line in response.aiter_lines():
                    if line.startswith("id:"):
                        event_id = line[3:].strip()
                    elif line.startswith("event:"):
                        event = line[6:].strip()
                    elif line.startswith("data:"):
                        data += line[5:].strip()
                    elif line == "":
                        if event == "assistant/chunk":
                            text = orjson.loads(data)["delta"]["text"]
                            child.received.append((int(text), time.perf_counter()))
                        if event_id is not None and event != "server/reconnect":
                            last_id = event_id
                        if event == "subagent/end":
                            return
                        event, data, event_id = "", "", None
        except (httpx.TransportError, RuntimeError) as error:
            if isinstance(error, RuntimeError) and "no replica" not in str(error):
                raise
        child.resumes += 1
        await asyncio.sleep(RETRY_PAUSE)


async def _restart(balancer: Balancer, replicas: list[Server], index: int) -> dict[str, float]:
    """One pod replaced: out of rotation and SIGTERM, the drain, a new process, back in once ready."""
    server = replicas[index]
    began = time.perf_counter()
    balancer.rotation.remove(server.url)
    await asyncio.to_thread(server.stop)
    drained = time.perf_counter() - began
    status = server.process.returncode if server.process is not None else None
    await asyncio.to_thread(server.start)
    balancer.rotation.append(server.url)
    return {"drain": drained, "ready": server.ready_seconds, "exit": float(status if status is not None else -1)}


async def _measure(ctx: Context, result: Result, database_url: str) -> None:
    children_count = ctx.pick(50, 10)
    steady = ctx.pick(8.0, 3.0)
    env = {"LASTWORD_KEEPALIVE_SECONDS": "1", "LASTWORD_DRAIN_SECONDS": "10", "LASTWORD_LEASE_SECONDS": "0"}
    replicas = [Server(database_url=database_url, env=env) for _ in range(2)]
    try:
        for server in replicas:
            server.start()
        balancer = Balancer()
        balancer.rotation.extend(server.url for server in replicas)
        limits = httpx.Limits(max_connections=4 * children_count, max_keepalive_connections=2 * children_count)
        async with httpx.AsyncClient(timeout=httpx.Timeout(30.0), limits=limits) as client:
            prefix = f"bench-r-{secrets.token_hex(4)}"
            parent = f"{prefix}-parent"
            await _post(client, balancer, "/v1/runs", {"runId": parent}, None)
            children = [Child(f"{prefix}-{i}") for i in range(children_count)]
            for child in children:
                await _post(client, balancer, "/v1/runs", {"runId": child.run_id, "parentRunId": parent}, None)
            followers = [asyncio.create_task(_follow(client, balancer, child)) for child in children]
            stop = asyncio.Event()
            producers = [asyncio.create_task(_produce(client, balancer, child, stop)) for child in children]
            await asyncio.sleep(steady)
            windows: list[tuple[float, float]] = []
            restarts: list[dict[str, float]] = []
            for index in range(len(replicas)):
                began = time.perf_counter()
                restarts.append(await _restart(balancer, replicas, index))
                windows.append((began, time.perf_counter()))
                await asyncio.sleep(steady)
            stop.set()
            await asyncio.wait_for(asyncio.gather(*producers), 60)
            await asyncio.wait_for(asyncio.gather(*followers), 60)
    finally:
        for server in replicas:
            server.cleanup()

    lost = repeated = out_of_order = 0
    latencies: list[float] = []
    in_rollout: list[float] = []
    gaps: list[float] = []
    steady_gaps: list[float] = []  # gaps that overlap no restart: what the load alone costs
    for child in children:
        numbers = [n for n, _ in child.received]
        lost += len(set(child.posted) - set(numbers))
        repeated += len(numbers) - len(set(numbers))
        out_of_order += sum(1 for a, b in itertools.pairwise(numbers) if b <= a)
        for n, at in child.received:
            if n in child.posted:
                latency = at - child.posted[n]
                latencies.append(latency)
                if any(start <= child.posted[n] <= end + 1 for start, end in windows):
                    in_rollout.append(latency)
        for (_, a), (_, b) in itertools.pairwise(child.received):
            gaps.append(b - a)
            if not any(a <= end and b >= start for start, end in windows):
                steady_gaps.append(b - a)
    total = sum(len(child.posted) for child in children)
    result.add("children", "children streaming", children_count, "", f"a chunk every {CHUNK_INTERVAL:g} s each")
    result.add("chunks", "chunks posted (answered 200)", total, "")
    result.add("lost", "chunks lost (posted, never streamed to the parent)", lost, "")
    result.add("repeated", "chunks repeated on the parent's streams", repeated, "")
    result.add("out_of_order", "chunks out of order", out_of_order, "")
    result.add("pause_max", "longest pause of one parent stream (gap between two chunks)", max(gaps) * 1000, "ms",
               f"steady interval {CHUNK_INTERVAL * 1000:.0f} ms")
    if steady_gaps:
        result.add("steady_pause_max", "…of gaps overlapping no restart: longest", max(steady_gaps) * 1000, "ms")
    result.add("gap_p99", "gap between two chunks on one stream: p99", http.percentile(gaps, 0.99) * 1000, "ms")
    result.add("latency_p50", "post answered → parent holds the chunk: p50", http.percentile(latencies, 0.5) * 1000,
               "ms")
    result.add("latency_p99", "post answered → parent holds the chunk: p99", http.percentile(latencies, 0.99) * 1000,
               "ms")
    result.add("latency_max", "post answered → parent holds the chunk: max", max(latencies) * 1000, "ms")
    if in_rollout:
        result.add("rollout_latency_max", "…of chunks posted during a restart: max", max(in_rollout) * 1000, "ms")
    for index, restart in enumerate(restarts):
        name = "ab"[index]
        result.add(f"drain_{name}", f"replica {name.upper()}: SIGTERM → exit", restart["drain"] * 1000, "ms",
                   f"exit status {restart['exit']:.0f}")
        result.add(f"ready_{name}", f"replica {name.upper()}: start → /readyz 200", restart["ready"] * 1000, "ms")
    result.add("resumes", "parent stream resumptions", sum(child.resumes for child in children), "")
    result.add("post_retries", "children's posts retried on another replica", sum(c.post_retries for c in children),
               "")
    result.target("chunks lost or repeated", float(lost + repeated + out_of_order), 0.0, "", higher_is_better=False)


def run(ctx: Context) -> Result:
    result = Result("r", TITLE)
    with ctx.postgres_database() as database_url:
        http.run(_measure(ctx, result, database_url))
    return result
