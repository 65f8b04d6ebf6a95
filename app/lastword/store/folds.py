"""The folds of open turns, one per turn, each behind a lock, in a bounded cache.

A writer holds the fold's lock from the moment it catches the fold up with the log until its
transaction commits, and drops the fold if the transaction fails, so a fold never holds an
event the log does not. A fold is caught up from the log whenever the log has moved past it
(another replica wrote, or the process restarted), which is how any replica serves any run.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from lastword.rules.fold import JOIN_STOPPING_TYPES, TurnFold
from lastword.rules.records import RunRecord
from lastword.store.rows import FOLD_EVENT_TYPES, loads
from lastword.store.tx import Tx


class FoldSlot:
    """The fold of one open turn and the lock that serialises its readers and writers."""

    __slots__ = ("lock", "fold")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.fold: TurnFold | None = None

    def acquire(self) -> None:
        self.lock.acquire()

    def release(self, committed: bool) -> None:
        if not committed:
            self.fold = None  # it may hold events the log never got
        self.lock.release()

    def discard(self) -> None:
        self.fold = None


class FoldCache:
    """Slots by ``(run_id, turn)``; the least recently used go first past ``size``."""

    def __init__(self, size: int = 50_000) -> None:
        self._slots: OrderedDict[tuple[str, int], FoldSlot] = OrderedDict()
        self._lock = threading.Lock()
        self._size = size

    def slot(self, run_id: str, turn: int) -> FoldSlot:
        key = (run_id, turn)
        with self._lock:
            slot = self._slots.get(key)
            if slot is None:
                slot = self._slots[key] = FoldSlot()
                if len(self._slots) > self._size:
                    # The oldest open folds are rebuilt from the log if they are asked for again.
                    self._slots.popitem(last=False)
            else:
                self._slots.move_to_end(key)
            return slot

    def forget(self, run_id: str, turn: int) -> None:
        with self._lock:
            self._slots.pop((run_id, turn), None)

    def held(self, tx: Tx, run: RunRecord) -> TurnFold:
        """The open turn's fold, caught up with the log, locked until ``tx`` ends."""
        slot = self.slot(run.run_id, run.turn)
        tx.hold(slot)
        return caught_up(tx, slot, run)


def caught_up(tx: Tx, slot: FoldSlot, run: RunRecord) -> TurnFold:
    """The run's open-turn fold with every event of the log up to ``run.last_seq`` (lock held)."""
    fold = slot.fold
    if fold is not None and fold.last_seq >= run.last_seq:
        return fold
    joins = run.join_continuations is True  # SPEC §14: only when asked for
    if fold is None:
        row = tx.one("SELECT start_seq FROM turns WHERE run_id = ? AND turn = ?", (run.run_id, run.turn))
        fold = slot.fold = TurnFold(last_seq=row[0], join_continuations=joins)
    if fold.last_seq < run.last_seq:
        # A joining fold also needs the events that stop a join (SPEC §14).
        types = FOLD_EVENT_TYPES + (tuple(sorted(JOIN_STOPPING_TYPES)) if joins else ())
        rows = tx.rows(
            "SELECT seq, body FROM events WHERE run_id = ? AND seq > ? AND seq <= ? "
            f"AND turn = ? AND type IN ({', '.join('?' * len(types))}) ORDER BY seq",
            (run.run_id, fold.last_seq, run.last_seq, run.turn, *types),
        )
        for seq, body in rows:
            fold.push(loads(body), seq)
        fold.last_seq = run.last_seq
    return fold
