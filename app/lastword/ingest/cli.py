"""``POST /v1/runs/{runId}/ingest/{claude-code|codex|opencode}`` (SPEC §16): an agent CLI's output.

Unlike a provider body (one model call, staged and stored at its end), a CLI body is a whole
run that a child streams through one long request, so what its lines make is **stored as the
body arrives**: each piece of the body that completes lines is translated and stored before
the next is read, and subscribers see the child's progress live. A line that cannot be read
(400 not JSON, 422 not the format, 413 too long), or a body that ends inside a line, is refused
naming the line's index after everything the lines before it made is stored, the message they
were assembling included (SPEC §16a: a child killed mid-print keeps the reply it was giving),
so a retry of the whole body from its start stores nothing twice (eventIds) and goes on from
there. A body cut off by the client stores what its lines made but leaves the message being
assembled to the body sent again.

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
    adapter = CLI_ADAPTERS[format](run.turn)  # a later turn's eventIds are its own (§16a)
    writer = _Writer(service, run_id, settings.max_body_bytes, Stored(last_seq=run.last_seq))
    # A child streams its whole run through one body: NDJSON is held to a line limit, never a
    # total (a JSON array is read whole, so it keeps the body limit). Its bytes renew the lease.
    if kind in NDJSON_TYPES:
        lines = json_lines(_renewing(body_pieces(body, None), service, run_id), noun="line",
                           max_line=settings.max_line_bytes)
    else:
        lines = json_array(_renewing(body_pieces(body, settings.max_body_bytes), service, run_id))
    try:
        unread = await _read(lines, adapter, writer)
    except BodyCut:
        # What came is stored; the message being assembled waits for the body sent again.
        await writer.flush()
        raise BadRequest("the body was cut off before its end; the lines before the cut are stored") from None
    except BodyDrained as drained:  # 503: the producer sends the whole body again elsewhere
        await writer.flush()
        drained.extra.update(accepted=writer.answer.accepted, duplicates=writer.answer.duplicates,
                             lastSeq=writer.answer.last_seq)
        raise
    if unread is not None:
        # The lines before it stay stored, and so does what they assembled.
        at = unread.extra.get("index")
        if not isinstance(at, int):  # the body's bytes, not a line (bad gzip): where it stopped
            at = adapter.lines_read
        writer.add(at, adapter.cut(at))
        await writer.flush()
        raise unread
    if adapter.lines_read == 0:
        raise EmptyBatch("the body holds no line", index=0)
    writer.add(adapter.lines_read - 1, adapter.finish())
    await writer.flush()
    stored = writer.answer
    stored.stop_reason, stored.provider_stop_reason = adapter.stop.stop_reason, adapter.stop.provider
    return stored


async def _read(lines: AsyncIterator[list[tuple[int, Any]]], adapter: CliAdapter, writer: _Writer) -> LastwordError | None:
    """Feed the body's lines to the adapter, storing what each batch of them makes; the problem
    of the first line that cannot be read (what the lines before it made is in ``writer``), or
    None at the body's end. A refusal of the store is raised."""
    reading = aiter(lines)
    while True:
        try:
            batch = await anext(reading)
        except StopAsyncIteration:
            return None
        except BodyDrained:
            raise  # not the body's fault: it is sent again whole, nothing is cut
        except LastwordError as error:  # not JSON, an inexact integer, too long, bad gzip or UTF-8
            return error
        for index, line in batch:
            try:
                writer.add(index, adapter.feed(index, _object(line, index)))
            except LastwordError as error:  # not the format
                return error
        await writer.flush()


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
