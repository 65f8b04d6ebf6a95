"""The folds of open turns, one per turn, each behind a lock, in a bounded cache.

A writer holds the fold's lock from the moment it catches the fold up with the log until its
transaction commits, and drops the fold if the transaction fails, so a fold never holds an
event the log does not. A fold is caught up from the log whenever the log has moved past it
(another replica wrote, or the process restarted), which is how any replica serves any run.

The cache is bounded twice: by the number of folds and by the bytes they hold
(``LASTWORD_FOLD_CACHE_BYTES``), since one turn streaming megabytes of text holds as much as
thousands of short ones. Past either bound the least recently used folds go (one in use is
kept), and are rebuilt from the log when they are asked for again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from lastword.rules.fold import JOIN_STOPPING_TYPES, TurnFold
from lastword.rules.records import RunRecord
from lastword.store.sql.rows import FOLD_EVENT_TYPES, loads
from lastword.store.sql.tx import Tx

#: Folds kept at most (``SqlStore(fold_cache_size=…)``).
FOLD_CACHE_SIZE = 50_000
#: Bytes the kept folds may hold (``LASTWORD_FOLD_CACHE_BYTES``).
FOLD_CACHE_BYTES = 256 * 1024 * 1024
#: What an empty fold and its slot cost, counted so that many small folds count too.
FOLD_OVERHEAD_BYTES = 1024


class MeasuredFold(TurnFold):
    """A fold that counts the bytes it holds, as events are pushed, for the cache's bound.

    The count is an upper bound, cheap to keep: the text of every chunk, and the content of
    the largest message (a fold keeps only the selected one's), or of every message for a fold
    that joins continuations (it keeps the max-tokens segments).
    """

    __slots__ = ("_text_bytes", "_message_bytes")

    def __init__(self, last_seq: int = 0, *, join_continuations: bool = False) -> None:
        super().__init__(last_seq, join_continuations=join_continuations)
        self._text_bytes = 0
        self._message_bytes = 0

    @property
    def held_bytes(self) -> int:
        return FOLD_OVERHEAD_BYTES + self._text_bytes + self._message_bytes

    def _fold_event(self, kind: Any, event: Mapping[str, Any]) -> None:
        super()._fold_event(kind, event)
        if kind == "assistant/message":
            content = (event.get("message") or {}).get("content") or []
            size = len(orjson.dumps(content))
            self._message_bytes = self._message_bytes + size if self._join else max(self._message_bytes, size)

    def push_texts(self, texts: Sequence[str]) -> None:
        super().push_texts(texts)
        self._text_bytes += sum(map(len, filter(None, texts)))


class FoldSlot:
    """The fold of one open turn and the lock that serialises its readers and writers."""

    __slots__ = ("lock", "fold", "counted", "key", "_cache")

    def __init__(self, cache: FoldCache | None = None, key: tuple[str, int] = ("", 0)) -> None:
        self.lock = threading.Lock()
        self.fold: MeasuredFold | None = None
        #: The fold's bytes as the cache last counted them.
        self.counted = FOLD_OVERHEAD_BYTES
        self.key = key
        self._cache = cache

    def acquire(self) -> None:
        self.lock.acquire()

    def release(self, committed: bool) -> None:
        if not committed:
            self.fold = None  # it may hold events the log never got
        self.measured()
        self.lock.release()

    def discard(self) -> None:
        self.fold = None

    def measured(self) -> None:
        """Tell the cache what the fold holds now (lock held: it may have grown)."""
        if self._cache is not None:
            self._cache.count(self)


class FoldCache:
    """Slots by ``(run_id, turn)``; the least recently used go first past ``size`` folds or
    ``max_bytes`` held by them."""

    def __init__(self, size: int = FOLD_CACHE_SIZE, max_bytes: int = FOLD_CACHE_BYTES) -> None:
        self._slots: OrderedDict[tuple[str, int], FoldSlot] = OrderedDict()
        self._lock = threading.Lock()
        self._size = size
        self._max_bytes = max_bytes
        self._bytes = 0

    @property
    def held_bytes(self) -> int:
        """What the kept folds hold, as they last counted it."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._slots)

    def slot(self, run_id: str, turn: int) -> FoldSlot:
        key = (run_id, turn)
        with self._lock:
            slot = self._slots.get(key)
            if slot is None:
                slot = self._slots[key] = FoldSlot(self, key)
                self._bytes += slot.counted
                self._evict()
            else:
                self._slots.move_to_end(key)
            return slot

    def count(self, slot: FoldSlot) -> None:
        """Count ``slot``'s fold as it is now, and go under the bounds again."""
        held = FOLD_OVERHEAD_BYTES if slot.fold is None else slot.fold.held_bytes
        with self._lock:
            if self._slots.get(slot.key) is slot:  # (not if it was evicted or forgotten meanwhile)
                self._bytes += held - slot.counted
            slot.counted = held
            self._evict()

    def _evict(self) -> None:
        """The least recently used folds go until both bounds hold; one whose lock is held (in
        use: a writer's, or a reader's catching up) stays."""
        extra_folds, extra_bytes = len(self._slots) - self._size, self._bytes - self._max_bytes
        if extra_folds <= 0 and extra_bytes <= 0:
            return  # every append asks, after it counts its fold: most find both bounds hold
        going: list[tuple[str, int]] = []
        for key, slot in self._slots.items():
            if extra_folds <= 0 and extra_bytes <= 0:
                break
            if not slot.lock.locked():
                going.append(key)
                extra_folds, extra_bytes = extra_folds - 1, extra_bytes - slot.counted
        for key in going:
            # The oldest open folds are rebuilt from the log if they are asked for again.
            self._bytes -= self._slots.pop(key).counted

    def forget(self, run_id: str, turn: int) -> None:
        with self._lock:
            slot = self._slots.pop((run_id, turn), None)
            if slot is not None:
                self._bytes -= slot.counted

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
        fold = slot.fold = MeasuredFold(last_seq=row[0], join_continuations=joins)
    if fold.last_seq < run.last_seq:
        # A joining fold also needs the events that stop a join (SPEC §14).
        types = FOLD_EVENT_TYPES + (tuple(sorted(JOIN_STOPPING_TYPES)) if joins else ())
        rows = tx.rows(
            "SELECT seq, body FROM events WHERE run_id = ? AND seq > ? AND seq <= ? "
            f"AND turn = ? AND type IN ({', '.join('?' * len(types))}) ORDER BY seq",
            (run.run_id, fold.last_seq, run.last_seq, run.turn, *types),
        )
        fold.push_many((loads(body) for _, body in rows), run.last_seq)
        slot.measured()
    return fold
