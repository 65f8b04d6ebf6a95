"""The selection rule (SPEC §5): the one place that decides a subagent turn's output.

Everything else in lastword (the store, the API, the streams, the tool-result formatter)
asks this module; none of them looks for "the last assistant message" itself.

The module is pure: no I/O, no clock. It works on events as plain dicts, exactly as they were
ingested and stored, so a fold rebuilt from the log sees what the live fold saw.

Two entry points apply the same rule:

* :class:`TurnFold` is incremental. ``push(event)``, ``push_many(events)`` and
  ``push_text(text)`` are O(1) amortised in the size of the event: text deltas are kept in a
  list and joined once, in ``collect()`` (``s += delta`` would copy the whole string on every
  delta once it has another reference, which is quadratic on long outputs).
* :func:`final_assistant_output` applies the rule to a complete list of events.

Both take ``join_continuations`` (SPEC §14, opt-in per run): a reply split by the output-token
ceiling into several ``max_tokens`` messages is answered as one, joined in order. Without it
the rule is exactly §5's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeGuard

from lastword.rules.limits import MAX_USAGE_TOTAL
from lastword.rules.stop_reasons import normalise_stop_reason

Block = dict[str, Any]
Event = Mapping[str, Any]

#: Blocks that record how a step went but are never part of an output.
BOOKKEEPING_BLOCK_TYPES = frozenset({"step-start", "step-finish", "patch"})

#: Events that stop a joined continuation: what the model saw between two segments.
JOIN_STOPPING_TYPES = frozenset({"tool/result", "user/message"})

USAGE_FIELDS = ("inputTokens", "outputTokens", "cacheReadTokens", "cacheWriteTokens")


def is_visible_text(text: Any) -> TypeGuard[str]:
    """Whether a text is visible (SPEC §3): a string holding more than white space.

    The one test of blank text: the selection rule, the provider-safe transcript and the
    parent's tool result all ask it.
    """
    return isinstance(text, str) and text != "" and not text.isspace()


def is_substantive(block: Mapping[str, Any]) -> bool:
    """Whether a block counts towards selecting a message (SPEC §3)."""
    kind = block.get("type")
    if kind == "text":
        return is_visible_text(block.get("text"))
    if kind == "tool_result" or kind in BOOKKEEPING_BLOCK_TYPES:
        return False
    return True


def output_blocks(content: Iterable[Block]) -> list[Block]:
    """The blocks of a selected message that make up the output, order kept.

    Tool results, bookkeeping blocks and blank text blocks are left out; every other block is
    returned as the same object it was sent as (the service never rewrites a block).
    """
    return [block for block in content if is_substantive(block)]


def ended_at_max_tokens(message: Mapping[str, Any]) -> bool:
    """Whether an assistant message's own ``stopReason`` is the output-token ceiling (any alias)."""
    value = message.get("stopReason")
    if not isinstance(value, str):
        return False
    try:
        return normalise_stop_reason(value) == "max_tokens"
    except ValueError:
        return False


def empty_usage() -> dict[str, int]:
    return {"inputTokens": 0, "outputTokens": 0, "cacheReadTokens": 0, "cacheWriteTokens": 0}


def add_usage(total: dict[str, int], usage: Mapping[str, Any] | None) -> None:
    """Add one message's usage into a running total (missing fields count as zero)."""
    if not usage:
        return
    for name in USAGE_FIELDS:
        value = usage.get(name)
        if value:
            # Saturates rather than fails: a turn must always be able to end.
            total[name] = min(total[name] + int(value), MAX_USAGE_TOTAL)


class TurnFold:
    """The incremental state of one turn, from which its output is selected.

    ``last_seq`` is the sequence number of the last event pushed; the store uses it to
    catch a fold up with events another replica has written.
    """

    __slots__ = (
        "_selected",
        "_text_parts",
        "_has_visible_text",
        "_message_usage",
        "_seen_message",
        "_end_usage",
        "_join",
        "_segments",
        "last_seq",
    )

    def __init__(self, last_seq: int = 0, *, join_continuations: bool = False) -> None:
        self._selected: list[Block] | None = None
        self._join = join_continuations
        #: With ``join_continuations``: the output blocks of the max-tokens segments that the
        #: next substantive message continues (only ever extended, or replaced by a new list).
        self._segments: list[Block] = []
        self._text_parts: list[str] = []
        self._has_visible_text = False
        self._message_usage = empty_usage()
        self._seen_message = False
        self._end_usage = empty_usage()
        self.last_seq = last_seq

    @property
    def usage(self) -> dict[str, int]:
        """The turn's usage: the sum over its assistant messages, empty ones included.

        A ``turn/end`` event's own ``usage`` counts only for a turn without any assistant
        message (chunk-only transports), so that a producer repeating its total there is
        not counted twice.
        """
        return dict(self._message_usage if self._seen_message else self._end_usage)

    def push(self, event: Event, seq: int | None = None) -> None:
        """Fold one ingested event of this turn."""
        self.push_many((event,), seq)

    def push_many(self, events: Iterable[Event], last_seq: int | None = None) -> None:
        """Fold ingested events of this turn, in order; ``last_seq`` is the last one's seq.

        The same as pushing each in turn (a property test holds it to that), at a fraction of
        the cost for a batch: the text of its text deltas, most of a streamed turn, is gathered
        here and added once (:meth:`push_texts`), not by a call or two per delta. Only the order
        of the texts among themselves matters: the streamed text is state of its own, which no
        other event reads or changes (a substantive message wins over it whenever it came).
        """
        texts: list[str] = []
        gather = texts.append
        for event in events:
            kind = event.get("type")
            if kind == "assistant/chunk":
                delta = event.get("delta") or {}
                if delta.get("type") == "text":
                    gather(delta.get("text", ""))
            else:
                self._fold_event(kind, event)
        if texts:
            self.push_texts(texts)
        if last_seq is not None:
            self.last_seq = last_seq

    def _fold_event(self, kind: Any, event: Event) -> None:
        """Fold an event other than a chunk (of type ``kind``)."""
        if kind == "assistant/message":
            message = event.get("message") or {}
            self._seen_message = True
            add_usage(self._message_usage, message.get("usage"))
            content = message.get("content") or []
            # Only the latest substantive message matters; a usage-only or blank message
            # must not hide it (SPEC §1).
            if any(is_substantive(block) for block in content):
                if self._join:
                    self._select_joined(message, content)
                else:
                    self._selected = content
        elif kind == "turn/end":
            add_usage(self._end_usage, event.get("usage"))
        elif self._join and kind in JOIN_STOPPING_TYPES:
            self._segments = []

    def _select_joined(self, message: Mapping[str, Any], content: list[Block]) -> None:
        """Select a substantive message, continuing the max-tokens segments before it (§14).

        A message holding a tool call is selected alone and ends the chain; one that ended at
        max-tokens joins the chain for the message that continues it.
        """
        blocks = output_blocks(content)
        if any(block.get("type") == "tool_call" for block in blocks):
            self._selected, self._segments = blocks, []
        elif ended_at_max_tokens(message):
            self._segments.extend(blocks)
            self._selected = self._segments
        else:
            self._selected, self._segments = self._segments + blocks, []

    def push_text(self, text: str) -> None:
        """Fold a bare text delta (chunk-only transports)."""
        self.push_texts((text,))

    def push_texts(self, texts: Sequence[str]) -> None:
        """Fold bare text deltas, in order (empty ones add nothing)."""
        kept = list(filter(None, texts))
        self._text_parts += kept
        if not self._has_visible_text:
            self._has_visible_text = any(map(is_visible_text, kept))

    def collect(self) -> list[Block]:
        """The turn's output by the rule of SPEC §5 (a new list on every call)."""
        if self._selected is not None:
            return output_blocks(self._selected)
        text = self.streamed_text()
        return [] if text is None else [{"type": "text", "text": text}]

    def streamed_text(self) -> str | None:
        """The whole streamed text when the output comes from it (rule 2), else ``None``.

        The transcript (SPEC §12) asks this to know whether a turn contributes an assistant
        message made of its chunks.
        """
        if self._selected is not None or not self._has_visible_text:
            return None
        if len(self._text_parts) > 1:
            # Join once and keep the result, so repeated reads stay cheap.
            self._text_parts = ["".join(self._text_parts)]
        return self._text_parts[0]


def final_assistant_output(events: Iterable[Event], *, join_continuations: bool = False) -> list[Block]:
    """Apply the selection rule to a turn's complete event list, in ``seq`` order."""
    fold = TurnFold(join_continuations=join_continuations)
    fold.push_many(events)
    return fold.collect()


def assistant_texts(events: Iterable[Event]) -> list[str]:
    """Every visible text the assistant wrote in a turn, in ``seq`` order (SPEC §19, ``texts``):
    each text block of each assistant message, and text streamed that no message told (before
    a message without text, such as §1's usage-only record, or after the last one: a step cut
    before its message was logged; for a chunk-only turn, all of its text).

    Not an output and never used as one: the output is :meth:`TurnFold.collect`'s. This is for
    a parent whose child's selected message only points back at an earlier one. Text streamed
    before a message with text is that message's own, told once, by the message.
    """
    texts: list[str] = []
    streamed: list[str] = []

    def untold() -> None:
        text = "".join(streamed)
        streamed.clear()
        if is_visible_text(text):
            texts.append(text)

    for event in events:
        kind = event.get("type")
        if kind == "assistant/message":
            told = [block["text"] for block in event["message"]["content"]
                    if block.get("type") == "text" and is_visible_text(block.get("text"))]
            if told:
                streamed.clear()
                texts.extend(told)
            else:
                untold()
        elif kind == "assistant/chunk" and event["delta"].get("type") == "text":
            streamed.append(event["delta"]["text"])
    untold()
    return texts
