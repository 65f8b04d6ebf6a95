"""One child turn's lines over one streamed ingest request, and the end of a turn its lines left open.

A parent SDK hands its child's output over message by message. Posting each as a request of its
own breaks the run (SPEC §16 counts a line's position within its body, a reply is assembled from
several lines, a request can overtake another), so :class:`TurnStream` keeps one
``POST /v1/runs/{runId}/ingest/{format}`` open for the whole turn and writes each line the moment
it is appended. Every line is kept until the request is answered: after a lost connection or a
retried status (:mod:`lastword.client.retry`) a new request sends the turn's lines again from the
first, and the service's ``eventId``\\ s (derived from the CLI's ids and each line's position in
the body) store nothing twice. While the child is silent a blank line (which NDJSON readers skip)
is written every ``keepalive`` seconds, so the body is never idle long enough to be cut, and the
run's lease is renewed (SPEC §16a).

:func:`end_open_turn` ends a turn whose lines did not end it, with the stop reason of what
happened to the SDK call, the way ``lastword run`` does for a child that exited without its last
line.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from lastword.client import retry
from lastword.client.aio import AsyncLastwordClient
from lastword.client.errors import LastwordAPIError
from lastword.schemas import IngestResult

#: Seconds of silence after which a blank line is written (the service's body time-out is 30 s).
KEEPALIVE = 10.0
#: Seconds the lines of a finished turn are still offered to a service that cannot be reached.
GIVE_UP_AFTER_END = 120.0
FIRST_PAUSE = 0.2


@dataclass
class Delivery:
    """How a turn's lines fared: the service's answer, its refusal, or why there is neither."""

    answer: IngestResult | None = None
    refusal: LastwordAPIError | None = None
    failure: BaseException | None = None


class TurnStream:
    """A turn's lines, kept, and the request that streams them (see the module's docstring)."""

    def __init__(self, client: AsyncLastwordClient, run_id: str, format: str, *, keepalive: float = KEEPALIVE,
                 give_up_after_end: float = GIVE_UP_AFTER_END) -> None:
        self._client = client
        self.run_id = run_id
        self._format = format
        self._keepalive = keepalive
        self._give_up_after_end = give_up_after_end
        self._lines: list[bytes] = []
        self._more = asyncio.Event()
        self._ended_at: float | None = None
        self.delivery = Delivery()
        self._task = asyncio.get_running_loop().create_task(self._deliver())

    def append(self, line: Mapping[str, Any]) -> None:
        """Write one line into the open request (or the next one, after a failure)."""
        if self._ended_at is not None:
            raise RuntimeError("the turn's lines have ended")
        self._lines.append(orjson.dumps(line) + b"\n")
        self._more.set()

    async def finish(self) -> Delivery:
        """End the body and return once the service answered it (or gave up)."""
        if self._ended_at is None:
            self._ended_at = time.monotonic()
            self._more.set()
        # Shielded: a caller cancelled while the answer is awaited must still see the lines stored
        # before it ends the turn cancelled.
        await asyncio.shield(self._task)
        return self.delivery

    async def _body(self) -> AsyncIterator[bytes]:
        sent = 0
        while True:
            if sent < len(self._lines):
                lines = self._lines[sent:]
                sent += len(lines)
                yield b"".join(lines)
            elif self._ended_at is not None:
                return
            else:
                self._more.clear()
                try:
                    await asyncio.wait_for(self._more.wait(), self._keepalive)
                except TimeoutError:
                    yield b"\n"

    async def _deliver(self) -> None:
        failures = 0
        while True:
            started = time.monotonic()
            try:
                self.delivery.answer = await self._client.ingest_cli_stream(self.run_id, self._format, self._body())
                return
            except LastwordAPIError as error:
                if not retry.is_retried(error):
                    self.delivery.refusal = error
                    return
                failure: BaseException = error
            except Exception as error:
                if not retry.is_retried(error):
                    self.delivery.failure = error
                    return
                failure = error
            if self._ended_at is not None and time.monotonic() - self._ended_at > self._give_up_after_end:
                self.delivery.failure = failure
                return
            # A request that lived a while was not refused at once: the pauses start again.
            failures = 1 if time.monotonic() - started > retry.MAX_PAUSE else failures + 1
            await asyncio.sleep(retry.pause(FIRST_PAUSE, failures))


async def end_open_turn(client: AsyncLastwordClient, run_id: str, delivery: Delivery, *, cancelled: bool,
                        raised: BaseException | None, name: str) -> None:
    """End a turn that its lines left open (no terminal line reached the service).

    ``cancelled`` when the caller cancelled or abandoned the SDK call; ``error`` naming the
    exception the SDK raised, or the service's refusal of a line; ``error`` with
    ``no_terminal_event`` when the SDK finished without the child's last line (a turn that never
    said it ended is not known to be complete). A turn ended meanwhile (its parent cancelled it)
    keeps the stop reason it ended with.
    """
    if delivery.answer is not None and delivery.answer.stopReason is not None:
        return
    refusal = delivery.refusal
    if refusal is not None and refusal.code == "run_ended":
        return
    error: dict[str, Any] | None
    if cancelled:
        stop_reason, error = "cancelled", None
    elif raised is not None:
        stop_reason = "error"
        error = {"message": f"{name} raised {type(raised).__name__}: {raised}", "type": type(raised).__name__}
    elif refusal is not None:
        detail = refusal.problem.get("detail") or refusal.problem.get("title") or refusal.code
        stop_reason, error = "error", {"message": f"the service could not store {name}'s output: {detail}",
                                       "type": refusal.code}
    else:
        stop_reason, error = "error", {"message": f"{name} ended without its last line", "type": "no_terminal_event"}
    try:
        await client.end(run_id, stop_reason, error=error)
    except LastwordAPIError as ended:
        if ended.status != 409:
            raise
