"""``POST /v1/runs/{runId}/ingest/{claude-code|codex|opencode}`` (SPEC §16): an agent CLI's output.

Unlike a provider body (one model call, staged and stored at its end), a CLI body is a whole
run that a child streams through one long request, so what its lines make is **stored as the
body arrives**: each piece of the body that completes lines is translated and stored before
the next is read, and subscribers see the child's progress live. A line that cannot be read
is refused (400 not JSON, 422 not the format, naming its index) after what the lines before it
made is stored, so a retry of the whole body from its start stores nothing twice (eventIds) and
goes on from there.

**A child that is alive keeps its turn** (SPEC §16a): a CLI may print nothing for longer than
the run's lease (a long build, a subagent whose lines it does not print), and its bytes, even a
blank keep-alive line that stores nothing, renew the lease as they arrive (at most once a
second of the service's clock: appends renew it too).

A subagent the CLI ran is a child run ``{runId}.{key}``, created on first sight with
``parentRunId`` = the run, so ``/children``, the join, the dashboard and webhooks show it.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

from lastword.adapters import CLI_ADAPTERS
from lastword.adapters.cli_base import CliAdapter, Made
from lastword.adapters.framing import json_array, json_lines
from lastword.errors import BadRequest, EmptyBatch, InvalidProviderEvent, LastwordError, UnsupportedMedia
from lastword.ingest.body import Body, BodyCut, BodyDrained, body_pieces
from lastword.ingest.checks import encode_made
from lastword.ingest.outcome import Stored
from lastword.rules.ids import RUN_ID_PATTERN
from lastword.rules.limits import MAX_AGENT_LENGTH
from lastword.rules.records import NewRun
from lastword.service import RunService
from lastword.settings import Settings

#: Seconds of the service's clock between two renewals of the lease by a body's bytes.
RENEW_EVERY = 1.0
NDJSON_TYPES = frozenset({"application/x-ndjson", "application/ndjson", "application/jsonl"})
_RUN_ID = re.compile(RUN_ID_PATTERN)


async def ingest_cli_stream(
    body: Body, service: RunService, settings: Settings, run_id: str, format: str
) -> Stored:
    kind = body.media_type
    if kind not in NDJSON_TYPES and kind != "application/json":
        raise UnsupportedMedia(f"expected application/x-ndjson (one line a JSON object) or application/json, got {kind!r}")
    run = await service.get_run(run_id)  # 404 before reading a byte
    adapter = CLI_ADAPTERS[format]()
    writer = _Writer(service, run_id, settings.max_body_bytes, Stored(last_seq=run.last_seq))
    pieces = _renewing(body_pieces(body, settings.max_body_bytes), service, run_id)
    lines = json_lines(pieces, noun="line") if kind in NDJSON_TYPES else json_array(pieces)
    try:
        async for batch in lines:
            for index, line in batch:
                try:
                    writer.add(index, adapter.feed(index, _object(line, index)))
                except LastwordError:
                    await writer.flush()  # the lines before the bad one stay stored
                    raise
            await writer.flush()
    except BodyCut:
        # What came is stored; the message being assembled waits for the body sent again.
        await writer.flush()
        raise BadRequest("the body was cut off before its end; the lines before the cut are stored") from None
    except BodyDrained as drained:  # 503: the producer sends the whole body again elsewhere
        await writer.flush()
        drained.extra.update(accepted=writer.answer.accepted, duplicates=writer.answer.duplicates,
                             lastSeq=writer.answer.last_seq)
        raise
    except LastwordError:  # a line not JSON, holding an inexact integer, or not the format
        await writer.flush()
        raise
    if adapter.lines_read == 0:
        raise EmptyBatch("the body holds no line", index=0)
    writer.add(adapter.lines_read - 1, adapter.finish())
    await writer.flush()
    stored = writer.answer
    stored.stop_reason, stored.provider_stop_reason = adapter.stop.stop_reason, adapter.stop.provider
    return stored


class _Writer:
    """Stores what the adapter made, in order, one append per run and stretch of events."""

    def __init__(self, service: RunService, run_id: str, limit: int, answer: Stored) -> None:
        self.service = service
        self.run_id = run_id
        self.limit = limit
        self.answer = answer
        self.pending: list[tuple[int, Made]] = []
        self.children: set[str] = set()

    def add(self, index: int, made: list[Made]) -> None:
        for item in made:
            self.pending.append((index, item))

    async def flush(self) -> None:
        pending, self.pending = self.pending, []
        start = 0
        while start < len(pending):
            child = pending[start][1].child
            end = start
            while end < len(pending) and pending[end][1].child == child:
                end += 1
            await self._store(child, pending[start][1].agent, pending[start:end])
            start = end

    async def _store(self, child: str | None, agent: str | None, stretch: list[tuple[int, Made]]) -> None:
        events = [item.event for _, item in stretch]
        encoded = encode_made(events, [index for index, _ in stretch], self.limit)
        target = self.run_id
        if child is not None:
            target = f"{self.run_id}.{child}"
            if child not in self.children:
                # The CLI names the subagent; a name no run may have is the line's fault (422).
                if not _RUN_ID.fullmatch(target) or (agent is not None and len(agent) > MAX_AGENT_LENGTH):
                    index = stretch[0][0]
                    raise InvalidProviderEvent(
                        f"line {index}: its subagent makes no valid child run (id {target!r}, agent of "
                        f"{len(agent or '')} characters)", index=index)
                await self.service.create(NewRun(run_id=target, parent_run_id=self.run_id, agent=agent))
                self.children.add(child)
        outcome = await self.service.append(target, events, encoded)
        self.answer.accepted += outcome.accepted
        self.answer.duplicates += outcome.duplicates
        if child is None:
            self.answer.last_seq = outcome.last_seq


async def _renewing(pieces: AsyncIterator[bytes], service: RunService, run_id: str) -> AsyncIterator[bytes]:
    """The body's pieces, the run's lease renewed as they arrive."""
    renewed = service.clock()
    async for piece in pieces:
        now = service.clock()
        if now - renewed >= RENEW_EVERY:
            await service.renew_lease(run_id)
            renewed = now
        yield piece


def _object(value: Any, index: int) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidProviderEvent(f"line {index} is not a JSON object", index=index)
    return value


__all__ = ["CliAdapter", "ingest_cli_stream"]
