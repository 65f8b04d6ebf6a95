"""The fold cache is bounded by the bytes its folds hold (``LASTWORD_FOLD_CACHE_BYTES``), not only
by their number (issue 22, item 9): many open turns streaming long text keep at most the bound in
memory, and a fold the bound pushed out is rebuilt from the log with the same output.

Measured in a real ``lastword serve`` (its resident memory, in one run, as a ratio to the text
pushed; no timing), and on :class:`FoldCache` itself for the bound.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import httpx
import orjson
import pytest

from lastword.store.sql.folds import FOLD_OVERHEAD_BYTES, FoldCache, MeasuredFold
from tests.servers import ServerProcess
from tests.test_provider_memory import memory

#: The bound the server is given, and what the open turns push (twenty times more).
BOUND = 4 * 1024 * 1024
RUNS = 40
PIECES = 4
PIECE_CHARS = 512 * 1024


def text_of(run: int, piece: int) -> str:
    return chr(ord("a") + (run + piece) % 26) * PIECE_CHARS


def chunks(run: int) -> bytes:
    return b"\n".join(
        orjson.dumps({"type": "assistant/chunk", "delta": {"type": "text", "text": text_of(run, piece)}})
        for piece in range(PIECES)
    )


@pytest.mark.slow
def test_open_turns_keep_at_most_the_byte_bound_and_evicted_folds_answer_the_same(
    database_url: str, tmp_path: Path
) -> None:
    """40 open turns of 2 MB of text each, with a 4 MiB bound: the server keeps far less than
    the 80 MB pushed, and every turn's output (its fold rebuilt from the log) is its whole text."""
    server = ServerProcess({"LASTWORD_DATABASE_URL": database_url, "LASTWORD_LOG_LEVEL": "warning",
                            "LASTWORD_FOLD_CACHE_BYTES": str(BOUND)}, tmp_path)
    ndjson = {"content-type": "application/x-ndjson"}
    with contextlib.closing(server.start()), httpx.Client(base_url=server.url, timeout=120) as api:
        assert server.process is not None
        # Warm up: the first run of a kind loads code and fills caches that are not its cost.
        api.post("/v1/runs", json={"runId": "warm"}).raise_for_status()
        api.post("/v1/runs/warm/events", content=chunks(0), headers=ndjson).raise_for_status()
        before = memory(server.process.pid)["VmRSS"]
        for run in range(RUNS):
            api.post("/v1/runs", json={"runId": f"r{run}"}).raise_for_status()
            api.post(f"/v1/runs/r{run}/events", content=chunks(run), headers=ndjson).raise_for_status()
        kept = memory(server.process.pid)["VmRSS"] - before
        pushed = RUNS * PIECES * PIECE_CHARS
        print(f"open turns: pushed {pushed} bytes of text, the server kept {kept} bytes: {kept / pushed:.2f}x")
        assert kept / pushed <= 0.25, f"the server kept {kept / pushed:.2f}x the text its open turns pushed"
        for run in range(RUNS):
            result = api.get(f"/v1/runs/r{run}/result").json()
            assert result["output"] == [{"type": "text", "text": "".join(text_of(run, p) for p in range(PIECES))}]


def test_the_cache_drops_the_least_recently_used_folds_past_its_bytes() -> None:
    """Folds counted past the byte bound push out the least recently used; one in use stays."""
    cache = FoldCache(size=1000, max_bytes=10 * 1024)
    for turn in range(20):
        slot = cache.slot("run", turn)
        slot.acquire()
        slot.fold = MeasuredFold()
        slot.fold.push({"type": "assistant/chunk", "delta": {"type": "text", "text": "x" * 3000}})
        slot.release(committed=True)
        assert cache.held_bytes <= 10 * 1024
    assert len(cache) == 2  # (3000 + the overhead) twice is under 10 KiB, three times over
    assert cache.held_bytes == 2 * (3000 + FOLD_OVERHEAD_BYTES)
    kept = [cache.slot("run", turn).fold is not None for turn in (18, 19)]
    assert kept == [True, True]
    # A fold in use (its lock held) is not dropped even when it alone is past the bound.
    big = cache.slot("big", 1)
    big.acquire()
    big.fold = MeasuredFold()
    big.fold.push_text("y" * 20_000)
    big.measured()
    assert cache.slot("big", 1) is big and big.fold is not None
    assert len(cache) == 1  # the others went
    big.release(committed=True)
    assert len(cache) == 1


def test_a_fold_counts_the_selected_message_not_every_message() -> None:
    """A fold keeps only the latest substantive message's content: it counts the largest, not
    their sum, unless it joins continuations (it then keeps every max-tokens segment)."""
    content = [{"type": "text", "text": "z" * 1000}]
    message = {"type": "assistant/message", "message": {"content": content}}
    size = len(orjson.dumps(content))
    plain, joining = MeasuredFold(), MeasuredFold(join_continuations=True)
    for _ in range(5):
        plain.push(message)
        joining.push(message)
    assert plain.held_bytes == FOLD_OVERHEAD_BYTES + size
    assert joining.held_bytes == FOLD_OVERHEAD_BYTES + 5 * size


def test_a_fold_counts_the_same_bytes_pushed_in_runs_or_one_by_one() -> None:
    """The store folds an append's events in one run (push_many); the bytes it counts are what
    pushing each would count: every delta's text, the largest message (or each, when joining)."""
    events: list[dict[str, object]] = []
    for number in range(60):
        if number % 7 == 6:
            content = [{"type": "text", "text": "m" * (number * 10)}]
            events.append({"type": "assistant/message", "message": {"content": content}})
        else:
            events.append({"type": "assistant/chunk", "delta": {"type": "text", "text": "t" * number}})
    for join in (False, True):
        one_by_one, in_runs = MeasuredFold(join_continuations=join), MeasuredFold(join_continuations=join)
        for event in events:
            one_by_one.push(event)
        for start in range(0, len(events), 25):
            in_runs.push_many(events[start : start + 25])
        assert in_runs.held_bytes == one_by_one.held_bytes
    texts = sum(number for number in range(60) if number % 7 != 6)
    largest = len(orjson.dumps([{"type": "text", "text": "m" * 550}]))
    assert in_runs.held_bytes > FOLD_OVERHEAD_BYTES + texts + largest
