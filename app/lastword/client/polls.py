"""The long polls of ``wait_result`` and ``join``: one request after another until done or out of time.

Each request asks the server to hold it at most :data:`WAIT_PER_REQUEST`, so a connection that
died silently is noticed within a minute, whatever the caller's ``timeout``.
"""

from __future__ import annotations

import time

from lastword.client.calls import _Call, _Core
from lastword.schemas import ChildrenJoin, SubagentResult


#: ``wait_result`` asks for at most this long per request, so a connection that died silently
#: is noticed within a minute, whatever the caller's ``timeout``.
WAIT_PER_REQUEST = 60.0


class _Wait:
    """The long poll of ``wait_result``: one request after another until the turn ends or the
    caller's time runs out, each asking the server to hold it up to ``WAIT_PER_REQUEST``."""

    def __init__(self, core: _Core, run_id: str, timeout: float, turn: int | None, texts: bool = False) -> None:
        self._core = core
        self._run_id = run_id
        self._deadline = time.monotonic() + timeout
        self._turn = turn
        self._texts = texts
        self._wait = 0.0

    def next_call(self) -> _Call[SubagentResult]:
        self._wait = max(0.0, min(WAIT_PER_REQUEST, self._deadline - time.monotonic()))
        return self._core.result(self._run_id, self._turn, self._wait, self._texts)

    def finished(self, result: SubagentResult) -> bool:
        # Without a turn asked for, the next polls ask for the turn the first answer was about:
        # a continuable run's next turn must not replace the one the caller is waiting for.
        if self._turn is None:
            self._turn = result.turn
        return result.status == "ended" or self._wait <= 0


class _Join:
    """The long poll of ``join``: one request after another until the children are done or the
    caller's time runs out, each asking the server to hold it up to ``WAIT_PER_REQUEST``."""

    def __init__(self, core: _Core, run_id: str, timeout: float, any_child: bool, expect: int) -> None:
        self._core = core
        self._run_id = run_id
        self._deadline = time.monotonic() + timeout
        self._any_child = any_child
        self._expect = expect
        self._wait = 0.0

    def next_call(self) -> _Call[ChildrenJoin]:
        self._wait = max(0.0, min(WAIT_PER_REQUEST, self._deadline - time.monotonic()))
        return self._core.join(self._run_id, self._wait, self._any_child, self._expect)

    def finished(self, joined: ChildrenJoin) -> bool:
        return joined.done or self._wait <= 0
