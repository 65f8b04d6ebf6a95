"""Pushed session events (SPEC §9): a JSON event or array, NDJSON, streamed chunk text; and
the small JSON documents the other endpoints take (:func:`read_model`).

JSON bodies are all-or-nothing (big arrays are read a slice at a time, see
:mod:`lastword.ingest.json_input`). NDJSON and ``text/plain`` bodies are applied as they stream
in: the lines each piece of the body completes (in groups of a bounded size), or for text each
piece of text, are stored before the next is read, so a producer streaming a long session never
waits for its end, and a body cut off midway keeps what arrived (a retry with the same
``eventId``s is then counted as duplicates).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel, ValidationError

from lastword.adapters.framing import body_lines, body_text
from lastword.errors import (
    BatchTooLarge,
    EmptyBatch,
    LastwordError,
    MalformedJson,
    TooDeeplyNested,
    Unprocessable,
    UnsupportedMedia,
)
from lastword.ingest import json_input
from lastword.ingest.body import Body, BodyCut, body_pieces, read_body
from lastword.ingest.checks import check_pushed, storable_json
from lastword.ingest.outcome import Progress, Stored
from lastword.rules.records import AppendOutcome

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")
#: Stores a list of pushed events in one run (the face's: it encodes them within its limits).
Append = Callable[[list[dict[str, Any]]], Awaitable[AppendOutcome]]


def require_json(body: Body) -> None:
    if body.media_type not in ("application/json", ""):
        raise UnsupportedMedia(f"expected application/json, got {body.media_type!r}")


async def read_model(body: Body, model: type[M], limit: int, *, optional: bool = False) -> M:
    """A JSON body validated against ``model`` (an empty body is ``{}`` when ``optional``)."""
    require_json(body)
    raw = await read_body(body, limit)
    if not raw.strip() and optional:
        return model.model_validate({})
    data = json_input.loads(raw)
    storable_json(data)
    try:
        return model.model_validate(data)
    except ValidationError as error:
        first = error.errors(include_url=False, include_input=False)[0]
        field = ".".join(str(part) for part in first["loc"]) or "body"
        raise Unprocessable(f"{field}: {first['msg']}", field=field) from None


def _too_many(max_events: int) -> BatchTooLarge:
    return BatchTooLarge(f"the batch holds more than {max_events} events; the limit is {max_events}", limit=max_events)


async def ingest_json(body: Body, limit: int, max_events: int, append: Append) -> Stored:
    """A JSON event or array of events, all or nothing; an array of more than ``max_events``
    is refused (413 ``batch_too_large``).

    An array larger than :data:`json_input.WHOLE_BYTES` is parsed, then validated, a slice at
    a time (:func:`json_input.array_slices`), giving the event loop back between slices: a
    maximum-size batch must not stall every other request, stream and lease sweep while it is
    read. A smaller body is parsed and validated in one go.
    """
    raw = await read_body(body, limit)
    slices = json_input.array_slices(raw) if len(raw) > json_input.WHOLE_BYTES else None
    if slices is None:
        events = json_input.loads_events(raw)
        if len(events) > max_events:
            raise _too_many(max_events)
        check_pushed(events)
    else:
        parsed: list[list[Any]] = []
        count = 0
        for piece in slices:
            items = json_input.parse_slice(piece, count)
            count += len(items)
            if count > max_events:
                raise _too_many(max_events)
            parsed.append(items)
            await asyncio.sleep(0)
        events = []
        for items in parsed:
            check_pushed(items, index_offset=len(events))
            events.extend(items)
            await asyncio.sleep(0)
    if not events:
        raise EmptyBatch("the batch holds no event")
    progress = Progress()
    progress.add(await append(events))
    return progress.stored()


class _Position:
    """Where an NDJSON body has got to: the next event's index and the last line's number."""

    def __init__(self) -> None:
        self.index = 0  # events so far (blank lines are not events)
        self.line = 0  # lines so far, 1-based once counted, blank ones included


async def ingest_ndjson(body: Body, limit: int, append: Append) -> Stored:
    """NDJSON applied line by line as the body streams in (see :func:`_apply_lines`).

    The body is read in a task of its own (:func:`shallow`): a streaming child's request stays
    open for its whole run and wakes twice per line it sends (its piece came, its commit came).
    """
    return await shallow(_ingest_ndjson(body, limit, append))


async def shallow(coroutine: Coroutine[Any, Any, T]) -> T:
    """``await coroutine``, run in a task of its own whose stack is a few frames deep.

    A task is resumed through every frame it awaits in: a request's own task, under every
    middleware and the router, is some thirty frames deep, and each wake-up of a body that
    streams for minutes (a piece came, a commit came) went down all of them and back up. The
    request's task waits once instead; cancelling it cancels this task too (a task cancels
    the future it waits on), and what this one raises is raised there.
    """
    return await asyncio.ensure_future(coroutine)


async def _ingest_ndjson(body: Body, limit: int, append: Append) -> Stored:
    progress = Progress()
    position = _Position()
    try:
        async for lines, exact in body_lines(body_pieces(body, limit)):
            await _apply_lines(lines, position, append, progress, exact=exact)
    except BodyCut:
        # What arrived before the break is stored; the producer retries with its eventIds.
        pass
    except LastwordError as error:
        raise progress.annotate(error) from None
    if progress.last_seq is None:
        raise EmptyBatch("the body holds no event")
    return progress.stored()


#: Most lines of an NDJSON body stored in one commit. How the body's bytes were split in
#: transit decides only where groups may end, never how large one is: a network piece holding
#: thousands of lines is stored in several groups. (``LASTWORD_MAX_BATCH_EVENTS`` is for JSON
#: arrays, which are all or nothing; an NDJSON body is a stream and has no such limit.)
NDJSON_GROUP = 500


def _first_refused(events: list[dict[str, Any]], line_numbers: list[int], first_index: int) -> LastwordError | None:
    """The §4 check of ``events`` one at a time: the first refusal, naming its line, with
    ``events`` and ``line_numbers`` cut to the events before it (None: none is refused)."""
    for at, event in enumerate(events):
        try:
            check_pushed([event], index_offset=first_index + at)
        except (Unprocessable, TooDeeplyNested) as error:
            error.extra["line"] = line_numbers[at]
            del events[at:], line_numbers[at:]
            return error
    return None


async def _apply_lines(lines: list[bytes], position: _Position, append: Append, progress: Progress, *,
                       exact: bool) -> None:
    """Store the complete lines of one body piece, in groups of at most :data:`NDJSON_GROUP`.

    The body is applied line by line: at the first bad line (not JSON, not a valid event, or
    refused by the store) the lines before it are stored and the problem names the line, by
    event ``index`` and by ``line`` number. ``exact``: the piece has no run of 19 digits, so no
    line can hold an inexact integer and none is searched for one (one search of the piece
    costs far less than a call per line).
    """
    events: list[dict[str, Any]] = []
    line_numbers: list[int] = []
    first_index = position.index
    failure: LastwordError | None = None
    for line in lines:
        position.line += 1
        if not line.strip():
            continue
        try:
            event = orjson.loads(line)
            if not exact:
                json_input.refuse_inexact(line, index=position.index)
        except orjson.JSONDecodeError as error:
            failure = MalformedJson(f"line {position.line} is not valid JSON: {error}", index=position.index)
        except (Unprocessable, TooDeeplyNested) as error:
            failure = error
        if failure is not None:
            failure.extra["line"] = position.line
            break
        events.append(event)
        line_numbers.append(position.line)
        position.index += 1
    if events:
        try:
            # The lines of a piece checked together: a call per line cost seven times a line's
            # share of one call (a fleet's server that falls behind reads several per piece).
            check_pushed(events, index_offset=first_index)
        except (Unprocessable, TooDeeplyNested):
            # One line is refused: checked one by one, as they came, so the refusal is the
            # same one, naming that line alone, and the lines before it are stored.
            failure = _first_refused(events, line_numbers, first_index) or failure
    for start in range(0, len(events), NDJSON_GROUP):
        group = events[start : start + NDJSON_GROUP]
        try:
            progress.add(await append(group))
        except LastwordError as error:
            at = error.extra.get("index")
            if not isinstance(at, int) or not 0 <= at < len(group):
                raise
            # The store takes or refuses a group whole; in a stream the lines before the
            # refused one stand, as they would have had they come in their own pieces.
            if at > 0:
                progress.add(await append(group[:at]))
            error.extra.update(index=first_index + start + at, line=line_numbers[start + at])
            raise
    if failure is not None:
        raise failure


async def ingest_text(body: Body, limit: int, append: Append) -> Stored:
    """Each piece of a ``text/plain`` body becomes one text delta, UTF-8 decoded across pieces
    (read in a task of its own, as :func:`ingest_ndjson` reads its body)."""
    return await shallow(_ingest_text(body, limit, append))


async def _ingest_text(body: Body, limit: int, append: Append) -> Stored:
    progress = Progress()
    try:
        async for text in body_text(body_pieces(body, limit)):
            progress.add(await append([text_delta(text)]))
    except BodyCut:
        pass
    except LastwordError as error:
        raise progress.annotate(error) from None
    return progress.stored()


def text_delta(text: str, event_id: str | None = None) -> dict[str, Any]:
    event: dict[str, Any] = {"type": "assistant/chunk", "delta": {"type": "text", "text": text}}
    if event_id is not None:
        event["eventId"] = event_id
    return event
