"""The run service: what the HTTP API asks for, on top of the store and the fan-out.

It turns requests into store operations, hands what they committed to the fan-out, ends turns
whose lease expired, waits for turn ends on behalf of long-polling readers, and registers live
subscribers. Routes and streams use this class only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator, Sequence
from typing import Any, Protocol, TypeVar

import orjson

from lastword.ds_service import StreamService
from lastword.errors import Conflict, Draining, Gone, NotFound, NoticesUnavailable, TurnNotFound, Unavailable
from lastword.fanout.hub import Hub, Subscription
from lastword.fanout.local import Fanout
from lastword.metrics import Metrics
from lastword.rules.ds import Producer
from lastword.rules.fold import assistant_texts
from lastword.rules.ids import new_run_id
from lastword.rules.records import (
    AppendOutcome,
    Delivery,
    EndOutcome,
    NewRun,
    RunRecord,
    RunSpec,
    RunStatus,
    StoredEvent,
    TurnRecord,
    WebhookTarget,
)
from lastword.rules.runstate import secret_digest
from lastword.rules.stop_reasons import StopReason
from lastword.rules import transcript as transcript_rules
from lastword.rules.transcript import Format, HistoryEvent, Transcript, transcript
from lastword.store.protocols import Feed, Outbox, Ping, Reads, Retention, RunLog, Stats
from lastword.webhooks.rules import check_resolved_webhook, check_webhook

log = logging.getLogger("lastword")

#: Runs deleted per retention transaction (short transactions keep writers waiting little).
RETENTION_BATCH = 200
HISTORY_PAGE = 5000
#: Seconds the store has to answer a readiness check (the manifests' probes wait 3 s).
READY_WITHIN = 2.0
HISTORY_TYPES = frozenset(transcript_rules.HISTORY_TYPES)
#: What a turn's ``texts`` are read from (SPEC §19).
TEXT_TYPES = frozenset({"assistant/message", "assistant/chunk"})

Answer = TypeVar("Answer")
#: What a long poll's ``look`` is handed: the events heard since it last looked, or ``None`` when
#: it must read everything (its first look, or after notices were missed).
Heard = list[StoredEvent] | None


class ChildTurns:
    """What a join knows of a parent's children: each one's latest turn, and which have not ended.

    Kept between wake-ups, so hearing one child's end costs one read of that child, however many
    children there are.
    """

    def __init__(self) -> None:
        self._turns: dict[str, TurnRecord] = {}  # in the order first seen: oldest child first
        self._running: set[str] = set()

    def put(self, record: TurnRecord) -> None:
        self._turns[record.run_id] = record
        if record.ended:
            self._running.discard(record.run_id)
        else:
            self._running.add(record.run_id)

    def forget(self, run_id: str) -> None:
        """The child is gone (retention deleted it)."""
        self._turns.pop(run_id, None)
        self._running.discard(run_id)

    def clear(self) -> None:
        self._turns.clear()
        self._running.clear()

    @property
    def running(self) -> list[str]:
        return [run_id for run_id in self._turns if run_id in self._running]

    def done(self, *, any_child: bool, expect: int) -> bool:
        """At least ``expect`` children, and all of them (``any_child``: one) ended.

        With no children and no ``expect``, "all ended" holds at once and "one ended" never does.
        """
        count = len(self._turns)
        if count < expect:
            return False
        return len(self._running) < count if any_child else not self._running

    def newest_first(self) -> list[TurnRecord]:
        """The turns, newest child first (the order of ``GET /v1/runs``)."""
        return list(reversed(self._turns.values()))


def canonical_request(request: NewRun, run_id: str) -> str:
    """The create request as kept for the idempotency comparison: canonical JSON of the body in
    its wire names (``run_id`` the one used), a webhook secret as its digest.

    A field added after runs were stored is left out when not asked for, so a run made before
    it existed compares equal to the same request made again.
    """
    body: dict[str, Any] = {
        "runId": run_id, "parentRunId": request.parent_run_id, "agent": request.agent, "mode": request.mode,
        "metadata": request.metadata, "leaseSeconds": request.lease_seconds,
    }
    if request.fork_of is not None:
        body["forkOf"] = {"runId": request.fork_of[0], "afterSeq": request.fork_of[1]}
    if request.join_continuations is not None:
        body["selection"] = {"joinContinuations": request.join_continuations}
    if request.webhook is not None:
        secret = request.webhook.secret
        body["webhook"] = {"url": request.webhook.url, "secret": None if secret is None else secret_digest(secret)}
    return orjson.dumps(body, option=orjson.OPT_SORT_KEYS).decode()


class RunStore(Ping, RunLog, Feed, Outbox, Retention, Stats, Protocol):
    """What the run service asks of the store: runs and their logs, the firehose, deliveries,
    retention, counts and readiness. Not the Durable Streams (:class:`StreamService`'s), and not
    the store's opening or closing: the composition root (:mod:`lastword.main`) owns its lifetime."""


class RunService:
    """Everything the routes and streams use; nothing above this touches the store or the hub."""

    def __init__(
        self,
        store: RunStore,
        fanout: Fanout,
        streams: StreamService,
        metrics: Metrics,
        *,
        clock: Callable[[], float] = time.time,
        page_size: int = 1000,
        webhook_hosts: tuple[str, ...] = (),
        webhook_allow_private: bool = False,
        end_observers: Sequence[Callable[[StoredEvent], None]] = (),
    ) -> None:
        self._store = store
        #: What the faces read (runs, turns, logs, the firehose, counts), straight from the store:
        #: a read is no use case, so the service does not pass each one on.
        self.reads: Reads = store
        self._fanout = fanout
        self.metrics = metrics
        self.clock = clock
        #: The most rows one internal read asks for (children of a run, the streams' log pages).
        self.page_size = page_size
        #: ``LASTWORD_WEBHOOK_ALLOWED_HOSTS`` as patterns; empty allows any host.
        self.webhook_hosts = webhook_hosts
        #: ``LASTWORD_WEBHOOK_ALLOW_PRIVATE``: webhooks may target internal addresses.
        self.webhook_allow_private = webhook_allow_private
        #: Called with each ``subagent/end`` this replica committed (once per end, fleet-wide).
        self.end_observers = tuple(end_observers)
        #: The Durable Streams face's use cases (SPEC §17): this service wakes their parked
        #: readers for what it commits, the fan-out for what other replicas commit.
        self.streams = streams

    @property
    def _hub(self) -> Hub:
        return self._fanout.hub

    def _published(self, stored: Sequence[StoredEvent], grown: str | None = None) -> None:
        """Hand a commit's live events to the fan-out and wake the Durable Streams readers of
        every run it changed, once each: the runs of ``stored`` and ``grown``, a run whose log
        grew by events that are not live (an assistant message)."""
        self._fanout.committed(stored)
        changed = {event.run_id for event in stored}
        if grown is not None:
            changed.add(grown)
        for run_id in changed:
            self.streams.run_changed(run_id)
        if self.end_observers:
            for event in stored:
                if event.type == "subagent/end":
                    for observe in self.end_observers:
                        observe(event)

    # -- life ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start hearing commits (other replicas'), then end the turns whose lease ran out."""
        await self._fanout.start()
        await self.sweep_once()

    async def close(self) -> None:
        """Stop hearing commits (the store is closed by whoever opened it)."""
        await self._fanout.close()

    def drain(self) -> None:
        """Shutting down: streams say "reconnect", long polls answer now."""
        self._hub.drain()
        self.streams.drain()

    @property
    def draining(self) -> bool:
        return self._hub.draining

    def refuse_if_draining(self) -> None:
        """Raise :class:`Draining` while draining: a stream or long poll begun now would be cut at once."""
        if self._hub.draining:
            raise Draining("this replica is shutting down; retry (another replica, or this one after its restart)")

    async def ready(self) -> None:
        """Raise :class:`Unavailable` unless the store answers, commits are being heard, and the
        replica is not draining."""
        self.refuse_if_draining()
        try:
            # A store behind a link that drops packets does not answer at all: a probe must
            # hear "not ready" within its own time-out, not wait for the connection to fail.
            await asyncio.wait_for(self._store.ping(), READY_WITHIN)
        except TimeoutError:
            raise Unavailable(f"the store did not answer within {READY_WITHIN:g} s") from None
        if not self._fanout.connected:
            # Writes would work, but live streams here would not hear other replicas' commits.
            raise NoticesUnavailable("not listening for other replicas' commits; reconnecting")

    # -- live ------------------------------------------------------------------------------

    def subscribe_run(self, run_id: str, types: frozenset[str]) -> Subscription:
        self.metrics.subscribers.inc()
        return self._hub.subscribe_run(run_id, types)

    def subscribe_feed(self, parent_run_id: str | None) -> Subscription:
        self.metrics.subscribers.inc()
        return self._hub.subscribe_feed(parent_run_id)

    @property
    def result_polls_waiting(self) -> int:
        """Result polls past their first read, waiting for the turn to end."""
        return self._hub.parked_waiters

    @property
    def result_waiters(self) -> int:
        """How many long polls are parked until a turn ends."""
        return self._hub.result_waiters

    def unsubscribe(self, run_id: str | None, subscription: Subscription) -> None:
        """End a subscription from :meth:`subscribe_run` (``run_id``) or :meth:`subscribe_feed`."""
        self._hub.unsubscribe(run_id, subscription)
        self.metrics.subscribers.dec()

    # -- writes ----------------------------------------------------------------------------

    async def create(self, request: NewRun) -> tuple[RunRecord, bool]:
        run, created, stored = await self._store.create_run(await self._spec(request), self.clock())
        self._created(created, stored)
        return run, created

    async def create_with_events(
        self, request: NewRun, events: Sequence[dict[str, Any]], encoded: Sequence[str] | None = None
    ) -> tuple[RunRecord, bool]:
        """:meth:`create`, and when it created the run :meth:`append` of ``events``, in one store
        transaction (a Durable Stream created with initial content, SPEC §17): a refusal of the
        events leaves no run. The run is returned as it is after the append."""
        started = time.perf_counter()
        spec = await self._spec(request)
        run, created, stored, outcome = await self._store.create_run_with_events(spec, events, self.clock(), encoded)
        if outcome is not None and outcome.chunks_left_out:
            self._hub.resync_run(run.run_id)  # its subscribers since read the chunks from the log
        self._created(created, stored)  # the run's start and the events, in log order
        if outcome is not None:
            self._counted(outcome, started)
        return run, created

    def _created(self, created: bool, stored: list[StoredEvent]) -> None:
        self._published(stored)
        if created:
            self.metrics.runs_created.inc()

    async def _spec(self, request: NewRun) -> RunSpec:
        """The stored spec of a run to create (its webhook checked)."""
        run_id = request.run_id or new_run_id(self.clock())
        webhook = request.webhook
        if webhook is not None:
            check_webhook(webhook.url, webhook.secret, self.webhook_hosts, allow_private=self.webhook_allow_private)
            if not self.webhook_allow_private:
                await check_resolved_webhook(webhook.url)
        return RunSpec(
            run_id=run_id,
            parent_run_id=request.parent_run_id,
            agent=request.agent,
            mode=request.mode,
            metadata=request.metadata,
            lease_seconds=request.lease_seconds,
            canonical=canonical_request(request, run_id),
            webhook=webhook,
            fork_of=request.fork_of,
            join_continuations=request.join_continuations,
        )

    async def append(
        self, run_id: str, events: Sequence[dict[str, Any]], encoded: Sequence[str] | None = None
    ) -> AppendOutcome:
        started = time.perf_counter()
        outcome = await self._store.append(run_id, events, self.clock(), encoded)
        self._appended(run_id, outcome, started)
        return outcome

    async def append_as_producer(
        self, run_id: str, events: Sequence[dict[str, Any]], encoded: Sequence[str] | None, producer: Producer | None
    ) -> tuple[AppendOutcome, tuple[int, int] | None]:
        """:meth:`append` by an idempotent producer (a run written as a Durable Stream, SPEC §17):
        its epoch fences a restarted child's zombie writer. Also the producer's ``(epoch, seq)``."""
        started = time.perf_counter()
        outcome, echo = await self._store.append_as_producer(run_id, events, self.clock(), encoded, producer)
        self._appended(run_id, outcome, started)
        return outcome, echo

    def _appended(self, run_id: str, outcome: AppendOutcome, started: float) -> None:
        """What follows every committed append, whichever way its events came: the fan-out hears
        them (or resyncs the run's readers), the metrics count them."""
        if outcome.chunks_left_out:
            self._hub.resync_run(run_id)
        # The log grew even when nothing of it is published live (an assistant message is not
        # a fan-out event, chunks may have been left out): its Durable Streams readers read it.
        self._published(outcome.stored, run_id if outcome.accepted or outcome.chunks_left_out else None)
        self._counted(outcome, started)

    def _counted(self, outcome: AppendOutcome, started: float) -> None:
        self.metrics.observe_ingest(outcome, time.perf_counter() - started)
        if outcome.ended is not None:
            self.metrics.turns_ended.labels(outcome.ended.stop_reason).inc()

    async def append_batches(
        self, run_id: str, batches: Iterable[tuple[list[dict[str, Any]], list[str]]]
    ) -> AppendOutcome:
        """:meth:`append` of events given a batch at a time (read in the store's thread), in one transaction."""
        started = time.perf_counter()
        outcome = await self._store.append_batches(run_id, batches, self.clock())
        self._appended(run_id, outcome, started)
        return outcome

    async def end(self, run_id: str, stop_reason: StopReason, error: Any, *, cascade: bool = False) -> EndOutcome:
        outcome = await self._store.end_turn(run_id, stop_reason, error, self.clock())
        if outcome is None:  # only the sweep asks for a conditional end; an assert would vanish under -O
            raise RuntimeError(f"the store answered no end for an unconditional end of {run_id!r}")
        self._after_end(outcome)
        if cascade:
            await self._cascade(run_id)
        return outcome

    def _after_end(self, outcome: EndOutcome) -> None:
        self._published(outcome.stored)
        if outcome.changed:
            self.metrics.turns_ended.labels(outcome.turn.stop_reason or "").inc()

    async def _cascade(self, run_id: str) -> None:
        """End the open turns of every descendant with ``cancelled`` (asked for explicitly).

        The walk goes through every child, whatever its status: an idle or ended child can
        still have running children of its own. ``parentRunId`` is not checked at creation,
        so runs can name each other as parents; each run is visited once.
        """
        error = {"message": f"parent run {run_id} ended (cascade)"}
        visited = {run_id}
        pending = [run_id]
        while pending:
            parent = pending.pop()
            for child in await self._children(parent):
                if child.run_id in visited:
                    continue
                visited.add(child.run_id)
                pending.append(child.run_id)
                if child.status != "running":
                    continue
                try:
                    outcome = await self._store.end_turn(child.run_id, "cancelled", error, self.clock())
                except (Conflict, NotFound):
                    continue  # it ended another way (or went away) since it was listed
                if outcome is not None:
                    self._after_end(outcome)

    async def _children(self, run_id: str) -> list[RunRecord]:
        children: list[RunRecord] = []
        before: int | None = None
        while True:
            page = await self._store.list_runs(
                parent_run_id=run_id, status=None, agent=None, limit=self.page_size, before_pk=before
            )
            children.extend(page)
            if len(page) < self.page_size:
                return children
            before = page[-1].pk

    async def next_turn(self, run_id: str) -> RunRecord:
        run, stored = await self._store.start_turn(run_id, self.clock())
        self._published(stored)
        return run

    async def close_run(self, run_id: str) -> RunRecord:
        run, stored = await self._store.close_run(run_id, self.clock())
        self._published(stored)
        for event in stored:
            if event.type == "subagent/end":
                self.metrics.turns_ended.labels(event.body["stopReason"]).inc()
        return run

    async def long_poll(
        self, wait: float, look: Callable[[Heard], Awaitable[tuple[Answer, bool]]], *,
        run_id: str | None = None, parent_run_id: str | None = None,
    ) -> Answer:
        """Register, read, wait: the one way a request waits for turn ends (result, tool result,
        the MCP wait, join). Returns the answer of ``look``'s last call.

        ``look`` reads what its caller needs and returns ``(answer, done)``. It is first called
        with ``None`` (read everything), then with the events heard since it last looked:
        ``run_id``'s turn ends and closes, and every lifecycle event of ``parent_run_id``'s
        children. The waiter is in the hub before the first read, so an end that commits while
        ``look`` reads is heard and looked at next; it cannot slip between the read and the
        wait. It stops when ``look`` says done, when ``wait`` runs out (after one more look),
        and when the service shuts down; a caller whose client leaves cancels it.
        """
        if wait <= 0:
            return (await look(None))[0]
        deadline = time.monotonic() + wait
        waiter = self._hub.listen(run_id=run_id, parent_run_id=parent_run_id)
        try:
            answer, done = await look(None)
            while not done:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._hub.draining:
                    break
                self._hub.parked_waiters += 1
                try:
                    heard = await waiter.next(remaining)
                finally:
                    self._hub.parked_waiters -= 1
                answer, done = await look(heard)
            return answer
        finally:
            self._hub.unlisten(waiter)

    async def result(self, run_id: str, turn: int | None, wait: float) -> tuple[RunRecord, TurnRecord]:
        """The run and the turn's result, waiting up to ``wait`` seconds for the turn to end.

        Without ``turn`` it is the turn current when the request arrived, for the whole wait:
        when that turn ends and the next starts at once, the answer is the ended turn's, not
        the new one's (which would have the reader wait on, or report, a turn it never asked for).
        """

        async def look(_heard: Heard) -> tuple[tuple[RunRecord, TurnRecord], bool]:
            nonlocal turn
            run, record = await self._store.turn_result(run_id, turn)
            turn = record.turn
            return (run, record), record.ended

        return await self.long_poll(wait, look, run_id=run_id)

    async def join(
        self, run_id: str, wait: float, *, any_child: bool, expect: int = 0
    ) -> tuple[bool, list[TurnRecord]]:
        """The current turn of every child of ``run_id``, waiting up to ``wait`` seconds until
        at least ``expect`` children exist and all of them (``any_child``: one of them) have
        ended; whether that happened, and the turns (newest child first).

        It reads every child once, then only the child an event it hears is about (a child
        created, a turn started, ended or closed): the cost of one end does not grow with the
        number of children.
        """
        children = ChildTurns()

        async def read(child_id: str) -> None:
            try:
                children.put((await self._store.turn_result(child_id, None))[1])
            except (NotFound, Gone):
                children.forget(child_id)  # deleted since it was listed

        async def look(heard: Heard) -> tuple[None, bool]:
            if heard is None:
                children.clear()
                for child in reversed(await self._children(run_id)):
                    await read(child.run_id)
            else:
                for child_id in dict.fromkeys(event.run_id for event in heard):
                    await read(child_id)
            return None, children.done(any_child=any_child, expect=expect)

        await self.long_poll(wait, look, parent_run_id=run_id)
        if wait > 0:
            # The running children's output as it stands now, not as it stood when first read.
            for child_id in children.running:
                await read(child_id)
        return children.done(any_child=any_child, expect=expect), children.newest_first()

    async def deliveries(self, run_id: str) -> list[Delivery]:
        return await self._store.deliveries(run_id)

    async def outbox_stats(self) -> tuple[int, float | None]:
        return await self._store.outbox_stats()

    async def messages(self, run_id: str, format: Format, turn: int | None) -> Transcript:
        """The run's provider-safe transcript, up to the end of ``turn`` (default: all of it)."""
        run = await self._store.get_run(run_id)
        if turn is not None and turn > run.turn:
            raise TurnNotFound(f"run {run_id!r} has no turn {turn}", runId=run_id, turn=turn)
        last = turn if turn is not None else run.turn
        loop = asyncio.get_running_loop()

        def read(call: Coroutine[Any, Any, list[StoredEvent]]) -> list[StoredEvent]:
            return asyncio.run_coroutine_threadsafe(call, loop).result()

        def history() -> Iterator[HistoryEvent]:
            # A fork's history starts with what it inherited (SPEC §12), then its own events.
            yield from (HistoryEvent(e.run_id, e.seq, e.turn, e.body) for e in read(self._store.inherited_events(run_id)))
            after = 0
            while True:
                page = read(self._store.events_after(run_id, after, HISTORY_PAGE, HISTORY_TYPES))
                yield from (HistoryEvent(e.run_id, e.seq, e.turn, e.body) for e in page if e.turn <= last)
                if len(page) < HISTORY_PAGE or page[-1].turn > last:
                    return
                after = page[-1].seq
                del page  # (the transcript keeps what it assembles, not the events: one page at a time)

        # The log is read a page at a time as the transcript consumes it, in a worker thread (a
        # long run's transcript is work, and the loop must stay free), each page read on the loop.
        return await asyncio.to_thread(transcript, history(), format)

    async def texts(self, turn: TurnRecord) -> list[str]:
        """Every visible text the assistant wrote in ``turn`` (SPEC §19), read from its log."""
        events: list[dict[str, Any]] = []
        after = turn.start_seq - 1
        while True:
            page = await self._store.events_after(turn.run_id, after, HISTORY_PAGE, TEXT_TYPES)
            events.extend(event.body for event in page if event.turn == turn.turn)
            if len(page) < HISTORY_PAGE or page[-1].turn > turn.turn:
                return assistant_texts(events)
            after = page[-1].seq

    async def renew_lease(self, run_id: str) -> None:
        """Renew the open turn's lease now, without an event (SPEC §16a: a body still sending)."""
        await self._store.renew_lease(run_id, self.clock())

    async def sweep_once(self) -> int:
        """End every turn whose lease has expired; the count ended."""
        ended = 0
        now = self.clock()
        for run_id in await self._store.expired_runs(now):
            try:
                outcome = await self._store.end_turn(
                    run_id, "timeout", {"message": "the run's lease expired"}, now, only_if_expired=True
                )
            except NotFound:
                continue
            if outcome is not None:
                ended += 1
                self.metrics.leases_expired.inc()
                self._after_end(outcome)
        return ended

    async def delete_expired_runs(self, retention_hours: float) -> int:
        """Delete runs that ended more than ``retention_hours`` ago; the count deleted."""
        now = self.clock()
        cutoff = now - retention_hours * 3600
        total = 0
        while True:
            deleted = await self._store.delete_ended_runs(cutoff, now, RETENTION_BATCH)
            total += len(deleted)
            self.metrics.runs_deleted.inc(len(deleted))
            if len(deleted) < RETENTION_BATCH:
                return total

    @staticmethod
    async def every(interval: float, job: Callable[[], Awaitable[object]], name: str) -> None:
        """Run ``job`` every ``interval`` seconds until cancelled, surviving its failures."""
        while True:
            try:
                await job()
            except Exception:  # a passing store failure must not end the background job
                log.exception("%s failed", name)
            await asyncio.sleep(interval)
