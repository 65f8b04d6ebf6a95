"""The provider-safe transcript (SPEC §12): a run's log as a provider request's ``messages``.

This is the only code that builds provider messages. It is pure (no I/O, no clock): it takes
the logged events of a run's history in ``seq`` order and answers ``{format, messages,
omitted, inserted?}`` for the Anthropic Messages API or OpenAI Chat Completions.

The conversion happens in two passes:

1. **Neutral pass** (:class:`_History`): events become a sequence of assistant messages, each
   followed by its *answer side* (tool answers, then user content). A tool call is *pending*
   from its assistant message until answered; the next kept assistant message, or the end of
   the history, answers every call still pending with an "interrupted" result. A result whose
   call is not pending is left out. Which blocks a format keeps is decided here, per block, by
   the format's block converter, so every dropped block is listed in ``omitted``.
2. **Assembly** (:func:`_anthropic_messages`, :func:`_openai_messages`): the neutral sequence
   in the format's shape. Within an answer side tool answers come before user content, since
   both formats need a call's answer right after the call.

Deliberate choices (the providers' documentation does not settle them; see docs/TRANSCRIPT.md):

* A user message logged between a tool call and its result is placed after the result.
* A result for a call already answered (a late result after an "interrupted" one, or a
  duplicate) is left out with ``already_answered``; a second call with an id already used is
  left out with ``duplicate_tool_call`` (providers refuse repeated ids).
* A tool answer with no visible content gets a fixed text (listed in ``inserted``), because
  neither format allows an empty text and the call still needs its answer.
* OpenAI has no error flag on tool messages: an errored result's content is sent unchanged.
* A tool call id a provider would refuse (Anthropic takes ``^[a-zA-Z0-9_-]{1,64}$``; the
  strictest rule is applied to both formats, so a history can be sent to either) is replaced by
  :func:`safe_call_id`, a digest of it: the same for the call and every result naming it, and the
  same on every request. Each replaced call is listed in ``inserted`` with its ``original`` id.
* A tool call with an empty name is left out with ``unnamed_tool_call``, and so are its results
  (no provider takes a call to a nameless tool).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import groupby
from typing import Any, Literal

from lastword.rules.fold import BOOKKEEPING_BLOCK_TYPES, TurnFold, is_visible_text

Format = Literal["anthropic", "openai"]
TRANSCRIPT_FORMATS: tuple[Format, ...] = ("anthropic", "openai")
Block = dict[str, Any]

#: The events a transcript is made of (SPEC §12): a fork inherits these of its parent's log,
#: and ``/messages`` reads only these; lifecycle, step and extension events add nothing.
HISTORY_TYPES = ("assistant/chunk", "assistant/message", "tool/result", "user/message")

#: The text of the result given to a tool call that the log never answered.
INTERRUPTED_TEXT = "The tool call was interrupted before it returned a result."
#: The text of a tool answer that had no visible content.
EMPTY_RESULT_TEXT = "(the tool returned no content)"
#: The user message put first when an Anthropic history would start with the assistant.
LEADING_USER_TEXT = "(the conversation continues from here)"

#: A tool call id both providers take (Anthropic's rule, the stricter); others are replaced.
SAFE_CALL_ID = re.compile("[a-zA-Z0-9_-]{1,64}")
#: The start of a replaced id (then 32 hex digits of the original's SHA-256).
SAFE_CALL_ID_PREFIX = "lw_"

#: Anthropic's own request block types, sent as they were logged ("provider blocks kept as
#: sent"); any other unknown type (``file``, an OpenAI ``refusal``, …) would be refused there.
ANTHROPIC_BLOCK_TYPES = frozenset({
    "image", "document", "search_result", "redacted_thinking", "server_tool_use",
    "web_search_tool_result", "web_fetch_tool_result", "code_execution_tool_result",
    "bash_code_execution_tool_result", "text_editor_code_execution_tool_result",
    "tool_search_tool_result", "container_upload",
})
#: What an Anthropic tool result's content may hold besides text.
ANTHROPIC_RESULT_BLOCK_TYPES = frozenset({"image", "document", "search_result"})

#: Reasons a block is left out that lose something a model saw (the rest is noise).
SUBSTANTIVE_LOSS = frozenset({
    "unsigned_reasoning", "reasoning", "unsupported_block", "duplicate_tool_call", "misplaced_block",
    "blank_refusal", "unnamed_tool_call",
})


@dataclass(frozen=True, slots=True)
class HistoryEvent:
    """One event of a history: the run whose log holds it (a fork's parent, for inherited
    events), its ``seq`` and turn there, and the event as ingested."""

    run_id: str
    seq: int
    turn: int
    event: Mapping[str, Any]


@dataclass(slots=True)
class Transcript:
    format: Format
    messages: list[dict[str, Any]]
    omitted: list[dict[str, Any]]
    inserted: list[dict[str, Any]]

    def as_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"format": self.format, "messages": self.messages, "omitted": self.omitted}
        if self.inserted:
            body["inserted"] = self.inserted
        return body


# -- the neutral history -------------------------------------------------------------------------


@dataclass(slots=True)
class _Answer:
    call_id: str
    content: Any  # the format's converted content: a str, or a list of blocks (Anthropic)
    is_error: bool
    repair: str | None = None  # why the service made or filled it (listed in ``inserted``)


@dataclass(slots=True)
class _Assistant:
    blocks: list[Block]  # the format's converted blocks


@dataclass(slots=True)
class _Side:
    """What answers one assistant message: tool answers, then user content."""

    answers: list[_Answer] = field(default_factory=list)
    users: list[list[Block]] = field(default_factory=list)  # one item per user message

    def __bool__(self) -> bool:
        return bool(self.answers or self.users)


#: A block converter: the format's block, or the reason it is left out (a string).
Converter = Callable[[Mapping[str, Any]], Block | str]


def safe_call_id(call_id: str) -> str:
    """``call_id`` when both providers take it, else a fixed replacement made from it: the same
    for the same id on every request, and itself a safe id."""
    if SAFE_CALL_ID.fullmatch(call_id):
        return call_id
    return SAFE_CALL_ID_PREFIX + hashlib.sha256(call_id.encode()).hexdigest()[:32]


def _text_or_reason(block: Mapping[str, Any]) -> Block | str:
    text = block.get("text")
    if is_visible_text(text):
        return {"type": "text", "text": text}
    return "blank_text"


def _anthropic_assistant_block(block: Mapping[str, Any]) -> Block | str:
    kind = block.get("type")
    if kind == "text":
        return _text_or_reason(block)
    if kind in BOOKKEEPING_BLOCK_TYPES:
        return "bookkeeping"
    if kind == "reasoning":
        signature = block.get("signature")
        if not isinstance(signature, str) or not signature:
            return "unsigned_reasoning"
        return {"type": "thinking", "thinking": block["text"], "signature": signature}
    if kind == "tool_call":
        return {"type": "tool_use", "id": block["id"], "name": block["name"], "input": block["input"]}
    if kind == "tool_result":
        return "misplaced_tool_result"  # results answer calls; never an assistant's block
    return _anthropic_as_sent(block, ANTHROPIC_BLOCK_TYPES)


def _anthropic_as_sent(block: Mapping[str, Any], allowed: frozenset[str]) -> Block | str:
    if block.get("type") in allowed:
        return dict(block)  # redacted_thinking, server tool blocks, images: as sent
    return "unsupported_block"


def _anthropic_user_block(block: Mapping[str, Any]) -> Block | str:
    # A user message's tool_result blocks never get here: they are answers (_History.user_message).
    kind = block.get("type")
    if kind == "text":
        return _text_or_reason(block)
    if kind in BOOKKEEPING_BLOCK_TYPES:
        return "bookkeeping"
    if kind in ("reasoning", "tool_call"):
        return "misplaced_block"
    return _anthropic_as_sent(block, ANTHROPIC_BLOCK_TYPES)


def _anthropic_result_part(block: Mapping[str, Any]) -> Block | str:
    kind = block.get("type")
    if kind == "text":
        return _text_or_reason(block)
    if kind in BOOKKEEPING_BLOCK_TYPES:
        return "bookkeeping"
    if kind in ("reasoning", "tool_call", "tool_result"):
        return "misplaced_block"
    return _anthropic_as_sent(block, ANTHROPIC_RESULT_BLOCK_TYPES)


def _openai_assistant_block(block: Mapping[str, Any]) -> Block | str:
    kind = block.get("type")
    if kind == "text":
        return _text_or_reason(block)
    if kind in BOOKKEEPING_BLOCK_TYPES:
        return "bookkeeping"
    if kind == "reasoning":
        return "reasoning"
    if kind == "tool_call":
        return {"type": "tool_use", "id": block["id"], "name": block["name"], "input": block["input"]}
    if kind == "tool_result":
        return "misplaced_tool_result"  # results answer calls; never an assistant's block
    if kind == "refusal":
        if is_visible_text(block.get("text")):
            return {"type": "refusal", "text": block["text"]}  # the message's ``refusal``
        return "blank_refusal"
    return "unsupported_block"


def _openai_user_block(block: Mapping[str, Any]) -> Block | str:
    kind = block.get("type")
    if kind == "text":
        return _text_or_reason(block)
    if kind in BOOKKEEPING_BLOCK_TYPES:
        return "bookkeeping"
    if kind in ("reasoning", "tool_call", "tool_result"):
        return "misplaced_block"
    return "unsupported_block"


@dataclass(frozen=True, slots=True)
class _Rules:
    assistant_block: Converter
    user_block: Converter
    result_part: Converter
    #: Converted result blocks → the answer's content (``None`` when nothing is left).
    result_content: Callable[[list[Block]], Any]


def _anthropic_result_content(blocks: list[Block]) -> Any:
    return blocks or None


def _openai_result_content(blocks: list[Block]) -> Any:
    return "\n\n".join(block["text"] for block in blocks) or None


RULES: dict[Format, _Rules] = {
    "anthropic": _Rules(
        _anthropic_assistant_block, _anthropic_user_block, _anthropic_result_part, _anthropic_result_content
    ),
    "openai": _Rules(_openai_assistant_block, _openai_user_block, _openai_user_block, _openai_result_content),
}


class _History:
    """The neutral pass: events in ``seq`` order in, assistant messages and their sides out."""

    def __init__(self, rules: _Rules) -> None:
        self.rules = rules
        self.lead = _Side()  # user content before the first assistant message
        self.turns: list[tuple[_Assistant, _Side]] = []
        self.omitted: list[dict[str, Any]] = []
        self.pending: dict[str, None] = {}  # calls of the last assistant message not yet answered
        self.calls_seen: set[str] = set()
        self.unnamed: set[str] = set()  # (safe) ids of calls left out for their empty name
        self.replaced: dict[str, str] = {}  # safe id → the logged id it replaces

    @property
    def side(self) -> _Side:
        return self.turns[-1][1] if self.turns else self.lead

    def omit(self, item: HistoryEvent, reason: str, block: int | None = None, **extra: Any) -> None:
        entry: dict[str, Any] = {"runId": item.run_id, "seq": item.seq}
        if block is not None:
            entry["block"] = block
        entry["reason"] = reason
        entry.update(extra)
        self.omitted.append(entry)

    def close_pending(self) -> None:
        """Answer every call still pending: the step was cut off before its results."""
        for call_id in self.pending:
            self.side.answers.append(_Answer(call_id, None, True, "interrupted_tool_call"))
        self.pending.clear()

    def add_assistant(self, blocks: list[Block]) -> None:
        self.close_pending()
        calls = [block["id"] for block in blocks if block.get("type") == "tool_use"]
        self.turns.append((_Assistant(blocks), _Side()))
        self.pending = dict.fromkeys(calls)
        self.calls_seen.update(calls)

    # -- events ----------------------------------------------------------------------------

    def assistant_message(self, item: HistoryEvent) -> None:
        content = item.event["message"]["content"]  # validated at ingest: a list of blocks
        kept: list[Block] = []
        ids_here: set[str] = set()
        for index, block in enumerate(content):
            converted = self.rules.assistant_block(block)
            if not isinstance(converted, str) and converted["type"] == "tool_use":
                converted = self.tool_call(converted, ids_here)
            if isinstance(converted, str):
                self.omit(item, converted, index)
            else:
                kept.append(converted)
        if not kept:
            self.omit(item, "nothing_kept" if content else "empty")
            return
        self.add_assistant(kept)

    def tool_call(self, call: Block, ids_here: set[str]) -> Block | str:
        """A converted call with a safe id, or why it is left out; ``ids_here`` are the ids of
        the calls kept so far in its message."""
        call_id = safe_call_id(call["id"])
        if not call["name"]:
            self.unnamed.add(call_id)
            return "unnamed_tool_call"
        if call_id in self.calls_seen or call_id in ids_here:
            return "duplicate_tool_call"
        ids_here.add(call_id)
        if call_id != call["id"]:
            self.replaced[call_id] = call["id"]
        return {**call, "id": call_id}

    def tool_answer(
        self, item: HistoryEvent, call_id: Any, content: Any, is_error: Any, block: int | None = None
    ) -> None:
        call_id = safe_call_id(call_id)  # validated at ingest: a string; now the id its call was given
        if call_id not in self.calls_seen:
            self.omit(item, "unnamed_tool_call" if call_id in self.unnamed else "unknown_tool_call", block)
            return
        if call_id not in self.pending:
            self.omit(item, "already_answered", block)
            return
        del self.pending[call_id]
        converted_content: Any
        if isinstance(content, str):
            # A string answer stays a string: both formats take one as a result's content.
            converted_content = content if is_visible_text(content) else None
        else:  # blocks (validated at ingest: a string or a list)
            parts: list[Block] = []
            for index, part in enumerate(content):
                converted = self.rules.result_part(part)
                if not isinstance(converted, str):
                    parts.append(converted)
                elif block is None:
                    self.omit(item, converted, index)
                else:  # a result block inside a user message names its part within that block
                    self.omit(item, converted, block, part=index)
            converted_content = self.rules.result_content(parts)
        answer = _Answer(call_id, converted_content, is_error is True)
        if converted_content is None:
            answer.repair = "empty_tool_result"
        self.side.answers.append(answer)

    def user_message(self, item: HistoryEvent) -> None:
        content = item.event["message"]["content"]  # validated at ingest: a string or a list of blocks
        if isinstance(content, str):
            if is_visible_text(content):
                self.side.users.append([{"type": "text", "text": content}])
            else:
                self.omit(item, "blank_text" if content else "empty")
            return
        blocks: list[Block] = content
        kept: list[Block] = []
        answers = [block for block in blocks if block.get("type") == "tool_result"]
        for index, block in enumerate(blocks):
            if block.get("type") == "tool_result":
                # A provider-style user message carrying results answers the calls it names.
                self.tool_answer(item, block.get("toolCallId"), block.get("content"), block.get("isError"), index)
                continue
            converted = self.rules.user_block(block)
            if isinstance(converted, str):
                self.omit(item, converted, index)
            else:
                kept.append(converted)
        if kept:
            self.side.users.append(kept)
        elif not answers:
            self.omit(item, "nothing_kept" if blocks else "empty")

    def streamed_text(self, text: str) -> None:
        """A turn whose output is its streamed text contributes it as an assistant message."""
        self.add_assistant([{"type": "text", "text": text}])


def _neutral(items: Iterable[HistoryEvent], rules: _Rules) -> _History:
    history = _History(rules)
    # A turn is told apart by run and number: a fork's inherited turns and its own differ.
    for _, turn in groupby(items, key=lambda item: (item.run_id, item.turn)):
        fold = TurnFold()  # asked, at the turn's end, whether its output is its streamed text
        for item in turn:
            fold.push(item.event)
            event = item.event
            kind = event.get("type")
            if kind == "assistant/message":
                history.assistant_message(item)
            elif kind == "tool/result":
                history.tool_answer(item, event.get("toolCallId"), event.get("content"), event.get("isError"))
            elif kind == "user/message":
                history.user_message(item)
        text = fold.streamed_text()
        if text is not None:
            history.streamed_text(text)
    history.close_pending()
    return history


# -- assembly per format ---------------------------------------------------------------------


def _replaced_ids(history: _History, blocks: list[Block], index: int) -> list[dict[str, Any]]:
    """``inserted`` entries of the calls among ``blocks`` (in message ``index``) whose id was replaced."""
    return [
        {"index": index, "reason": "unsafe_tool_call_id", "toolCallId": block["id"],
         "original": history.replaced[block["id"]]}
        for block in blocks if block["type"] == "tool_use" and block["id"] in history.replaced
    ]


def _anthropic_messages(history: _History) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    messages: list[dict[str, Any]] = []
    inserted: list[dict[str, Any]] = []

    def add(role: str, blocks: list[Block]) -> None:
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"].extend(blocks)  # adjacent same-role messages are merged
        else:
            messages.append({"role": role, "content": list(blocks)})

    def add_side(side: _Side) -> None:
        if not side:
            return
        blocks: list[Block] = []
        for answer in side.answers:
            content = answer.content
            if answer.repair is not None:
                content = INTERRUPTED_TEXT if answer.repair == "interrupted_tool_call" else EMPTY_RESULT_TEXT
                inserted.append({"index": len(messages), "reason": answer.repair, "toolCallId": answer.call_id})
            block: Block = {"type": "tool_result", "tool_use_id": answer.call_id, "content": content}
            if answer.is_error:  # interrupted answers are errors too
                block["is_error"] = True
            blocks.append(block)
        for user in side.users:
            blocks.extend(user)
        add("user", blocks)

    add_side(history.lead)
    for assistant, side in history.turns:
        add("assistant", assistant.blocks)
        inserted.extend(_replaced_ids(history, assistant.blocks, len(messages) - 1))
        add_side(side)
    if messages and messages[0]["role"] == "assistant":
        messages.insert(0, {"role": "user", "content": [{"type": "text", "text": LEADING_USER_TEXT}]})
        for entry in inserted:
            entry["index"] += 1
        inserted.insert(0, {"index": 0, "reason": "leading_assistant"})
    return messages, inserted


def _arguments(value: Any) -> str:
    # Compact, non-ASCII kept: the form the provider's own tool calls arrive in.
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _openai_messages(history: _History) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    messages: list[dict[str, Any]] = []
    inserted: list[dict[str, Any]] = []

    def add_side(side: _Side) -> None:
        for answer in side.answers:
            content = answer.content
            if answer.repair is not None:
                content = INTERRUPTED_TEXT if answer.repair == "interrupted_tool_call" else EMPTY_RESULT_TEXT
                inserted.append({"index": len(messages), "reason": answer.repair, "toolCallId": answer.call_id})
            messages.append({"role": "tool", "tool_call_id": answer.call_id, "content": content})
        for user in side.users:
            messages.append({"role": "user", "content": "\n\n".join(block["text"] for block in user)})

    add_side(history.lead)
    for assistant, side in history.turns:
        texts = [block["text"] for block in assistant.blocks if block["type"] == "text"]
        message: dict[str, Any] = {"role": "assistant", "content": "\n\n".join(texts) if texts else None}
        refusals = [block["text"] for block in assistant.blocks if block["type"] == "refusal"]
        if refusals:
            message["refusal"] = "\n\n".join(refusals)
        calls = [
            {"id": block["id"], "type": "function",
             "function": {"name": block["name"], "arguments": _arguments(block["input"])}}
            for block in assistant.blocks if block["type"] == "tool_use"
        ]
        if calls:
            message["tool_calls"] = calls
        inserted.extend(_replaced_ids(history, assistant.blocks, len(messages)))
        messages.append(message)
        add_side(side)
    return messages, inserted


ASSEMBLERS = {"anthropic": _anthropic_messages, "openai": _openai_messages}


def transcript(items: Iterable[HistoryEvent], format: Format) -> Transcript:
    """The provider-safe transcript of a history (events in ``seq`` order, read once, as they come) in ``format``."""
    history = _neutral(items, RULES[format])
    messages, inserted = ASSEMBLERS[format](history)
    return Transcript(format, messages, history.omitted, inserted)
