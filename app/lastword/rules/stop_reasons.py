"""Stop reasons (SPEC §6): the wire values and the aliases accepted on input."""

from __future__ import annotations

from typing import Literal, get_args

StopReason = Literal[
    "completed", "max_tokens", "max_turns", "refusal", "cancelled", "error", "timeout"
]

WIRE_VALUES: tuple[StopReason, ...] = get_args(StopReason)

_ALIASES: dict[str, StopReason] = {
    "end_turn": "completed",
    "stop": "completed",
    "stop_sequence": "completed",
    "complete": "completed",
    "success": "completed",
    "max_output_tokens": "max_tokens",
    "length": "max_tokens",
    "max_turn_requests": "max_turns",
    "content_filter": "refusal",
    "aborted": "cancelled",
    "abort": "cancelled",
    "canceled": "cancelled",
    "failed": "error",
}

ACCEPTED_INPUTS: tuple[str, ...] = WIRE_VALUES + tuple(_ALIASES)


def _accepted_pattern() -> str:
    """A JSON Schema ``pattern`` (ECMA 262, no inline flags) that matches what is accepted."""
    def spelled(word: str) -> str:
        return "".join(f"[{c}{c.upper()}]" if c.isalpha() else "[-_]" if c == "_" else c for c in word)

    return "^[ \\t\\n\\r]*(" + "|".join(spelled(word) for word in ACCEPTED_INPUTS) + ")[ \\t\\n\\r]*$"


#: The white space accepted around a stop reason (JSON's, as in the pattern below).
_ASCII_SPACE = " \t\n\r"

#: For the OpenAPI document: any case, ``-`` or ``_``, surrounding white space (see below).
ACCEPTED_PATTERN = _accepted_pattern()


def normalise_stop_reason(value: str) -> StopReason:
    """The wire value for a stop reason as a producer sent it.

    Case is ignored and ``-`` is the same as ``_``. Raises ``ValueError`` for anything that
    is neither a wire value nor a known alias: a turn must keep the reason it really ended
    with, so guessing is worse than refusing.
    """
    # ASCII only, like ACCEPTED_PATTERN: str.lower() and str.strip() know Unicode, so the
    # Kelvin sign would lower to "k" and a no-break space would be stripped.
    key = value.strip(_ASCII_SPACE).lower().replace("-", "_") if value.isascii() else ""
    if key in WIRE_VALUES:
        return key
    try:
        return _ALIASES[key]
    except KeyError:
        raise ValueError(
            f"unknown stop reason {value!r}; expected one of {', '.join(WIRE_VALUES)} "
            "or a known alias"
        ) from None


def is_error(stop_reason: str) -> bool:
    return stop_reason != "completed"
