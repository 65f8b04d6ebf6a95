"""The run/turn state machine (SPEC §7–§8) as pure functions over records.

No SQL, no clock, no I/O. Each operation takes the run as the store read it (holding its row
lock), the open turn's fold where the output matters, and what the client asked; it answers
with a :class:`Change` — the run as it must be afterwards, the events to log, the turn that
starts or ends — or raises the service's error. The store persists a change as it is, in the
same transaction, and decides nothing itself; so every rule below is tested here without a
database (tests/test_runstate.py).

The rules, in one place:

* A run starts ``running`` at turn 1 with ``subagent/start`` at seq 1.
* Events are accepted only while the run is ``running``; ``seq`` goes up by one per event.
* A ``turn/end`` event (or an end request, or lease expiry, or close) ends the open turn:
  the fold selects its output, ``subagent/end`` is logged, and the run becomes ``idle``
  (continuable) or ``ended`` (oneshot). Nothing may follow a ``turn/end`` in its request.
* Every accepted event renews the lease; an ended turn has none.
* A repeated end with the same stop reason is answered as before; another reason is refused.
* Only an idle continuable run starts a next turn; only a continuable run is closed, which ends
  an open turn as ``cancelled`` first and logs ``run/closed``.
* A repeated ``eventId`` with the same content is a retry (stored once), with other content a
  conflict; a create repeated with the same body returns the run, with another a conflict.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import count
from operator import itemgetter
from typing import Any, Literal

import orjson

from lastword.errors import EventIdConflict, NotContinuable, RunEnded, RunExists, RunRunning, TurnAlreadyEnded
from lastword.rules import lifecycle
from lastword.rules.fold import TurnFold
from lastword.rules.records import RunMode, RunRecord, RunSpec, RunStatus, TurnRecord
from lastword.rules.stop_reasons import StopReason, normalise_stop_reason

#: An event as ingested: a validated JSON object.
Event = dict[str, Any]
#: An ingested event to log in the open turn: ``(seq, event, its JSON if the caller has it)``.
#: A plain tuple, not a record: one is made per ingested event, on the hottest path.
Appended = tuple[int, Event, str | None]
_event_of = itemgetter(1)


@dataclass(slots=True, frozen=True, kw_only=True)
class NewEvent:
    """A lifecycle event the service adds to a run's log (and to the firehose)."""

    seq: int
    turn: int
    type: str
    body: Event


@dataclass(slots=True, frozen=True, kw_only=True)
class EndedTurn:
    """How the open turn ended, with the output the fold selected."""

    turn: int
    ended_at: float
    stop_reason: StopReason
    error: Any
    output: list[dict[str, Any]]
    usage: dict[str, int]


@dataclass(slots=True, kw_only=True)
class Change:
    """What one operation changes, for the store to persist in one transaction."""

    run: RunRecord  # the run afterwards
    #: Ingested events to log in the open turn, in seq order, before ``events``.
    appended: list[Appended] = field(default_factory=list)
    events: list[NewEvent] = field(default_factory=list)  # lifecycle events to log, in seq order
    started: TurnRecord | None = None  # a turn that begins
    ended: EndedTurn | None = None  # the turn that ends

    def then(self, later: Change) -> Change:
        """This change followed by ``later`` (computed from ``self.run``; it appends nothing)."""
        if self.ended is not None and later.ended is not None:
            raise ValueError("one change ends at most one turn")
        if later.appended:
            raise ValueError("ingested events come first in a change")
        return Change(
            run=later.run,
            appended=self.appended,
            events=[*self.events, *later.events],
            started=later.started or self.started,
            ended=later.ended or self.ended,
        )


# -- small rules -----------------------------------------------------------------------


def _moved(
    run: RunRecord, *, last_seq: int, lease_expires_at: float | None, updated_at: float,
    status: RunStatus | None = None, turn: int | None = None,
) -> RunRecord:
    """``run`` after a change (``dataclasses.replace`` spelled out: it runs once per ingest
    request, and the generic one costs several times more)."""
    return RunRecord(
        pk=run.pk, run_id=run.run_id, parent_run_id=run.parent_run_id, agent=run.agent, mode=run.mode,
        metadata=run.metadata, lease_seconds=run.lease_seconds, canonical=run.canonical,
        status=run.status if status is None else status, turn=run.turn if turn is None else turn,
        last_seq=last_seq, lease_expires_at=lease_expires_at, created_at=run.created_at, updated_at=updated_at,
        fork_of=run.fork_of, join_continuations=run.join_continuations,
    )


def lease_expiry(lease_seconds: float, now: float) -> float | None:
    """When a turn renewed at ``now`` expires; None for no lease (0)."""
    return now + lease_seconds if lease_seconds > 0 else None


def lease_expired(run: RunRecord, now: float) -> bool:
    """Whether the run's open turn has outlived its lease (the sweep ends it)."""
    return run.status == "running" and run.lease_expires_at is not None and run.lease_expires_at <= now


def status_after_turn(mode: RunMode) -> RunStatus:
    return "idle" if mode == "continuable" else "ended"


def accepts_events(run: RunRecord) -> bool:
    return run.status == "running"


def turn_has_ended(run: RunRecord, last_turn: TurnRecord, index: int | None = None) -> RunEnded:
    """The refusal of events for a run whose turn has ended (``last_turn`` is its latest)."""
    extra: dict[str, Any] = {"runId": run.run_id, "turn": run.turn, "stopReason": last_turn.stop_reason}
    if index is not None:
        extra["index"] = index
    return RunEnded(
        f"turn {run.turn} of run {run.run_id!r} has ended ({last_turn.stop_reason}); "
        "no more events are accepted for it",
        **extra,
    )


def _start(run: RunRecord, turn: int, seq: int, now: float) -> tuple[TurnRecord, NewEvent]:
    record = TurnRecord(
        run_id=run.run_id, turn=turn, start_seq=seq, started_at=now, ended_at=None,
        stop_reason=None, error=None, output=[], usage={},
    )
    body = lifecycle.start_event(run.run_id, run.parent_run_id, run.agent, turn, now)
    return record, NewEvent(seq=seq, turn=turn, type=body["type"], body=body)


# -- creation --------------------------------------------------------------------------


def create(spec: RunSpec, now: float, default_lease_seconds: float) -> Change:
    """A new run, running turn 1, which starts at seq 1 (a fork: right after its boundary)."""
    first = 1 if spec.fork_of is None else spec.fork_of[1] + 1  # SPEC §12: seqs go on along the fork
    lease = spec.lease_seconds if spec.lease_seconds is not None else default_lease_seconds
    run = RunRecord(
        pk=0, run_id=spec.run_id, parent_run_id=spec.parent_run_id, agent=spec.agent, mode=spec.mode,
        metadata=spec.metadata, lease_seconds=lease, canonical=spec.canonical, status="running",
        turn=1, last_seq=first, lease_expires_at=lease_expiry(lease, now), created_at=now, updated_at=now,
        fork_of=spec.fork_of, join_continuations=spec.join_continuations,
    )
    started, event = _start(run, 1, first, now)
    return Change(run=run, events=[event], started=started)


def secret_digest(secret: str) -> str:
    """What a run's stored spec holds in place of its webhook secret: enough to tell a repeated
    create from a different one, without a second copy of the secret (it lives in ``webhooks``)."""
    return "sha256:" + hashlib.sha256(secret.encode()).hexdigest()


def _with_secret_digest(canonical: str) -> str:
    """A spec stored before secrets were digested, as it is stored now (to compare with one)."""
    body = orjson.loads(canonical)
    webhook = body.get("webhook") if isinstance(body, dict) else None
    secret = webhook.get("secret") if isinstance(webhook, dict) else None
    if not isinstance(webhook, dict) or not isinstance(secret, str) or secret.startswith("sha256:"):
        return canonical
    webhook["secret"] = secret_digest(secret)
    return orjson.dumps(body, option=orjson.OPT_SORT_KEYS).decode()


def repeated_create(existing: RunRecord, spec: RunSpec) -> RunRecord:
    """A create for a run id that exists: the same body is a retry, another a conflict."""
    if existing.canonical != spec.canonical and _with_secret_digest(existing.canonical) != spec.canonical:
        raise RunExists(f"run {spec.run_id!r} exists with a different body", runId=spec.run_id)
    return existing


# -- idempotency of events -------------------------------------------------------------


def without_duplicates(
    events: Sequence[Event], stored: Mapping[str, Any], *, carried: Sequence[str] | None = None
) -> tuple[list[tuple[int, Event]], int]:
    """The events not yet stored (with their index in the request) and the count of repeats.

    ``stored`` maps the ``eventId``s of this request already in the run's log to their bodies.
    A repeated ``eventId`` with the same content (in the log or earlier in the request) is a
    retry, kept once; with other content it is a producer bug, refused as a whole.

    ``carried``: the ``eventId``s the events carry, if the caller listed them. When they carry
    none, nothing repeats, and the events are not looked at one by one (most appends of a
    stream carry none: the loop below was a twentieth of a 1,000-event append).
    """
    if carried is not None and not carried:
        return list(enumerate(events)), 0
    known = dict(stored)
    fresh: list[tuple[int, Event]] = []
    duplicates = 0
    for index, event in enumerate(events):
        event_id = event.get("eventId")
        if event_id is not None:
            if event_id in known:
                if known[event_id] != event:
                    raise EventIdConflict(
                        f"event {index}: eventId {event_id!r} was already used for other content",
                        index=index, eventId=event_id,
                    )
                duplicates += 1
                continue
            known[event_id] = event
        fresh.append((index, event))
    return fresh, duplicates


# -- appending -------------------------------------------------------------------------


def numbered(run: RunRecord, fresh: Sequence[tuple[int, Event]], encoded: Sequence[str] | None = None) -> list[Appended]:
    """``fresh`` events as :func:`append` logs them: each with its ``seq``, after the run's last.

    Known before the fold has seen them, so a store may start writing the rows first.
    """
    first = run.last_seq + 1
    if encoded is None:
        return [(seq, event, None) for seq, (_, event) in enumerate(fresh, first)]
    if fresh and fresh[-1][0] == len(fresh) - 1 and len(encoded) >= len(fresh):
        # The first events of the request, none left out (most appends): their JSON is the
        # first of ``encoded``, paired in C (a tuple built an event in Python cost a fifth more).
        return list(zip(count(first), map(_event_of, fresh), encoded))
    return [(seq, event, encoded[index]) for seq, (index, event) in enumerate(fresh, first)]


def append(
    run: RunRecord,
    fold: TurnFold,
    fresh: Sequence[tuple[int, Event]],
    now: float,
    encoded: Sequence[str] | None = None,
    logged: list[Appended] | None = None,
) -> Change:
    """Log ``fresh`` events (index in the request, event) in the open turn of a running run.

    ``fold`` is the open turn's fold, caught up with the log; the events are pushed into it.
    A ``turn/end`` among them ends the turn, and must be the last. The caller checked
    :func:`accepts_events`. ``logged``: :func:`numbered` of the same, if the caller has it.
    """
    if not accepts_events(run):
        raise ValueError("append to a run that is not running")
    if logged is None:
        logged = numbered(run, fresh, encoded)
    end: tuple[StopReason, Any] | None = None
    for index, event in fresh:
        if end is not None:
            raise RunEnded(
                f"event {index} follows the turn/end of the same request",
                index=index, runId=run.run_id, turn=run.turn, stopReason=end[0],
            )
        if event["type"] == "turn/end":
            end = (normalise_stop_reason(event["stopReason"]), event.get("error"))
    seq = run.last_seq + len(logged)
    if logged:
        fold.push_many(map(_event_of, logged), seq)
    appended = Change(
        run=_moved(run, last_seq=seq, lease_expires_at=lease_expiry(run.lease_seconds, now), updated_at=now),
        appended=logged,
    )
    if end is None:
        return appended
    return appended.then(end_turn(appended.run, fold, end[0], end[1], now))


# -- ending a turn ---------------------------------------------------------------------

EndDecision = Literal["end", "repeat", "skip"]


def decide_end(run: RunRecord, now: float, *, only_if_expired: bool) -> EndDecision:
    """What an end request does: ``end`` the open turn, answer a ``repeat`` of an ended one
    (see :func:`repeated_end`), or ``skip`` (the sweep, for a turn whose lease has not run out
    or that has ended already)."""
    if only_if_expired:
        return "end" if lease_expired(run, now) else "skip"
    return "end" if run.status == "running" else "repeat"


def repeated_end(run: RunRecord, last_turn: TurnRecord, stop_reason: StopReason) -> TurnRecord:
    """An end for a turn that has ended: the same reason answers as before, another is refused."""
    if last_turn.stop_reason == stop_reason:
        return last_turn
    raise TurnAlreadyEnded(
        f"turn {run.turn} of run {run.run_id!r} already ended with {last_turn.stop_reason}",
        runId=run.run_id, turn=run.turn, stopReason=last_turn.stop_reason,
    )


def end_turn(
    run: RunRecord,
    fold: TurnFold,
    stop_reason: StopReason,
    error: Any,
    now: float,
) -> Change:
    """End the open turn with the output ``fold`` selects; the run becomes idle or ended by its mode."""
    if run.status != "running":
        raise ValueError("end_turn of a run that is not running")
    output, usage = fold.collect(), fold.usage
    seq = run.last_seq + 1
    body = lifecycle.end_event(
        run.run_id, run.parent_run_id, run.agent, run.turn, stop_reason, output, usage, error, now
    )
    return Change(
        run=_moved(run, last_seq=seq, status=status_after_turn(run.mode), lease_expires_at=None,
                   updated_at=now),
        events=[NewEvent(seq=seq, turn=run.turn, type=body["type"], body=body)],
        ended=EndedTurn(turn=run.turn, ended_at=now, stop_reason=stop_reason, error=error, output=output,
                      usage=usage),
    )


# -- turns of a continuable run --------------------------------------------------------


def next_turn(run: RunRecord, now: float) -> Change:
    """Start the next turn of an idle continuable run."""
    if run.mode != "continuable":
        raise NotContinuable(f"run {run.run_id!r} is oneshot: it has exactly one turn")
    if run.status == "running":
        raise RunRunning(
            f"run {run.run_id!r} is running: a new turn starts only when the run is idle", runStatus="running"
        )
    if run.status == "ended":
        raise RunEnded(
            f"run {run.run_id!r} is ended: a new turn starts only when the run is idle", runStatus="ended"
        )
    seq, turn = run.last_seq + 1, run.turn + 1
    after = _moved(run, last_seq=seq, status="running", turn=turn,
                   lease_expires_at=lease_expiry(run.lease_seconds, now), updated_at=now)
    started, event = _start(after, turn, seq, now)
    return Change(run=after, events=[event], started=started)


CloseDecision = Literal["close", "end_and_close", "closed"]


def decide_close(run: RunRecord) -> CloseDecision:
    """Whether closing must end an open turn first, or the run is closed already."""
    if run.mode != "continuable":
        raise NotContinuable(f"run {run.run_id!r} is oneshot; it ends with its turn")
    if run.status == "ended":
        return "closed"
    return "end_and_close" if run.status == "running" else "close"


CLOSED_ERROR = {"message": "the run was closed"}


def close(run: RunRecord, fold: TurnFold | None, now: float) -> Change:
    """Close a continuable run; an open turn (``fold`` given) ends as ``cancelled`` first."""
    decision = decide_close(run)
    if decision == "closed":
        return Change(run=run)
    change = Change(run=run)
    if decision == "end_and_close":
        if fold is None:
            raise ValueError("closing a running run needs its open turn's fold")
        # The run is idle for no one to see: the same change closes it.
        change = end_turn(run, fold, "cancelled", dict(CLOSED_ERROR), now)
    last = change.run
    seq = last.last_seq + 1
    body = lifecycle.closed_event(last.run_id, last.parent_run_id, last.agent, now)
    closed = Change(
        run=_moved(last, last_seq=seq, status="ended", lease_expires_at=None, updated_at=now),
        events=[NewEvent(seq=seq, turn=last.turn, type=body["type"], body=body)],
    )
    return change.then(closed)
