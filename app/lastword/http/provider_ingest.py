"""``POST /v1/runs/{runId}/ingest/{format}`` (SPEC §13): a provider's own stream, stored as §4 events.

The body is translated as it streams (the adapter holds one message at a time), and the
translated events are **staged, then stored in one transaction at the end of the body**. So a
body whose 900th event is unreadable stores nothing (400/422 naming that event's index) rather
than 899 events of a step that a retry would then have to reconcile, and a retry of the same
body finds every event already stored (duplicates). The price: live subscribers see a body's
chunks when the body ends, not as it streams, and the staged events of one body are held in
memory — bounded by the body limit (``LASTWORD_MAX_BODY_BYTES``), the only bound a producer
controls. A producer that wants chunks live as they arrive pushes ``/events`` NDJSON instead.

For the same reason the per-request limits differ from ``/events``: the events of one body
are not held to ``max_batch_events`` (a long message is thousands of deltas) and an
adapter-made event may be as large as the body limit (an OpenAI message's ``source`` holds the
terminal ``response`` object, which repeats the output).
"""

from __future__ import annotations

import re
from typing import Any

from starlette.requests import ClientDisconnect, Request

from lastword.adapters import ADAPTERS
from lastword.adapters.framing import FRAMINGS, provider_events
from lastword.errors import (
    BadRequest,
    EmptyBatch,
    EventTooLarge,
    InvalidEvent,
    InvalidIdempotencyKey,
    InvalidProviderEvent,
    LastwordError,
    UnsupportedMedia,
)
from lastword.http.ingest import body_pieces, media_type, storable_json
from lastword.rules.events import validate_events
from lastword.service import RunService
from lastword.settings import Settings

#: Room left in an ``eventId`` (200 characters) after the key for ``:<position>``.
MAX_IDEMPOTENCY_KEY = 160
_KEY = re.compile(r"[\x21-\x7e]+")


def idempotency_key(request: Request) -> str | None:
    key = request.headers.get("idempotency-key")
    if key is None:
        return None
    if not _KEY.fullmatch(key) or len(key) > MAX_IDEMPOTENCY_KEY:
        raise InvalidIdempotencyKey(f"Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY} visible ASCII characters")
    return key


async def ingest_provider_stream(
    request: Request, service: RunService, settings: Settings, run_id: str, format: str, end: bool
) -> dict[str, Any]:
    framing = FRAMINGS.get(media_type(request))
    if framing is None:
        raise UnsupportedMedia(
            f"expected application/json, application/x-ndjson or text/event-stream, got {media_type(request)!r}"
        )
    adapter = ADAPTERS[format](idempotency_key(request))
    limit = settings.max_body_bytes
    staged: list[dict[str, Any]] = []
    origins: list[int] = []  # the raw event each staged event was completed by, for problems
    index = -1
    try:
        async for index, raw in provider_events(body_pieces(request, limit), framing):
            made = adapter.feed(index, raw)
            staged.extend(made)
            origins.extend([index] * len(made))
    except ClientDisconnect:
        raise BadRequest("the body was cut off before its end; nothing was stored") from None
    if adapter.events_read == 0:
        raise EmptyBatch("the body holds no event", index=0)
    made = adapter.finish(end=end)
    staged.extend(made)
    origins.extend([index] * len(made))
    # A body that never named its call has ids digested from it and the turn it came in (so the
    # same body in a later turn of the run is that turn's own): read the turn only then.
    adapter.name_events(f"turn {(await service.get_run(run_id)).turn}" if adapter.needs_scope else "")
    encoded = checked_events(staged, origins, limit)
    if staged:
        outcome = await service.append(run_id, staged, encoded)
        answer: dict[str, Any] = {"accepted": outcome.accepted, "duplicates": outcome.duplicates, "lastSeq": outcome.last_seq}
    else:  # only skipped events (pings): nothing to store, but the run must exist
        answer = {"accepted": 0, "duplicates": 0, "lastSeq": (await service.get_run(run_id)).last_seq}
    stop = adapter.stop
    if stop.stop_reason is not None:
        answer["stopReason"] = stop.stop_reason
    if stop.provider is not None:
        answer["providerStopReason"] = stop.provider
    return answer


def checked_events(staged: list[dict[str, Any]], origins: list[int], limit: int) -> list[str]:
    """The staged events as JSON; refuse, naming the provider event's index, what the adapter made from unusable values.

    The adapters check the shape of what they read; the values they pass on (token counts, a
    stop reason) are checked here by the §4 rules, and each event's size against the body limit.
    """
    # Chunks are made from strings the adapters checked; the rest gets the full §4 check.
    checked = [position for position, event in enumerate(staged) if event["type"] != "assistant/chunk"]
    try:
        validate_events([staged[position] for position in checked])
    except InvalidEvent as error:
        # Adapters check the values they read; this is a safety net, so it names the provider
        # event that completed the refused one (for a message, the last event of the body).
        at = origins[checked[error.extra["index"]]]
        raise InvalidProviderEvent(
            f"event {at} makes a session event that is not valid: {error.extra.get('field')}: "
            f"{error.extra['errors'][0]['message']}",
            index=at, field=error.extra.get("field"),
        ) from None
    encoded: list[str] = []
    for position, event in enumerate(staged):
        try:
            body = storable_json(event)
        except LastwordError as error:
            error.extra["index"] = origins[position]
            error.detail = f"event {origins[position]} nests JSON too deeply to be stored"
            raise
        if len(body) > limit:
            raise EventTooLarge(
                f"event {origins[position]} makes an event of {len(body)} bytes; the limit is {limit}",
                index=origins[position], limit=limit,
            )
        encoded.append(body.decode())
    return encoded
