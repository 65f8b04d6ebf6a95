"""Crash loop for Durable Streams (SPEC §17): ``kill -9`` a real server again and again while
idempotent producers append to ``/ds`` streams, and lose nothing acknowledged.

The runs' crash loop (:mod:`tests.test_crash_loop`) does this for ``/v1``; this one does it for
the Durable Streams face, on three kinds of stream: a byte stream (``application/octet-stream``,
one entry per append), a JSON stream (each append an array of 1–4 messages), and a run written
as a stream (``/ds/runs/{runId}``, each message a §4 event). Every append carries
``Producer-Id``/``Producer-Epoch``/``Producer-Seq``, so a request whose answer was lost is sent
again as it was and stored once (204 if it had been). The kills fall at random moments (seeded).

After every restart, with the producers held at a gate, each stream is read whole from offset
``-1``: its entries are exactly the first ones its producer sent, in order, each once, and at
least every acknowledged one.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.servers import ServerProcess
from tests.test_crash_loop import GATE_TIMEOUT, REQUEST_TIMEOUT, TEST_DEADLINE, Gate, Retrying

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
SEED = 20_261_201
KILLS = 12
KINDS = ("bytes", "json", "run")


@dataclass
class StreamScript:
    """What one producer appended to one stream, and how much of it was acknowledged."""

    kind: str
    path: str
    #: Every entry handed to a request, in send order (bytes, or a JSON message).
    sent: list[Any] = field(default_factory=list)
    acknowledged: int = 0
    seq: int = 0


class Producer(Retrying):
    """One client thread appending to its stream of one kind, retrying until answered."""

    def __init__(self, kind: str, url: str, gate: Gate, stop: threading.Event) -> None:
        self.rng = random.Random(f"{SEED}-{kind}")
        self.gate = gate
        self.stop = stop
        self.client = httpx.Client(base_url=url, timeout=REQUEST_TIMEOUT)
        self.script = StreamScript(kind, f"/ds/runs/ds-crash-{kind}" if kind == "run" else f"/ds/crash/{kind}")
        self.retries = 0
        self.failure: BaseException | None = None

    def entries(self, number: int) -> list[Any]:
        if self.script.kind == "bytes":
            return [f"entry {number} ".encode() + bytes(self.rng.randrange(256) for _ in range(self.rng.randint(0, 40)))]
        count = self.rng.randint(1, 4)
        if self.script.kind == "json":
            return [{"n": number, "i": i, "text": "\u00e9t\u00e9 \u6f22"} for i in range(count)]
        return [{"type": "x-note", "n": number, "i": i, "eventId": f"e-{number}-{i}"} for i in range(count)]

    def append(self) -> None:
        script = self.script
        batch = self.entries(script.seq)
        script.sent.extend(batch)
        binary = script.kind == "bytes"
        headers = {"Content-Type": "application/octet-stream" if binary else "application/json",
                   "Producer-Id": "crash", "Producer-Epoch": "0", "Producer-Seq": str(script.seq)}
        body = batch[0] if binary else orjson.dumps(batch)
        response = self.until_answered(lambda: self.client.post(script.path, content=body, headers=headers))
        # 200 stored now; 204 stored by an earlier attempt whose answer was lost.
        assert response.status_code in (200, 204), response.text
        script.seq += 1
        script.acknowledged = len(script.sent)

    def run(self) -> None:
        try:
            kind = "application/octet-stream" if self.script.kind == "bytes" else "application/json"
            created = self.until_answered(lambda: self.client.put(self.script.path, headers={"Content-Type": kind}))
            assert created.status_code in (200, 201), created.text
            while not self.stop.is_set():
                self.append()
                time.sleep(self.rng.uniform(0.0, 0.03))
        except BaseException as error:  # reported by the test thread
            self.failure = error
        finally:
            self.client.close()


def read_whole(client: httpx.Client, script: StreamScript) -> list[Any]:
    """Every entry of the stream, read by offset from the start until up to date."""
    entries: list[Any] = []
    offset = "-1"
    while True:
        response = client.get(script.path, params={"offset": offset})
        assert response.status_code == 200, response.text
        if script.kind == "bytes":
            entries.append(response.content)
        else:
            entries.extend(response.json())
        offset = response.headers["Stream-Next-Offset"]
        if response.headers.get("Stream-Up-To-Date") == "true":
            break
    if script.kind == "bytes":
        whole = b"".join(entries)
        return [whole] if whole else []
    if script.kind == "run":
        return [event for event in entries if event["type"] == "x-note"]
    return entries


def check(client: httpx.Client, script: StreamScript) -> int:
    """Check one stream against its script; how many entries it holds."""
    acknowledged, sent = script.acknowledged, list(script.sent)  # read before the stream
    found = client.head(script.path)
    if found.status_code == 404:
        assert not acknowledged, "a stream that took appends is gone"
        return 0
    stored = read_whole(client, script)
    if script.kind == "bytes":
        # One append, one entry: the stream is the bytes of the first k appends back to back.
        whole = stored[0] if stored else b""
        prefixes = [b"".join(sent[:k]) for k in range(len(sent) + 1)]
        assert whole in prefixes, "the bytes are not exactly the appends sent, in order, each once"
        count = prefixes.index(whole)
        assert count >= acknowledged, "an acknowledged append is missing"
        return count
    assert len(stored) >= acknowledged, "an acknowledged message is missing"
    assert stored == sent[: len(stored)], "the stream is not exactly the messages sent, in order, each once"
    return len(stored)


def test_nothing_acknowledged_is_lost_from_a_stream_across_repeated_kill_9(tmp_path: Path) -> None:
    """Twelve kill -9s at random moments while producers append to a byte stream, a JSON stream
    and a run written as a stream: after each restart every acknowledged entry is there once."""
    rng = random.Random(SEED)
    server = ServerProcess({
        "LASTWORD_DATABASE_URL": f"sqlite:///{tmp_path / 'lastword.db'}",
        "LASTWORD_LEASE_SECONDS": "3600",
        "LASTWORD_LOG_LEVEL": "error",
    }, cwd=REPO).start()
    gate, stop = Gate(), threading.Event()
    producers = [Producer(kind, server.url, gate, stop) for kind in KINDS]
    threads = [threading.Thread(target=producer.run, name=f"producer-{producer.script.kind}")
               for producer in producers]
    deadline = time.monotonic() + TEST_DEADLINE
    checked: list[int] = []
    try:
        for thread in threads:
            thread.start()
        with httpx.Client(base_url=server.url, timeout=REQUEST_TIMEOUT) as checker:
            for _ in range(KILLS):
                assert time.monotonic() < deadline, "the crash loop ran past its time bound"
                time.sleep(rng.uniform(0.05, 0.6))  # a random point in the producers' work
                server.kill()
                time.sleep(rng.uniform(0.0, 0.2))  # producers meet refused connections meanwhile
                server.start()
                gate.close()
                try:
                    assert all(p.failure is None for p in producers), [p.failure for p in producers]
                    checked.append(sum(check(checker, p.script) for p in producers))
                finally:
                    gate.open()
            stop.set()
            for thread in threads:
                thread.join(GATE_TIMEOUT)
            assert not any(thread.is_alive() for thread in threads), "a producer did not finish"
            for producer in producers:
                if producer.failure is not None:
                    raise producer.failure
            for producer in producers:
                script = producer.script
                assert script.acknowledged == len(script.sent)
                assert check(checker, script) == len(script.sent)
    finally:
        stop.set()
        gate.open()
        for thread in threads:
            thread.join(GATE_TIMEOUT)
        server.kill()
    # The loop did what it claims: producers kept making progress, and kills cut requests.
    assert checked == sorted(checked) and checked[-1] > checked[0]
    assert sum(producer.retries for producer in producers) >= KILLS
