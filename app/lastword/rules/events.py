"""The shapes of ingested events and content blocks (SPEC §3–§4), and their validation.

Validation only checks: what is stored is the event exactly as it was sent (every field kept,
in the order sent), never a re-serialised model. Models are strict, so a string where a number
belongs is refused rather than coerced.

The pydantic models are the rule and say why an event is refused. A batch is first offered to
a narrower description of the common events in msgspec (:func:`fast_accepts`), which checks a
batch of 1,000 small events in a quarter of the time; an event it does not accept (one it does
not describe, a refused one) goes through the models as before (:func:`left_to_models`), so a
refusal is always theirs, word for word. A property test holds the narrow description to accepting only
what the models accept.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    TypeAdapter,
    ValidationError,
    field_validator,
)

from lastword.errors import InvalidEvent
from lastword.rules.limits import MAX_EVENT_ID_LENGTH, MAX_TOKEN_COUNT
from lastword.rules.stop_reasons import ACCEPTED_INPUTS, ACCEPTED_PATTERN, normalise_stop_reason


class _Open(BaseModel):
    """Extra fields are allowed and kept: blocks and events keep what they were sent with."""

    # Each field's docstring is its description in the OpenAPI document.
    model_config = ConfigDict(extra="allow", strict=True, use_attribute_docstrings=True)


def _whole_number(value: Any) -> Any:
    """``2.0`` is the JSON number 2 (a JSON Schema ``integer``); only the check sees it as ``2``."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


TokenCount = Annotated[int, Field(ge=0, le=MAX_TOKEN_COUNT), BeforeValidator(_whole_number)]


class Usage(BaseModel):
    """Tokens one model call used; a turn's usage is the sum over its messages."""

    model_config = ConfigDict(extra="allow", strict=True, use_attribute_docstrings=True)

    inputTokens: TokenCount
    """Input tokens not read from a cache."""
    outputTokens: TokenCount
    """Tokens the model produced."""
    cacheReadTokens: TokenCount | None = None
    """Input tokens read from a prompt cache."""
    cacheWriteTokens: TokenCount | None = None
    """Input tokens written to a prompt cache."""


class TextBlock(_Open):
    """Text; substantive unless empty or white space only."""

    type: Literal["text"]
    """Always ``text``."""
    text: str
    """The text."""


class ReasoningBlock(_Open):
    """The model's reasoning; substantive even with empty text."""

    type: Literal["reasoning"]
    """Always ``reasoning``."""
    text: str
    """The reasoning text (may be empty when only a signature was kept)."""
    signature: str | None = None
    """The provider's signature of the reasoning, when it gave one."""


class ToolCallBlock(_Open):
    """A call of a tool by the model; substantive."""

    type: Literal["tool_call"]
    """Always ``tool_call``."""
    id: str
    """The call's id, which its result names."""
    name: str
    """The tool's name."""
    input: dict[str, Any]
    """The call's arguments."""


class ToolResultBlock(_Open):
    """A tool's answer inside a message; never part of an output."""

    type: Literal["tool_result"]
    """Always ``tool_result``."""
    toolCallId: str
    """The id of the call this answers."""
    content: str | list[Block]
    """The tool's answer: text or blocks."""
    isError: bool | None = None
    """Whether the tool failed."""


class OtherBlock(_Open):
    """Bookkeeping (`step-start`, `step-finish`, `patch`) and any other block type."""

    type: str
    """The block's type; every other field is kept as sent."""


def _block_tag(value: Any) -> str | None:
    if isinstance(value, dict):
        kind = value.get("type")
    else:
        kind = getattr(value, "type", None)
    if not isinstance(kind, str):
        return None
    return kind if kind in _KNOWN_BLOCKS else "other"


_KNOWN_BLOCKS = {"text", "reasoning", "tool_call", "tool_result"}

Block = Annotated[
    Annotated[TextBlock, Tag("text")]
    | Annotated[ReasoningBlock, Tag("reasoning")]
    | Annotated[ToolCallBlock, Tag("tool_call")]
    | Annotated[ToolResultBlock, Tag("tool_result")]
    | Annotated[OtherBlock, Tag("other")],
    Discriminator(
        _block_tag,
        custom_error_type="invalid_block",
        custom_error_message="a content block needs a string 'type'",
    ),
]


# RFC 3339 ``date-time``; ``datetime.fromisoformat`` alone also takes ISO 8601 forms that are
# not RFC 3339 (a bare date, no offset, week dates, the basic format).
_RFC3339 = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt ]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.[0-9]+)?"
    r"(?:[Zz]|[+-]([0-9]{2}):([0-9]{2}))"
)


def _check_rfc3339(value: str | None) -> str | None:
    if value is None:
        return value
    match = _RFC3339.fullmatch(value)
    try:
        if match is None:
            raise ValueError
        year, month, day, hour, minute, second = (int(part) for part in match.groups()[:6])
        datetime(year, month, day, hour, minute, min(second, 59))  # 60 is a leap second
        if second > 60 or int(match[7] or 0) > 23 or int(match[8] or 0) > 59:
            raise ValueError
    except ValueError:
        raise ValueError("ts must be an RFC 3339 timestamp") from None
    return value


#: The timestamps :func:`_check_rfc3339` accepts but 29 February (a leap year is the models'
#: to find: one day in 1461), for the fast checks below. Not msgspec's ``datetime``: it also
#: takes an offset without its colon (``+0100``) and a ``datetime`` object, which the models
#: refuse. ``\Z``, as ``$`` would let a trailing newline through.
_FAST_TS = re.compile(
    r"\A(?!0000)[0-9]{4}-"
    r"(?:(?:0[1-9]|1[0-2])-(?:0[1-9]|1[0-9]|2[0-8])|(?:0[13-9]|1[0-2])-(?:29|30)|(?:0[13578]|1[02])-31)"
    r"[Tt ](?:[01][0-9]|2[0-3]):[0-5][0-9]:(?:[0-5][0-9]|60)(?:\.[0-9]+)?"
    r"(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])\Z"
)


class _EventBase(_Open):
    eventId: Annotated[str, Field(min_length=1, max_length=MAX_EVENT_ID_LENGTH)] | None = None
    """The producer's idempotency key, unique within the run: a repeat with the same content
    is counted as a duplicate and stored once."""
    ts: Annotated[str, Field(json_schema_extra={"format": "date-time"})] | None = None
    """When the producer made the event (RFC 3339); kept, not interpreted."""

    _ts = field_validator("ts")(_check_rfc3339)


class TextDelta(_Open):
    """Streamed text; the turn's text deltas, joined, are the output when no message qualifies."""

    type: Literal["text"]
    """Always ``text``."""
    text: str
    """The piece of text."""


class ReasoningDelta(_Open):
    """Streamed reasoning; logged, not accumulated."""

    type: Literal["reasoning"]
    """Always ``reasoning``."""
    text: str
    """The piece of reasoning."""


class ToolCallDelta(_Open):
    """A streamed piece of a tool call; logged, not accumulated."""

    type: Literal["tool_call"]
    """Always ``tool_call``; the other fields are kept as sent."""


Delta = Annotated[TextDelta | ReasoningDelta | ToolCallDelta, Field(discriminator="type")]


class AssistantChunk(_EventBase):
    """A streamed delta of the assistant's answer."""

    type: Literal["assistant/chunk"]
    """Always ``assistant/chunk``."""
    delta: Delta
    """The delta: text, reasoning or a piece of a tool call."""


class AssistantMessageBody(_Open):
    """A complete assistant message."""

    id: str | None = None
    """The provider's message id."""
    content: list[Block]
    """The message's blocks; may be empty (a usage-only record)."""
    usage: Usage | None = None
    """What this model call used."""
    stopReason: str | None = None
    """The provider's own stop reason for this call (logged as sent, not normalised)."""
    error: Any = None
    """The call's error, if it failed."""


class AssistantMessage(_EventBase):
    """A complete assistant message at the end of a step: the candidates of the selection rule."""

    type: Literal["assistant/message"]
    """Always ``assistant/message``."""
    message: AssistantMessageBody
    """The message."""


class ToolResultEvent(_EventBase):
    """A tool's answer; logged, never output."""

    type: Literal["tool/result"]
    """Always ``tool/result``."""
    toolCallId: str
    """The id of the call this answers."""
    content: str | list[Block]
    """The tool's answer: text or blocks."""
    isError: bool | None = None
    """Whether the tool failed."""


class UserMessageBody(_Open):
    """A user (or parent) message."""

    content: str | list[Block]
    """Its text, or blocks."""


class UserMessage(_EventBase):
    """A message to the child; logged, never output."""

    type: Literal["user/message"]
    """Always ``user/message``."""
    message: UserMessageBody
    """The message."""


class StepEvent(_EventBase):
    """Bookkeeping: a step of the agent loop starts or finishes; logged."""

    type: Literal["step/start", "step/finish"]
    """``step/start`` or ``step/finish``."""


class TurnEnd(_EventBase):
    """Ends the current turn, as ``POST /v1/runs/{runId}/end`` does."""

    type: Literal["turn/end"]
    """Always ``turn/end``."""
    stopReason: Annotated[
        str, Field(json_schema_extra={"pattern": ACCEPTED_PATTERN, "examples": list(ACCEPTED_INPUTS)})
    ]
    """Why the turn ended: a wire value or an accepted alias, case-insensitive."""
    error: Any = None
    """What went wrong, for an ``error`` end."""
    usage: Usage | None = None
    """Usage not recorded by a message, added to the turn's."""

    @field_validator("stopReason")
    @classmethod
    def _known_stop_reason(cls, value: str) -> str:
        normalise_stop_reason(value)
        return value


class ExtensionEvent(_EventBase):
    """`x-…` events: logged, opaque, never interpreted."""

    type: Annotated[str, Field(pattern=r"^x-")]
    """Any type starting with ``x-``; every other field is kept as sent."""


_EVENT_MODELS: dict[str, str] = {
    "assistant/chunk": "assistant/chunk",
    "assistant/message": "assistant/message",
    "tool/result": "tool/result",
    "user/message": "user/message",
    "step/start": "step",
    "step/finish": "step",
    "turn/end": "turn/end",
}


def _event_tag(value: Any) -> str | None:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    if not isinstance(kind, str):
        return None
    if kind in _EVENT_MODELS:
        return _EVENT_MODELS[kind]
    return "x" if kind.startswith("x-") else None


IngestEvent = Annotated[
    Annotated[AssistantChunk, Tag("assistant/chunk")]
    | Annotated[AssistantMessage, Tag("assistant/message")]
    | Annotated[ToolResultEvent, Tag("tool/result")]
    | Annotated[UserMessage, Tag("user/message")]
    | Annotated[StepEvent, Tag("step")]
    | Annotated[TurnEnd, Tag("turn/end")]
    | Annotated[ExtensionEvent, Tag("x")],
    Discriminator(
        _event_tag,
        custom_error_type="unknown_event_type",
        custom_error_message=(
            "'type' must be one of assistant/chunk, assistant/message, tool/result, "
            "user/message, step/start, step/finish, turn/end, or start with 'x-'"
        ),
    ),
]

_EVENT = TypeAdapter(IngestEvent)
_EVENTS = TypeAdapter(list[IngestEvent])

EVENT_JSON_SCHEMA = _EVENT.json_schema(ref_template="#/components/schemas/{model}")


def _field_path(loc: tuple[int | str, ...]) -> str:
    """``message.content[0].text`` from pydantic's location, without its union tags."""
    parts: list[str] = []
    previous: int | str | None = None
    for position, item in enumerate(loc):
        is_union_tag = position == 0 or isinstance(previous, int) or previous == "delta"
        previous = item
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif is_union_tag and item in _UNION_TAGS:
            continue
        elif item == "str" or "[" in item:
            continue  # a branch of a plain union such as ``str | list[Block]``
        else:
            parts.append(f".{item}" if parts else item)
    return "".join(parts)


_UNION_TAGS = set(_EVENT_MODELS.values()) | {"x", "other"} | _KNOWN_BLOCKS


def _problems(error: ValidationError, index_offset: int, batched: bool) -> list[dict[str, Any]]:
    found = []
    for item in error.errors(include_url=False, include_input=False):
        loc = tuple(item["loc"])
        index = index_offset
        if batched and loc and isinstance(loc[0], int):
            index = index_offset + loc[0]
            loc = loc[1:]
        found.append({"index": index, "field": _field_path(loc) or "type", "message": item["msg"]})
    return found


def is_plain_text_delta(event: Any) -> bool:
    """Whether ``event`` is a text chunk with nothing to check beyond its shape (and a ``ts`` of
    :data:`_FAST_TS`).

    Most of a streamed session is text deltas, and running each through pydantic costs more
    than storing it. This accepts only a subset of what :data:`IngestEvent` accepts (a
    property test holds it to that); everything else goes through pydantic.
    """
    if type(event) is not dict or event.get("type") != "assistant/chunk":
        return False
    delta = event.get("delta")
    if type(delta) is not dict or delta.get("type") != "text" or type(delta.get("text")) is not str:
        return False
    for key, value in event.items():
        if key == "eventId":
            if value is not None and not (type(value) is str and 0 < len(value) <= MAX_EVENT_ID_LENGTH):
                return False
        elif key not in ("type", "delta"):
            # Extra fields get the full check, and so does a ts _FAST_TS does not take. (Tested
            # here, not first: the two keys every text chunk has then pay nothing for it.)
            if key != "ts" or (value is not None and not (type(value) is str and _FAST_TS.match(value))):
                return False
    return True


# -- the fast check: a subset of the models above, in msgspec -------------------------------------
#
# Each type below accepts a subset of what its model accepts: the same field names and types,
# strict (no bool for an int, no float for an int, where the models take a whole 2.0: that
# event goes to the models), unknown fields ignored as the models keep them unchecked. Left to
# the models: a ``ts`` :data:`_FAST_TS` does not match, ``turn/end`` (its stop reason), ``x-``
# events, tool results, user messages, steps, and blocks other than text, reasoning and tool
# calls.

_FastEventId = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_EVENT_ID_LENGTH)]
_FastTs = Annotated[str, msgspec.Meta(pattern=_FAST_TS.pattern)]
_FastTokens = Annotated[int, msgspec.Meta(ge=0, le=MAX_TOKEN_COUNT)]


class _FastTextDelta(msgspec.Struct, tag_field="type", tag="text", gc=False):
    text: str


class _FastReasoningDelta(msgspec.Struct, tag_field="type", tag="reasoning", gc=False):
    text: str


class _FastToolCallDelta(msgspec.Struct, tag_field="type", tag="tool_call", gc=False):
    pass


class _FastTextBlock(msgspec.Struct, tag_field="type", tag="text", gc=False):
    text: str


class _FastReasoningBlock(msgspec.Struct, tag_field="type", tag="reasoning", gc=False):
    text: str
    signature: str | None = None


class _FastToolCallBlock(msgspec.Struct, tag_field="type", tag="tool_call", gc=False):
    id: str
    name: str
    input: dict[str, Any]


class _FastUsage(msgspec.Struct, gc=False):
    inputTokens: _FastTokens
    outputTokens: _FastTokens
    cacheReadTokens: _FastTokens | None = None
    cacheWriteTokens: _FastTokens | None = None


class _FastMessageBody(msgspec.Struct, gc=False):
    content: list[_FastTextBlock | _FastReasoningBlock | _FastToolCallBlock]
    id: str | None = None
    usage: _FastUsage | None = None
    stopReason: str | None = None
    error: Any = None


class _FastChunk(msgspec.Struct, tag_field="type", tag="assistant/chunk", gc=False):
    delta: _FastTextDelta | _FastReasoningDelta | _FastToolCallDelta
    eventId: _FastEventId | None = None
    ts: _FastTs | None = None


class _FastMessage(msgspec.Struct, tag_field="type", tag="assistant/message", gc=False):
    message: _FastMessageBody
    eventId: _FastEventId | None = None
    ts: _FastTs | None = None


class _FastBatch(msgspec.Struct, gc=False):
    # A Struct: msgspec reads its field types once. A ``list[...]`` type handed to ``convert`` is
    # read again on every call (3.5 µs, ten times an event's check: an NDJSON body checks each
    # line alone).
    events: list[_FastChunk | _FastMessage]


def fast_accepts(events: list[Any]) -> bool:
    """Whether every event is one the narrow description accepts (then the models would too);
    False says nothing: the models decide."""
    return _fast_refusal(events) is None


def _fast_refusal(events: list[Any]) -> msgspec.ValidationError | None:
    try:
        msgspec.convert({"events": events}, _FastBatch)
    except msgspec.ValidationError as error:
        return error
    return None


#: Where msgspec says the refused event is: the path that ends its message (a value it quotes
#: comes before it, so a value cannot pose as the path).
_REFUSED_AT = re.compile(r"`\$\.events\[([0-9]+)\][^`]*`\Z")
#: Refused events the fast check goes on after, each time from the next event: a batch with a
#: few events it does not describe (a ``turn/end`` at its end, an ``x-`` event, a ``ts`` on 29
#: February, steps and tool results) leaves only those to the models. Going on costs about what
#: the models take for one event, so it stops after ``FAST_RESUMES`` and one more per
#: ``RESUME_SPACING`` events of the batch; the rest then goes as without the fast check. (A batch whose every event it refuses
#: is checked by the models at a few per cent more.)
FAST_RESUMES = 8
RESUME_SPACING = 16


def left_to_models(events: list[Any]) -> list[int]:
    """The positions of the events the fast check does not accept, in order: the models decide
    those (the others they would accept). Past :data:`FAST_RESUMES` refusals (and one per
    :data:`RESUME_SPACING` events), every later event but a plain text delta
    (:func:`is_plain_text_delta`) is listed."""
    return _left_after(events, _fast_refusal(events))


def _left_after(events: list[Any], refusal: msgspec.ValidationError | None) -> list[int]:
    """:func:`left_to_models` of a batch the fast check answered with ``refusal`` (None: accepted)."""
    left: list[int] = []
    resumes = FAST_RESUMES + len(events) // RESUME_SPACING
    start = 0
    error: msgspec.ValidationError | None = refusal
    while error is not None:
        # msgspec checks the events in order and stops at the first it refuses: those before
        # it were accepted.
        found = _REFUSED_AT.search(str(error))
        refused = start if found is None else start + int(found[1])
        if found is None or len(left) == resumes:
            return left + [index for index in range(refused, len(events)) if not is_plain_text_delta(events[index])]
        left.append(refused)
        start = refused + 1
        error = _fast_refusal(events[start:])
    return left


def validate_events(events: list[Any], *, index_offset: int = 0) -> None:
    """Check a batch of parsed events; raise 422 naming the first bad event's index and field.

    ``index_offset`` is the position of ``events[0]`` in the request (NDJSON lines).
    """
    # An accepted batch (most of them; an NDJSON body's every line) costs one call and no more.
    refusal = _fast_refusal(events)
    if refusal is not None:
        _validate_by_models(events, _left_after(events, refusal), index_offset)


def validate_in_full(events: list[Any], *, index_offset: int = 0) -> None:
    """:func:`validate_events` by the models alone (text chunks by :func:`is_plain_text_delta`)."""
    positions = [index for index, event in enumerate(events) if not is_plain_text_delta(event)]
    _validate_by_models(events, positions, index_offset)


def _validate_by_models(events: list[Any], positions: list[int], index_offset: int) -> None:
    """The models' check of ``events`` at ``positions`` (the others accepted); a refusal names
    the first bad event by its index in the request. Events the models accept add no problem to
    a refusal, so it is the same whichever of them are left out."""
    if not positions:
        return
    try:
        _EVENTS.validate_python([events[index] for index in positions])
    except ValidationError as error:
        problems = _problems(error, 0, batched=True)
        for problem in problems:  # from the position among the checked events to the request's
            problem["index"] = positions[problem["index"]] + index_offset
        # The deepest location of the first bad event says most (a union reports each branch).
        first = min(problems, key=lambda p: (p["index"], -p["field"].count(".") - p["field"].count("[")))
        raise InvalidEvent(
            f"event {first['index']}: {first['field']}: {first['message']}",
            index=first["index"],
            field=first["field"],
            errors=problems[:20],
        ) from None
