"""opencode's ``opencode run --format json`` standard output (SPEC §16, ``opencode``).

Every line has a ``type``, a ``timestamp``, a ``sessionID`` and (except ``error`` lines) a
``part`` with its ``id``, ``messageID`` and ``type``. A model call is a *step*: ``step_start``,
its parts (``text``, ``reasoning``, ``tool_use``), ``step_finish``. opencode 1.18 prints a part
once, when it is complete (the whole text, a tool once it finished); should a part be printed
again under the same id, its last printing is kept, in its first one's place.

* One ``assistant/message`` per step, stored at its ``step_finish``: ``text`` parts → ``text``
  blocks, ``reasoning`` parts → ``reasoning`` blocks, ``tool_use`` parts → ``tool_call`` blocks
  (``id`` the ``callID``, ``name`` the ``tool``, ``input`` the ``state.input``), in the order
  printed. A tool whose state is ``completed`` or ``error`` also gives a ``tool/result``
  (``state.output`` or ``state.error``, ``isError`` for ``error``), stored after the message.
* ``step_finish`` gives the message's usage from ``part.tokens``: ``input`` → ``inputTokens``,
  ``output`` + ``reasoning`` → ``outputTokens`` (opencode counts reasoning apart from output —
  ``total`` is the sum of all its counts — while the other formats count it inside output),
  ``cache.read`` → ``cacheReadTokens``, ``cache.write`` → ``cacheWriteTokens``. opencode's
  ``input`` already leaves the cached tokens out.
* Its ``reason`` ends the turn unless it is ``tool-calls``: ``stop`` → ``completed``, ``length``
  → ``max_tokens``, ``content-filter`` → ``refusal``, other values by the aliases of SPEC §6,
  anything else → ``error`` naming it. The message then carries that ``stopReason`` and is
  followed by its tool results and the ``turn/end``.
* An ``error`` line ends the turn ``error`` with ``error: {name, message}`` (``data.message``).
* A step left open is stored when the next ``step_start`` comes (opencode retries a failed model
  call under a new ``step_start`` for the same message), at an ``error`` line or at the end of
  the body: as a message, without usage, when it holds any part; as an
  ``x-opencode-step_start`` event when it holds none (an attempt that printed nothing).
* Other line kinds → ``x-opencode-<type>``.

Event ids: the step's ``messageID`` for its message (``<messageID>:step<n>`` for the n-th step,
n ≥ 2, printed under one message id), the part id for a ``tool/result`` and for a lone
``step_start``, ``<step_finish part id>:end`` for the ``turn/end`` it gives; a line without an
id: ``<sessionID>:<type>:<position among that type>``. A message's ``source`` holds its step's
lines; a ``tool/result``'s and a step's ``turn/end``'s list none (theirs are in the message).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from lastword.adapters.base import usage_of
from lastword.adapters.cli_base import CliAdapter, Event, Made, StreamStop
from lastword.rules.stop_reasons import normalise_stop_reason

#: ``step_finish`` reasons that leave the turn open: the loop answers the tool calls.
NOT_TERMINAL = frozenset({"tool-calls", "tool_calls"})

@dataclass(slots=True)
class _Step:
    """The step being assembled: its parts by id (last printing kept) and its raw lines."""

    message_id: str
    start: Event | None
    parts: dict[str, tuple[str, dict[str, Any], Event]] = field(default_factory=dict)


class OpencodeAdapter(CliAdapter):
    format = "opencode"
    command = "opencode"

    def __init__(self) -> None:
        super().__init__()
        self._session: str | None = None
        self._step: _Step | None = None
        self._steps_of: Counter[str] = Counter()

    def feed(self, index: int, line: Event) -> list[Made]:
        self.lines_read += 1
        kind = self.need(index, line, "type", str)
        session = line.get("sessionID")
        if self._session is None and isinstance(session, str):
            self._session = session
        if kind == "error":
            return self._error(index, line)
        if kind not in ("step_start", "text", "reasoning", "tool_use", "step_finish"):
            part = line.get("part")
            part_id = part.get("id") if isinstance(part, dict) else None
            event_id = part_id if isinstance(part_id, str) else self.positional_id(self._session, kind)
            return [self.extension(kind, event_id, line)]
        part = self.need(index, line, "part", dict)
        self.need(index, part, "id", str, "part.")
        message_id = self.need(index, part, "messageID", str, "part.")
        if kind == "step_start":
            made = self._close_open()
            self._step = _Step(message_id, line)
            return made
        made = []
        if self._step is None or self._step.message_id != message_id:
            made = self._close_open()
            self._step = _Step(message_id, None)
        if kind == "step_finish":
            return made + self._finish_step(index, line, part)
        self._add_part(index, kind, line, part)
        return made

    def assembled(self) -> list[Made]:
        return self._close_open()

    # Steps.

    def _add_part(self, index: int, kind: str, line: Event, part: dict[str, Any]) -> None:
        assert self._step is not None
        if kind in ("text", "reasoning"):
            self.need(index, part, "text", str, "part.")
        else:
            self.need(index, part, "tool", str, "part.")
            self.need(index, part, "callID", str, "part.")
            state = self.need(index, part, "state", dict, "part.")
            status = self.need(index, state, "status", str, "part.state.")
            self.need(index, state, "input", dict, "part.state.")
            if status == "completed":
                self.need(index, state, "output", str, "part.state.")
            elif status == "error":
                self.need(index, state, "error", str, "part.state.")
        self._step.parts[part["id"]] = (kind, part, line)

    def _finish_step(self, index: int, line: Event, part: dict[str, Any]) -> list[Made]:
        reason = self.need(index, part, "reason", str, "part.")
        tokens = self.need(index, part, "tokens", dict, "part.")
        cache = tokens.get("cache") if tokens.get("cache") is not None else {}
        if not isinstance(cache, dict):
            raise self.refuse(index, "part.tokens.cache", "expected an object")
        counts = {**{key: tokens.get(key) for key in ("input", "output", "reasoning")},
                  **{f"cache.{key}": cache.get(key) for key in ("read", "write")}}
        for key, value in counts.items():
            if value is not None and (type(value) is not int or value < 0):
                raise self.refuse(index, f"part.tokens.{key}", "expected a non-negative integer")
        output, reasoning = counts["output"], counts["reasoning"]
        usage = usage_of((
            ("inputTokens", counts["input"]),
            ("outputTokens", output + (reasoning or 0) if output is not None else None),
            ("cacheReadTokens", counts["cache.read"]),
            ("cacheWriteTokens", counts["cache.write"]),
        ))
        stop_reason, error = _stop_reason(reason)
        made = self._close_open(line, usage, stop_reason)
        if stop_reason is not None:
            turn_end: Event = {"type": "turn/end", "stopReason": stop_reason}
            if error is not None:
                turn_end["error"] = error
            turn_end["eventId"] = f"{part['id']}:end"
            turn_end["source"] = self.source([])
            made.append(Made(turn_end))
        self._stop = StreamStop(reason, stop_reason, error)
        return made

    def _close_open(self, finish: Event | None = None, usage: dict[str, int] | None = None,
                    stop_reason: str | None = None) -> list[Made]:
        """Store the open step: its message (and tool results), or a lone ``step_start``."""
        step, self._step = self._step, None
        if step is None:
            return []
        if not step.parts and finish is None:
            if step.start is None:
                return []
            return [self.extension("step_start", step.start["part"]["id"], step.start)]
        self._steps_of[step.message_id] += 1
        number = self._steps_of[step.message_id]
        event_id = step.message_id if number == 1 else f"{step.message_id}:step{number}"
        content: list[dict[str, Any]] = []
        results: list[Made] = []
        for kind, part, _ in step.parts.values():
            if kind in ("text", "reasoning"):
                content.append({"type": kind, "text": part["text"]})
                continue
            state = part["state"]
            content.append({"type": "tool_call", "id": part["callID"], "name": part["tool"], "input": state["input"]})
            if state["status"] in ("completed", "error"):
                failed = state["status"] == "error"
                results.append(Made({
                    "type": "tool/result", "toolCallId": part["callID"],
                    "content": state["error"] if failed else state["output"], "isError": failed,
                    "eventId": part["id"], "source": self.source([]),
                }))
        message: dict[str, Any] = {"content": content}
        if usage is not None:
            message["usage"] = usage
        if stop_reason is not None:
            message["stopReason"] = stop_reason
        raw = ([step.start] if step.start is not None else []) + [line for _, _, line in step.parts.values()]
        if finish is not None:
            raw.append(finish)
        stored = Made({"type": "assistant/message", "message": message, "eventId": event_id,
                       "source": self.source(raw)})
        return [stored, *results]

    def _error(self, index: int, line: Event) -> list[Made]:
        failure = self.need(index, line, "error", dict)
        name = failure.get("name")
        data = failure.get("data")
        text = data.get("message") if isinstance(data, dict) else None
        if name is not None and not isinstance(name, str):
            raise self.refuse(index, "error.name", "expected a string")
        if text is not None and not isinstance(text, str):
            raise self.refuse(index, "error.data.message", "expected a string")
        error = {key: value for key, value in (("name", name), ("message", text)) if value is not None}
        made = self._close_open()
        made.append(Made({"type": "turn/end", "stopReason": "error", "error": error,
                          "eventId": self.positional_id(self._session, "error"), "source": self.source([line])}))
        self._stop = StreamStop("error", "error", error)
        return made


def _stop_reason(reason: str) -> tuple[str | None, dict[str, str] | None]:
    """A ``step_finish`` reason as (§6 stop reason or None when not terminal, error)."""
    if reason in NOT_TERMINAL:
        return None, None
    try:
        return normalise_stop_reason(reason), None
    except ValueError:
        return "error", {"message": f"the step finished with reason {reason!r}"}
