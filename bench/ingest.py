"""(a) Batched ingest: 1,000 small events per request, against what a user would pick instead.

Variants, each given the same events in the same batches, interleaved round by round so that
a noisy neighbour slows them all alike (every figure is the median of its rounds):

* lastword over HTTP: JSON arrays and NDJSON on SQLite (``normal`` durability), JSON arrays
  with producer ``eventId``s (the idempotent path), JSON arrays from four concurrent producers,
  JSON arrays with ``full`` durability, and JSON arrays and NDJSON on PostgreSQL when reachable;
* Redis Streams with redis-py: one pipelined ``XADD`` per event, one pipeline per batch, the
  event's JSON as the entry's one field (no validation, no fold, no idempotency);
* NATS JetStream with nats-py: a file-backed stream, each event published asynchronously with a
  ``Nats-Msg-Id`` header (JetStream's deduplication), a batch done when every ack is in;
* SQLite straight: ``executemany`` into the service's own ``events`` table with the same
  pragmas, one transaction per batch (no HTTP, no validation, no fold).

lastword's figures include the client's HTTP round trip and the server's JSON parsing,
validation, fold and commit; each request is answered only once its batch is durable.

Each lastword variant also reports the server's CPU time per 1,000 events (the process's user
and system time over its rounds, median). On this shared two-core machine a neighbour moves a
round's rate by a quarter; the CPU a batch costs moves far less, so a regression of a few per
cent in lastword's own code shows there first (``python -m bench.ab``).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import orjson

from bench import http
from bench.context import Context, Skip
from bench.report import Result
from bench.server import Server
from bench.workload import Event, batches, json_array, mixed_events, ndjson

TITLE = "Batched ingest (1,000 small events per request)"
BATCH = 1000


async def _create_run(conn: http.Connection, run_id: str) -> None:
    await conn.post_json("/v1/runs", {"runId": run_id, "leaseSeconds": 0}, expect=201)


Variant = Callable[[int], Awaitable[float]]  # one round over the first N batches: its seconds


def _http_variant(server: Server, bodies: Sequence[bytes], content_type: str, cpu: list[float],
                  producers: int = 1) -> Variant:
    """One round: post the bodies to fresh runs (``producers`` at once); the seconds taken.
    The server's CPU seconds per event of each round are appended to ``cpu``."""

    async def one_round(count: int) -> float:
        connections = [await http.connect(server.url) for _ in range(producers)]
        runs = [f"bench-a-{secrets.token_hex(6)}" for _ in range(producers)]
        for conn, run_id in zip(connections, runs):
            await _create_run(conn, run_id)
        shares = [
            [http.request_bytes("POST", f"/v1/runs/{run_id}/events", body, content_type)
             for body in bodies[:count][index::producers]]
            for index, run_id in enumerate(runs)
        ]

        async def produce(conn: http.Connection, requests: list[bytes]) -> None:
            for raw in requests:
                status, answer = await conn.send(raw)
                if status != 200:
                    raise http.HttpError(f"ingest answered {status}: {answer[:300]!r}")

        cpu_before = server.cpu_seconds()
        started = time.perf_counter()
        await asyncio.gather(*(produce(conn, share) for conn, share in zip(connections, shares)))
        elapsed = time.perf_counter() - started
        cpu.append((server.cpu_seconds() - cpu_before) / (count * BATCH))
        for conn in connections:
            conn.close()
        return elapsed

    return one_round


def _redis_variant(url: str, event_batches: Sequence[Sequence[Event]]) -> Variant:
    import redis

    client = redis.Redis.from_url(url)
    client.ping()

    async def one_round(count: int) -> float:
        key = f"lastword-bench:{secrets.token_hex(6)}"
        started = time.perf_counter()
        for batch in event_batches[:count]:
            pipe = client.pipeline(transaction=False)
            for event in batch:
                pipe.xadd(key, {"event": orjson.dumps(event)})
            pipe.execute()
        elapsed = time.perf_counter() - started
        client.delete(key)
        return elapsed

    return one_round


def _postgres_copy_variant(url: str, event_batches: Sequence[Sequence[Event]]) -> Variant:
    """PostgreSQL straight: ``COPY`` of the same rows into the service's own ``events`` table."""
    import psycopg
    from lastword.store.sql.rows import EVENT_COLUMNS

    connection = psycopg.connect(url, autocommit=True)

    async def one_round(count: int) -> float:
        run_id = f"bench-copy-{secrets.token_hex(6)}"
        seq = 0
        started = time.perf_counter()
        for batch in event_batches[:count]:
            now = time.time()
            with connection.transaction(), connection.cursor() as cursor:
                with cursor.copy(f"COPY events ({EVENT_COLUMNS}) FROM STDIN") as copy:
                    for event in batch:
                        seq += 1
                        copy.write_row((run_id, seq, 1, event["type"], event.get("eventId"),
                                        orjson.dumps(event).decode(), now))
        return time.perf_counter() - started

    return one_round


NATS_STREAM = "LASTWORD_BENCH"


async def _nats_variant(url: str, event_batches: Sequence[Sequence[Event]]) -> tuple[Variant, Callable[[], Awaitable[None]]]:
    """JetStream: the same batches, published asynchronously, a batch done when all are acked."""
    import nats
    from nats.js.api import StorageType, StreamConfig

    client = await nats.connect(url, connect_timeout=2, max_reconnect_attempts=0)
    stream = client.jetstream()
    with contextlib.suppress(Exception):
        await stream.delete_stream(NATS_STREAM)
    await stream.add_stream(StreamConfig(
        name=NATS_STREAM, subjects=["lastwordbench.>"], storage=StorageType.FILE, duplicate_window=120.0,
    ))
    payloads = [[orjson.dumps(event) for event in batch] for batch in event_batches]

    async def one_round(count: int) -> float:
        key = secrets.token_hex(6)
        subject = f"lastwordbench.{key}"
        number = 0
        started = time.perf_counter()
        for batch in payloads[:count]:
            acks = []
            for payload in batch:
                number += 1
                acks.append(await stream.publish_async(subject, payload, headers={"Nats-Msg-Id": f"{key}-{number}"}))
            for ack in await asyncio.gather(*acks):
                if ack.duplicate:
                    raise RuntimeError("JetStream took a fresh event for a duplicate")
        elapsed = time.perf_counter() - started
        await stream.purge_stream(NATS_STREAM, subject=subject)
        return elapsed

    async def close() -> None:
        with contextlib.suppress(Exception):
            await stream.delete_stream(NATS_STREAM)
        await client.close()

    return one_round, close


async def _sqlite_variant(directory: Path, event_batches: Sequence[Sequence[Event]]) -> Variant:
    from lastword.store.sqlite.store import SqliteStore

    # The store makes its own schema (store/sql/schema.py, the one source), then lets the file go.
    store = SqliteStore(f"sqlite:///{directory / 'direct.db'}", default_lease_seconds=600)
    await store.open()
    await store.close()
    connection = sqlite3.connect(directory / "direct.db", isolation_level=None)
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA synchronous=NORMAL")

    async def one_round(count: int) -> float:
        run_id = f"bench-direct-{secrets.token_hex(6)}"
        seq = 0
        started = time.perf_counter()
        for batch in event_batches[:count]:
            now = time.time()
            rows = []
            for event in batch:
                seq += 1
                rows.append((run_id, seq, 1, event["type"], event.get("eventId"), orjson.dumps(event).decode(), now))
            connection.execute("BEGIN")
            connection.executemany(
                "INSERT INTO events (run_id, seq, turn, type, event_id, body, received_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)", rows,
            )
            connection.execute("COMMIT")
        return time.perf_counter() - started

    return one_round


async def _measure(ctx: Context, result: Result, redis_url: str, nats_url: str) -> None:
    per_round = ctx.pick(100, 20)  # batches per variant per round
    rounds = ctx.pick(3, 1)
    events = mixed_events(BATCH * per_round, seed=1)
    with_ids = mixed_events(BATCH * per_round, seed=1, event_ids="e")
    event_batches = batches(events, BATCH)
    json_bodies = [json_array(batch) for batch in event_batches]
    ndjson_bodies = [ndjson(batch) for batch in event_batches]
    id_bodies = [json_array(batch) for batch in batches(with_ids, BATCH)]
    total = len(events)
    size = sum(len(body) for body in json_bodies) / total
    result.note(f"{total:,} events per variant per round, {rounds} round(s), {size:.0f} bytes per event as JSON")

    variants: dict[str, tuple[str, Variant]] = {}
    cpu: dict[str, list[float]] = {}  # lastword's variants: the server's CPU seconds per event, by round

    def http_variant(key: str, server: Server, bodies: Sequence[bytes], content_type: str,
                     producers: int = 1) -> Variant:
        return _http_variant(server, bodies, content_type, cpu.setdefault(key, []), producers)

    profiled: dict[str, Server] = {}  # the variants py-spy watches (--profile), on their server
    closers: list[Callable[[], Awaitable[None]]] = []
    with contextlib.ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="lastword-bench-a-")))
        normal = stack.enter_context(Server(durability="normal"))
        full = stack.enter_context(Server(durability="full"))
        profiled.update(sqlite_json=normal, sqlite_ndjson=normal)
        variants["sqlite_json"] = (
            "lastword, SQLite, JSON arrays", http_variant("sqlite_json", normal, json_bodies, "application/json"))
        variants["sqlite_ndjson"] = (
            "lastword, SQLite, NDJSON", http_variant("sqlite_ndjson", normal, ndjson_bodies, "application/x-ndjson"))
        variants["sqlite_json_ids"] = ("lastword, SQLite, JSON arrays with eventIds",
                                       http_variant("sqlite_json_ids", normal, id_bodies, "application/json"))
        variants["sqlite_json_4"] = ("lastword, SQLite, JSON arrays, 4 producers",
                                     http_variant("sqlite_json_4", normal, json_bodies, "application/json", 4))
        variants["sqlite_full_json"] = ("lastword, SQLite durability=full, JSON arrays",
                                        http_variant("sqlite_full_json", full, json_bodies, "application/json"))
        try:
            pg_url = stack.enter_context(ctx.postgres_database())
            postgres = stack.enter_context(Server(database_url=pg_url))
        except Skip as reason:
            result.note(f"PostgreSQL skipped: {reason}")
        except RuntimeError as error:
            result.note(f"PostgreSQL skipped: the server did not start: {error}")
        else:
            profiled["postgres_json"] = postgres
            variants["postgres_json"] = ("lastword, PostgreSQL, JSON arrays",
                                         http_variant("postgres_json", postgres, json_bodies, "application/json"))
            variants["postgres_ndjson"] = ("lastword, PostgreSQL, NDJSON",
                                           http_variant("postgres_ndjson", postgres, ndjson_bodies, "application/x-ndjson"))
            variants["postgres_copy"] = (
                "PostgreSQL COPY into the same table, no HTTP", _postgres_copy_variant(pg_url, event_batches))
        try:
            variants["redis"] = ("Redis Streams, redis-py pipelined XADD", _redis_variant(redis_url, event_batches))
        except Exception as error:  # Redis down or redis-py missing: say so, keep the rest
            result.note(f"Redis skipped: {error}")
        try:
            nats_round, nats_close = await _nats_variant(nats_url, event_batches)
        except Exception as error:  # NATS down or nats-py missing: say so, keep the rest
            result.note(f"NATS JetStream skipped: {error!r}")
        else:
            variants["nats"] = ("NATS JetStream, nats-py async publish with Nats-Msg-Id", nats_round)
            closers.append(nats_close)
        variants["direct_sqlite"] = ("SQLite executemany, no HTTP", await _sqlite_variant(workdir, event_batches))

        # Warm-up: imports, connections, caches and the first pages of each database file.
        for _, variant in variants.values():
            await variant(10)
        times: dict[str, list[float]] = {key: [] for key in variants}
        for round_number in range(rounds):
            for key, (_, variant) in variants.items():
                target = profiled.get(key) if round_number == rounds - 1 else None
                with ctx.profiler.attach(target, f"a-{key}") if target else contextlib.nullcontext():
                    times[key].append(await variant(per_round))
        for close in closers:
            await close()

    rates = {key: total / statistics.median(values) for key, values in times.items()}
    for key, (label, _) in variants.items():
        spread = f"rounds: {', '.join(f'{total / t:,.0f}' for t in times[key])}" if rounds > 1 else ""
        result.add(key, label, rates[key], "events/s", spread)
    result.series["rates"] = {variants[key][0]: rate for key, rate in rates.items()}
    for key, values in cpu.items():
        timed = values[-rounds:]  # the warm-up's round first: not a timed one
        spread = f"rounds: {', '.join(f'{1e6 * v:.1f}' for v in timed)}" if rounds > 1 else ""
        what = variants[key][0].removeprefix("lastword, ")
        result.add(f"{key}_cpu", f"server CPU per 1,000 events: {what}", 1e6 * statistics.median(timed), "ms", spread)

    def ratio(key: str, label: str, top: str, bottom: str) -> None:
        if top in rates and bottom in rates:
            result.ratio(key, label, rates[top] / rates[bottom])

    ratio("json_vs_redis", "lastword SQLite JSON / Redis Streams", "sqlite_json", "redis")
    ratio("ndjson_vs_redis", "lastword SQLite NDJSON / Redis Streams", "sqlite_ndjson", "redis")
    ratio("json_vs_nats", "lastword SQLite JSON / NATS JetStream", "sqlite_json", "nats")
    ratio("ndjson_vs_nats", "lastword SQLite NDJSON / NATS JetStream", "sqlite_ndjson", "nats")
    ratio("json_vs_direct", "lastword SQLite JSON / SQLite executemany", "sqlite_json", "direct_sqlite")
    ratio("ids_vs_plain", "with eventIds / without", "sqlite_json_ids", "sqlite_json")
    ratio("four_vs_one", "4 producers / 1 producer", "sqlite_json_4", "sqlite_json")
    ratio("full_vs_normal", "durability full / normal", "sqlite_full_json", "sqlite_json")
    ratio("postgres_vs_sqlite", "PostgreSQL JSON / SQLite JSON", "postgres_json", "sqlite_json")
    ratio("postgres_vs_copy", "PostgreSQL JSON / raw COPY", "postgres_json", "postgres_copy")
    ratio("postgres_vs_redis", "PostgreSQL JSON / Redis Streams", "postgres_json", "redis")
    best = max(rates["sqlite_json"], rates["sqlite_ndjson"])
    if "postgres_json" in rates:
        result.target(">= 0.9x SQLite (PostgreSQL JSON / SQLite JSON)", rates["postgres_json"] / rates["sqlite_json"],
                      0.9, "x", higher_is_better=True)
    result.target(">= 100,000 events/s (SQLite, best of JSON and NDJSON, 1 producer)", best, 100_000,
                  "events/s", higher_is_better=True)
    if "redis" in rates:
        result.target(">= 1.5x Redis Streams (same)", best / rates["redis"], 1.5, "x", higher_is_better=True)
    if "nats" in rates:
        result.target(">= 1.0x NATS JetStream (same)", best / rates["nats"], 1.0, "x", higher_is_better=True)


def run(ctx: Context) -> Result:
    result = Result("a", TITLE)
    http.run(_measure(ctx, result, "redis://127.0.0.1:6379/0", "nats://127.0.0.1:4222"))
    return result
