"""The events the benchmarks send, and an independent reading of the selection rule to check results.

Small events as a streaming child produces them: text deltas of 20–100 bytes, and now and then
a complete assistant message (sometimes a usage-only empty one, the case lastword exists for).
Generation is seeded, so every run of the bench sends the same bytes.
"""

from __future__ import annotations

import random
import secrets
from collections.abc import Iterator, Sequence
from typing import Any

import orjson

from bench.http import Connection

Event = dict[str, Any]

_WORDS = (
    "the of and to in is that for it as with was on be by this are from at or an which have "
    "not but all they were one had there can their we been has more if will when would what "
    "fold turn output selection stream event message delta usage token subagent parent child"
).split()

MESSAGE_EVERY = 20  # one assistant/message per this many events


class TextSource:
    """Distinct ASCII text pieces of a chosen length, cut from one seeded buffer."""

    def __init__(self, seed: int, size: int = 1 << 20) -> None:
        rng = random.Random(seed)
        words: list[str] = []
        total = 0
        while total < size:
            word = rng.choice(_WORDS)
            words.append(word)
            total += len(word) + 1
        self.buffer = " ".join(words)
        self.rng = rng

    def piece(self, low: int, high: int) -> str:
        length = self.rng.randint(low, high)
        start = self.rng.randrange(0, len(self.buffer) - length)
        return self.buffer[start:start + length]


def text_delta(text: str) -> Event:
    return {"type": "assistant/chunk", "delta": {"type": "text", "text": text}}


def message(content: list[dict[str, Any]], output_tokens: int) -> Event:
    return {
        "type": "assistant/message",
        "message": {"content": content, "usage": {"inputTokens": 120, "outputTokens": output_tokens}},
    }


def mixed_events(count: int, seed: int, *, first_index: int = 0, event_ids: str | None = None) -> list[Event]:
    """Text deltas of 20–100 bytes with an assistant message every ``MESSAGE_EVERY`` events.

    One message in four is a usage-only record (``content: []``). ``event_ids`` (a prefix)
    gives every event a producer ``eventId``.
    """
    source = TextSource(seed)
    events = []
    for number in range(first_index, first_index + count):
        if number % MESSAGE_EVERY == MESSAGE_EVERY - 1:
            if (number // MESSAGE_EVERY) % 4 == 3:
                event = message([], 40)
            else:
                event = message([{"type": "text", "text": source.piece(60, 200)}], 60)
        else:
            event = text_delta(source.piece(20, 100))
        if event_ids is not None:
            event["eventId"] = f"{event_ids}-{number}"
        events.append(event)
    return events


def delta_blocks(count: int, seed: int, block: int = 10_000) -> Iterator[list[Event]]:
    """``count`` text deltas of 20–100 bytes, ``block`` at a time (so a million fit in memory)."""
    source = TextSource(seed)
    made = 0
    while made < count:
        size = min(block, count - made)
        yield [text_delta(source.piece(20, 100)) for _ in range(size)]
        made += size


def json_array(events: Sequence[Event]) -> bytes:
    return orjson.dumps(list(events))


def ndjson(events: Sequence[Event]) -> bytes:
    return b"\n".join(orjson.dumps(event) for event in events) + b"\n"


def batches(events: Sequence[Event], size: int) -> list[Sequence[Event]]:
    return [events[i:i + size] for i in range(0, len(events), size)]



async def create_runs(conn: Connection, prefix: str, count: int) -> list[str]:
    """``count`` fresh runs (no lease), created one after another on ``conn``."""
    runs = [f"bench-{prefix}-{secrets.token_hex(4)}-{n}" for n in range(count)]
    for run_id in runs:
        await conn.post_json("/v1/runs", {"runId": run_id, "leaseSeconds": 0}, expect=201)
    return runs


async def fill_turns(conn: Connection, runs: Sequence[str], events: int = 40) -> None:
    """Each run's open turn given ``events`` mixed events (one request each): a turn to end."""
    body = json_array(mixed_events(events, seed=4))
    for run_id in runs:
        await conn.request("POST", f"/v1/runs/{run_id}/events", body, "application/json", expect=200)


async def end_runs(conn: Connection, runs: Sequence[str]) -> None:
    """``POST /end`` (completed) of each run, one after another."""
    for run_id in runs:
        await conn.post_json(f"/v1/runs/{run_id}/end", {"stopReason": "completed"}, expect=200)
