"""``POST /v1/runs/{runId}/ingest/{claude-code|codex|opencode}`` (SPEC §16): an agent CLI's output.

Unlike a provider body (one model call, staged and stored at its end), a CLI body is a whole
run that a child streams through one long request, so what its lines make is **stored as the
body arrives**: each piece of the body that completes lines is translated as it comes, and
what it made is stored while the next piece comes (pieces that came together are stored
together, up to :data:`FLUSH_EVENTS` events at a time), so subscribers see the child's progress
live. A line that cannot be read
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
``parentRunId`` = the run and the run's ``selection`` (so a parent created with
``joinContinuations`` gets a subagent's split reply whole), and so ``/children``, the join, the
dashboard and webhooks show it. The child may exist already, made by the same session seen
another way (its stdout, its transcript): it is then taken as it is.

The same session may be sent as its stdout (``claude-code``) and as its transcript
(``claude-code-transcript``, SPEC §19), in either order. Both name an event by the same line
``uuid`` or ``message.id``, but the events differ (their ``source``; the transcript knows each
reply's stop reason), and a repeated eventId with other content is a conflict (409). So an event
whose eventId the target run already holds **from another format** is counted a duplicate and
not stored: what was stored first stays, nothing is stored twice. (Within one format a differing
repeat stays the producer bug it is.) This reads the eventIds of each run a body writes to once,
when the body first writes to it.

**The usage of a message kept from the other format.** A CLI's turn end brings its total usage,
and the adapter adds what the messages it made did not carry as a usage-only message, so §4's sum
is the CLI's total. When a message it made was not stored because the other format's was (the
transcript came first: it carries each reply's final usage, the stdout its usage as it began),
the stored one's usage is what the sum holds; the usage-only remainder is lowered by the
difference (and left out when nothing remains), or the turn counts those tokens twice.

An event for a child whose turn has ended (a subagent's transcript ended the child with its own
last reply before the stdout's tool result for its call arrived) is kept on the run as
``x-<format>-late-subagent`` (``{runId, event}``): accepted, logged, never the child's output.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Iterator
from itertools import filterfalse, groupby, repeat
from operator import attrgetter
from typing import Any, cast

from lastword.adapters import CLI_ADAPTERS
from lastword.adapters.cli_base import CliAdapter, Made
from lastword.adapters.framing import json_array, json_lines, read_objects
from lastword.errors import BadRequest, EmptyBatch, EventIdConflict, InvalidProviderEvent, LastwordError, RunEnded, RunExists, UnsupportedMedia
from lastword.ingest.body import Body, BodyCut, BodyDrained, body_pieces
from lastword.ingest.checks import encode_made
from lastword.ingest.outcome import Stored
from lastword.rules.ids import RUN_ID_PATTERN
from lastword.rules.limits import MAX_AGENT_LENGTH
from lastword.rules.records import NewRun
from lastword.service import RunService
from lastword.settings import Settings

#: Events made but not stored that are stored before more of the body is read, even when more
#: has come (what a body held in memory when its pieces come faster than they are stored).
FLUSH_EVENTS = 2048
#: Seconds of the service's clock between two renewals of the lease by a body's bytes.
RENEW_EVERY = 1.0
NDJSON_TYPES = frozenset({"application/x-ndjson", "application/ndjson", "application/jsonl"})
_RUN_ID = re.compile(RUN_ID_PATTERN)


async def ingest_cli_stream(
    body: Body, service: RunService, settings: Settings, run_id: str, format: str, tool_use_id: str | None = None
) -> Stored:
    kind = body.media_type
    if kind not in NDJSON_TYPES and kind != "application/json":
        raise UnsupportedMedia(f"expected application/x-ndjson (one line a JSON object) or application/json, got {kind!r}")
    run = await service.reads.get_run(run_id)  # 404 before reading a byte
    adapter = CLI_ADAPTERS[format].for_request(run.turn, tool_use_id)  # a later turn's eventIds are its own
    writer = _Writer(service, run_id, settings.max_body_bytes, Stored(last_seq=run.last_seq), format,
                     run.join_continuations)
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
        writer.add_of(at, adapter.cut(at))
        await writer.flush()
        raise unread
    if adapter.lines_read == 0:
        raise EmptyBatch("the body holds no line", index=0)
    writer.add_of(adapter.lines_read - 1, adapter.finish())
    await writer.flush()
    stored = writer.answer
    stored.stop_reason, stored.provider_stop_reason = adapter.stop.stop_reason, adapter.stop.provider
    return stored


async def _read(lines: AsyncIterator[list[tuple[int, Any]]], adapter: CliAdapter, writer: _Writer) -> LastwordError | None:
    """Feed the body's lines to the adapter, storing what they make; the problem of the first
    line that cannot be read (what the lines before it made is in ``writer``), or None at the
    body's end. A refusal of the store is raised.

    What a piece's lines made is stored when the next piece has not come yet, while it comes:
    a child printing slowly has each line stored as it arrives, and the pieces of a body that
    came together (a fast child, a body sent again) are stored together, one append per run
    rather than one per piece of 64 KiB."""
    reading = aiter(lines)
    ahead = _read_ahead(reading)
    try:
        while True:
            if writer.pending and (not ahead.done() or len(writer.pending) >= FLUSH_EVENTS):
                await writer.flush()
            try:
                batch = await ahead
            except BodyDrained:
                raise  # not the body's fault: it is sent again whole, nothing is cut
            except LastwordError as error:  # not JSON, an inexact integer, too long, bad gzip or UTF-8
                return error
            if batch is None:
                return None
            objects, problem = read_objects(batch, "line")
            made: list[Made] = []
            origins: list[int] = []
            try:
                adapter.feed_many(objects, made, origins)
            except LastwordError as error:  # not the format
                return error
            finally:
                writer.add(made, origins)  # what the lines before a refused one made included
            if problem is not None:  # a line that is not an object
                return problem
            ahead = _read_ahead(reading)
            # Two turns of the loop: one for the server to take in a piece that has reached
            # the socket, one for the read to take it.
            await asyncio.sleep(0)
            await asyncio.sleep(0)
    finally:
        ahead.cancel()


def _read_ahead(reading: AsyncIterator[list[tuple[int, Any]]]) -> asyncio.Task[list[tuple[int, Any]] | None]:
    """The next batch of lines (None at the body's end), read by a task of its own."""

    async def next_batch() -> list[tuple[int, Any]] | None:
        try:
            return await anext(reading)
        except StopAsyncIteration:
            return None

    return asyncio.get_running_loop().create_task(next_batch())


class _Writer:
    """Stores what the adapter made, in order, one append per run and stretch of events."""

    def __init__(self, service: RunService, run_id: str, limit: int, answer: Stored, format: str,
                 join_continuations: bool | None) -> None:
        self.service = service
        self.run_id = run_id
        self.limit = limit
        self.answer = answer
        self.format = format
        self.join_continuations = join_continuations
        #: What the lines made, not stored yet, and the line that made each.
        self.pending: list[Made] = []
        self.origins: list[int] = []
        self.children: set[str] = set()
        #: By run written to: the eventIds it holds and the format that made each.
        self.known: dict[str, dict[str, str | None]] = {}
        #: The runs written to whose log holds an eventId made otherwise (another format, or
        #: none): only their events need looking up one by one (:func:`_seen_elsewhere`).
        self.foreign: set[str] = set()
        #: By run written to: the usage of each assistant message it holds, by eventId.
        self.stored_usage: dict[str, dict[str, dict[str, int]]] = {}
        #: By run written to: what the messages kept from the other format carried beyond the
        #: adapter's own versions of them (see the module's docstring).
        self.usage_gap: dict[str, dict[str, int]] = {}

    def add(self, made: list[Made], origins: list[int]) -> None:
        """Stage ``made``, ``origins[i]`` the line that made ``made[i]``."""
        self.pending += made
        self.origins += origins

    def add_of(self, index: int, made: list[Made]) -> None:
        """:meth:`add` of what line ``index`` (or the body's end after it) made."""
        self.add(made, [index] * len(made))

    async def flush(self) -> None:
        pending, origins = self.pending, self.origins
        self.pending, self.origins = [], []
        start = 0
        # The stretches of one run: grouped by ``map``, not by a line of Python per event.
        for child, stretch in groupby(map(_CHILD, pending)):
            end = start + len(list(stretch))
            await self._store(child, pending[start:end], origins[start:end])
            start = end

    async def _store(self, child: str | None, stretch: list[Made], lines: list[int]) -> None:
        """Store ``stretch``, what ``lines`` made for one run (``child``)."""
        target = self.run_id if child is None else f"{self.run_id}.{child}"
        if child is not None and child not in self.children:
            # A transcript names its subagent on its replies, not on the prompt line before them.
            agent = next((item.agent for item in stretch if item.agent is not None), None)
            await self._create_child(child, agent, target, lines[0])
        for reread in (False, True):
            known = await self._known(target)
            made, origins = stretch, lines
            if target in self.foreign or self.usage_gap.get(target):
                made, origins = self._fresh(target, stretch, lines, known)
            if not made:
                self.answer.duplicates += len(stretch)
                return
            events = list(map(_EVENT, made))
            encoded = encode_made(events, origins, self.limit)
            try:
                outcome = await self.service.append(target, events, encoded)
                break
            except EventIdConflict:
                # The same session sent the other way at the same time (lastword run's stdout
                # and its transcript) stored some of these ids after ``known`` was read: read it
                # again, once; a conflict with this body's own format stays the producer's bug.
                if reread:
                    raise
                del self.known[target]
            except RunEnded:
                if child is None:
                    raise
                late = [{"type": f"x-{self.format}-late-subagent", "eventId": f"{child}:{event.get('eventId')}",
                         "runId": target, "event": event} for event in events]
                target = self.run_id
                outcome = await self.service.append(target, late, encode_made(late, origins, self.limit))
                break
        self.answer.duplicates += len(stretch) - len(made)
        # Each new eventId, made by this format: by ``map``, not by a line of Python per event.
        made_ids = cast("Iterator[str]", filter(_IS_STR, map(dict.get, events, repeat("eventId"))))
        known.update(dict.fromkeys(filterfalse(known.__contains__, made_ids), self.format))
        self.answer.accepted += outcome.accepted
        self.answer.duplicates += outcome.duplicates
        if target == self.run_id:
            self.answer.last_seq = outcome.last_seq

    def _fresh(self, target: str, stretch: list[Made], lines: list[int],
               known: dict[str, str | None]) -> tuple[list[Made], list[int]]:
        """What of ``stretch`` (made by ``lines``) is stored in ``target``, and the lines that made
        it: not the events the run holds from another format, and a usage-only remainder lowered
        by what those carried (see the module's docstring)."""
        pairs = list(zip(lines, stretch, strict=True))
        fresh = [(index, item) for index, item in pairs if not _seen_elsewhere(item.event, known, self.format)] \
            if target in self.foreign else pairs
        if len(fresh) < len(pairs) or self.usage_gap.get(target):
            fresh = self._kept_elsewhere(target, pairs, fresh)
        return [item for _, item in fresh], [index for index, _ in fresh]

    def _kept_elsewhere(self, target: str, stretch: list[tuple[int, Made]],
                        fresh: list[tuple[int, Made]]) -> list[tuple[int, Made]]:
        """``fresh`` with a usage-only remainder lowered by what the messages of ``stretch`` left
        out for the other format's carried beyond this body's versions of them."""
        stored = self.stored_usage.get(target, {})
        gap = self.usage_gap.setdefault(target, {})
        taken = {id(item) for _, item in fresh}
        for _, item in stretch:
            if id(item) not in taken and item.event.get("eventId") in stored:
                mine = _usage(item.event)
                for name, value in stored[item.event["eventId"]].items():
                    gap[name] = gap.get(name, 0) + value - mine.get(name, 0)
        lowered = [(index, _lowered(item, gap)) for index, item in fresh]
        return [(index, item) for index, item in lowered if item is not None]

    async def _known(self, run_id: str) -> dict[str, str | None]:
        known = self.known.get(run_id)
        if known is None:
            known = self.known[run_id] = {}
            usages = self.stored_usage[run_id] = {}
            after, full = 0, True
            while full:
                page = await self.service.reads.events_after(run_id, after, 1000)
                for stored in page:
                    if stored.event_id is not None:
                        source = stored.body.get("source")
                        known[stored.event_id] = source.get("format") if isinstance(source, dict) else None
                        if stored.type == "assistant/message":
                            usages[stored.event_id] = _usage(stored.body)
                full = len(page) == 1000
                after = page[-1].seq if page else after
            if any(made != self.format for made in known.values()):
                self.foreign.add(run_id)
            else:
                self.foreign.discard(run_id)
        return known

    async def _create_child(self, child: str, agent: str | None, target: str, index: int) -> None:
        # The CLI names the subagent; a name no run may have is the line's fault (422).
        if not _RUN_ID.fullmatch(target) or (agent is not None and len(agent) > MAX_AGENT_LENGTH):
            raise InvalidProviderEvent(
                f"line {index}: its subagent makes no valid child run (id {target!r}, agent of "
                f"{len(agent or '')} characters)", index=index)
        try:
            await self.service.create(NewRun(run_id=target, parent_run_id=self.run_id, agent=agent,
                                             join_continuations=self.join_continuations))
        except RunExists:
            pass  # made by the same session seen another way (its stdout, its transcript)
        self.children.add(child)


_CHILD = attrgetter("child")
_EVENT = attrgetter("event")
_IS_STR = str.__instancecheck__


def _usage(event: dict[str, Any]) -> dict[str, int]:
    """An assistant message's usage (empty for any other event)."""
    message = event.get("message")
    usage = message.get("usage") if isinstance(message, dict) else None
    return {name: value for name, value in usage.items() if type(value) is int} if isinstance(usage, dict) else {}


def _lowered(item: Made, gap: dict[str, int]) -> Made | None:
    """``item``, a usage-only remainder lowered by ``gap`` (None when nothing remains); any other
    event as it is."""
    if not item.remainder or not any(gap.values()):
        return item
    usage = {name: max(0, value - gap.get(name, 0)) for name, value in _usage(item.event).items()}
    if not any(usage.values()):
        return None
    return item._replace(event={**item.event, "message": {**item.event["message"], "usage": usage}})


def _seen_elsewhere(event: dict[str, Any], known: dict[str, str | None], format: str) -> bool:
    """The run holds this event's id, made from another format (see the module's docstring)."""
    event_id = event.get("eventId")
    return isinstance(event_id, str) and event_id in known and known[event_id] != format


async def _renewing(pieces: AsyncIterator[bytes], service: RunService, run_id: str) -> AsyncIterator[bytes]:
    """The body's pieces, the run's lease renewed as they arrive."""
    renewed = service.clock()
    async for piece in pieces:
        now = service.clock()
        if now - renewed >= RENEW_EVERY:
            await service.renew_lease(run_id)
            renewed = now
        yield piece


__all__ = ["CliAdapter", "ingest_cli_stream"]
