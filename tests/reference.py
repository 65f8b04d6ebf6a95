"""The selection rule and usage sum (SPEC §4–§5) written again from the SPEC's words, for checking.

This is the one reference the tests (and ``bench``) compare the service with. It imports
nothing from ``lastword`` on purpose: a test that compares ``lastword.rules.fold`` with code built on
``lastword.rules.fold`` cannot fail. It is written for plainness, not speed, and in a different
shape from the fold: it keeps the last substantive message's kept blocks (the fold keeps the
message and filters on read) and sums usage per source at the end.

Read literally, SPEC §5 says, over one turn's events in ``seq`` order:

1. the output is the kept blocks of the last ``assistant/message`` holding a substantive block
   (kept: neither ``tool_result``, nor bookkeeping, nor blank ``text``; order kept);
2. else, if the concatenation of the ``text`` deltas of ``assistant/chunk`` events holds a
   non-white-space character, one text block holding that whole concatenation, unchanged;
3. else ``[]``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

Block = dict[str, Any]

USAGE_FIELDS = ("inputTokens", "outputTokens", "cacheReadTokens", "cacheWriteTokens")
NEVER_OUTPUT = ("tool_result", "step-start", "step-finish", "patch")


def counts(block: Mapping[str, Any]) -> bool:
    """SPEC §3's "substantive": blank text, tool results and bookkeeping blocks do not count."""
    if block["type"] in NEVER_OUTPUT:
        return False
    if block["type"] == "text":
        return str(block["text"]).strip() != ""
    return True


class ReferenceTurn:
    """One turn's events, added in ``seq`` order; ``output()`` and ``usage()`` by the SPEC."""

    def __init__(self) -> None:
        self.kept: list[Block] | None = None
        self.streamed: list[str] = []
        self.message_usages: list[Mapping[str, Any] | None] = []
        self.end_usages: list[Mapping[str, Any] | None] = []

    def add(self, event: Mapping[str, Any]) -> None:
        if event["type"] == "assistant/message":
            self.message_usages.append(event["message"].get("usage"))
            kept = [block for block in event["message"]["content"] if counts(block)]
            if kept:
                self.kept = kept
        elif event["type"] == "assistant/chunk" and event["delta"]["type"] == "text":
            self.streamed.append(event["delta"]["text"])
        elif event["type"] == "turn/end":
            self.end_usages.append(event.get("usage"))

    @property
    def from_message(self) -> bool:
        """Whether the output is a selected message's blocks (rule 1), not streamed text."""
        return self.kept is not None

    def output(self) -> list[Block]:
        if self.kept is not None:
            return list(self.kept)
        whole = "".join(self.streamed)
        return [{"type": "text", "text": whole}] if whole.strip() else []

    def usage(self) -> dict[str, int]:
        """The sum over every assistant message, empty ones too (SPEC §4); a ``turn/end``'s
        usage counts only in a turn without any assistant message (chunk-only transports)."""
        sources = self.message_usages if self.message_usages else self.end_usages
        total = dict.fromkeys(USAGE_FIELDS, 0)
        for source in sources:
            for name in USAGE_FIELDS:
                total[name] += int((source or {}).get(name, 0))
        return total


def reference_turn(events: Iterable[Mapping[str, Any]]) -> ReferenceTurn:
    turn = ReferenceTurn()
    for event in events:
        turn.add(event)
    return turn


def expected_output(events: Iterable[Mapping[str, Any]]) -> list[Block]:
    """The output SPEC §5 selects for a turn's complete event list."""
    return reference_turn(events).output()


def expected_usage(events: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """The usage SPEC §4 reports for a turn's complete event list."""
    return reference_turn(events).usage()
