"""The run service: what the HTTP API asks for, on top of the store and the hub.

It turns requests into store operations, publishes what they committed to live subscribers,
ends turns whose lease expired, and waits for turn ends on behalf of long-polling readers.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from app.errors import NotFound
from app.hub import Hub
from app.ids import new_run_id
from app.metrics import Metrics
from app.schemas import RunCreate
from app.store.base import AppendOutcome, EndOutcome, RunRecord, RunSpec, Store, StoredEvent, TurnRecord

log = logging.getLogger("lastword")


class RunService:
    def __init__(
        self,
        store: Store,
        hub: Hub,
        metrics: Metrics,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.hub = hub
        self.metrics = metrics
        self.clock = clock

    def _published(self, stored: Sequence[StoredEvent]) -> None:
        if stored:
            self.hub.publish(stored)

    async def create(self, request: RunCreate) -> tuple[RunRecord, bool]:
        body = request.model_dump()
        run_id = request.runId or new_run_id(self.clock())
        body["runId"] = run_id
        spec = RunSpec(
            run_id=run_id,
            parent_run_id=request.parentRunId,
            agent=request.agent,
            mode=request.mode,
            metadata=request.metadata,
            lease_seconds=request.leaseSeconds,
            canonical=orjson.dumps(body, option=orjson.OPT_SORT_KEYS).decode(),
        )
        run, created, stored = await self.store.create_run(spec, self.clock())
        self._published(stored)
        if created:
            self.metrics.runs_created.inc()
        return run, created

    async def append(self, run_id: str, events: Sequence[dict[str, Any]]) -> AppendOutcome:
        started = time.perf_counter()
        outcome = await self.store.append(run_id, events, self.clock())
        self.metrics.observe_ingest(events, outcome, time.perf_counter() - started)
        self._published(outcome.stored)
        if outcome.ended is not None:
            self.metrics.turns_ended.labels(outcome.ended.stop_reason).inc()
        return outcome

    async def end(self, run_id: str, stop_reason: str, error: Any, *, cascade: bool = False) -> EndOutcome:
        outcome = await self.store.end_turn(run_id, stop_reason, error, self.clock())
        assert outcome is not None  # only the sweep asks for a conditional end
        self._after_end(outcome)
        if cascade:
            await self._cascade(run_id)
        return outcome

    def _after_end(self, outcome: EndOutcome) -> None:
        self._published(outcome.stored)
        if outcome.changed:
            self.metrics.turns_ended.labels(outcome.turn.stop_reason or "").inc()

    async def _cascade(self, run_id: str) -> None:
        """End the open turns of every descendant with ``cancelled`` (asked for explicitly)."""
        pending = [run_id]
        while pending:
            parent = pending.pop()
            for child in await self.store.open_children(parent):
                error = {"message": f"parent run {run_id} ended (cascade)"}
                outcome = await self.store.end_turn(child, "cancelled", error, self.clock(), only_if_expired=False)
                if outcome is not None:
                    self._after_end(outcome)
                pending.append(child)

    async def next_turn(self, run_id: str) -> RunRecord:
        run, stored = await self.store.start_turn(run_id, self.clock())
        self._published(stored)
        return run

    async def close(self, run_id: str) -> RunRecord:
        run, stored = await self.store.close_run(run_id, self.clock())
        self._published(stored)
        for event in stored:
            if event.type == "subagent/end":
                self.metrics.turns_ended.labels(event.body["stopReason"]).inc()
        return run

    async def result(self, run_id: str, turn: int | None, wait: float) -> tuple[RunRecord, TurnRecord]:
        """The run and the turn's result, waiting up to ``wait`` seconds for the turn to end."""
        deadline = time.monotonic() + wait
        signal = self.hub.turn_end_signal(run_id) if wait > 0 else None
        try:
            while True:
                run, record = await self.store.turn_result(run_id, turn)
                remaining = deadline - time.monotonic()
                if record.ended or signal is None or remaining <= 0:
                    return run, record
                signal.clear()
                try:
                    await asyncio.wait_for(signal.wait(), remaining)
                except TimeoutError:
                    pass
        finally:
            if signal is not None:
                self.hub.release(run_id, signal)

    async def sweep_once(self) -> int:
        """End every turn whose lease has expired; the count ended."""
        ended = 0
        now = self.clock()
        for run_id in await self.store.expired_runs(now):
            try:
                outcome = await self.store.end_turn(
                    run_id, "timeout", {"message": "the run's lease expired"}, now, only_if_expired=True
                )
            except NotFound:
                continue
            if outcome is not None:
                ended += 1
                self.metrics.leases_expired.inc()
                self._after_end(outcome)
        return ended

    async def sweep_forever(self, interval: float) -> None:
        while True:
            try:
                await self.sweep_once()
            except Exception:  # the sweep must outlive a passing store failure
                log.exception("lease sweep failed")
            await asyncio.sleep(interval)
