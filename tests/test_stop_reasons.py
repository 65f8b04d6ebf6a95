"""Stop reasons (SPEC §6): wire values, accepted aliases, and what is refused."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lastword.rules import stop_reasons
from lastword.rules.stop_reasons import ACCEPTED_INPUTS, ACCEPTED_PATTERN, WIRE_VALUES, is_error, normalise_stop_reason

# Written out from SPEC §6 rather than imported, so that the module is checked against the contract.
WIRE = ["completed", "max_tokens", "max_turns", "refusal", "cancelled", "error", "timeout"]
ALIASES = {
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


def test_wire_values_are_the_specified_ones() -> None:
    """The module's wire values are exactly SPEC §6's, and it accepts exactly those plus the aliases."""
    assert list(WIRE_VALUES) == WIRE
    assert set(ACCEPTED_INPUTS) == set(WIRE) | set(ALIASES)


@pytest.mark.parametrize("value", WIRE)
def test_wire_values_map_to_themselves(value: str) -> None:
    """A wire value is accepted as it is."""
    assert normalise_stop_reason(value) == value


@pytest.mark.parametrize(("alias", "wire"), sorted(ALIASES.items()))
def test_alias_is_normalised(alias: str, wire: str) -> None:
    """Every alias of SPEC §6 maps to its wire value."""
    assert normalise_stop_reason(alias) == wire


def _spellings(value: str) -> list[str]:
    dashed = value.replace("_", "-")
    return [value.upper(), value.title(), dashed, dashed.upper(), value.swapcase()[:1] + value[1:]]


@pytest.mark.parametrize(("value", "wire"), [(w, w) for w in WIRE] + sorted(ALIASES.items()))
def test_case_and_dashes_do_not_matter(value: str, wire: str) -> None:
    """Upper or mixed case and '-' for '_' are the same stop reason."""
    for spelling in _spellings(value):
        assert normalise_stop_reason(spelling) == wire, spelling


@pytest.mark.parametrize(
    "value",
    [
        "",
        "done",
        "finished",
        "tool_use",
        "max tokens",
        "maxtokens",
        "max__tokens",
        "cancel",
        "cancelled!",
        "end_turn_",
        "_completed",
        "complete d",
        "errors",
        "time_out",
    ],
)
def test_anything_else_is_refused(value: str) -> None:
    """A value that is neither a wire value nor an alias raises ValueError naming it."""
    with pytest.raises(ValueError, match="unknown stop reason"):
        normalise_stop_reason(value)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from("abcdeilmnorstuvwx_-ABC"), max_size=20))
def test_normalising_either_refuses_or_gives_a_wire_value(value: str) -> None:
    """For any string the result is a wire value, and exactly the accepted spellings give one."""
    key = value.lower().replace("-", "_")
    if key in WIRE or key in ALIASES:
        assert normalise_stop_reason(value) == ALIASES.get(key, key)
    else:
        with pytest.raises(ValueError):
            normalise_stop_reason(value)


@pytest.mark.parametrize("value", WIRE)
def test_normalising_is_idempotent(value: str) -> None:
    """A normalised value normalises to itself."""
    assert normalise_stop_reason(normalise_stop_reason(value)) == value


@pytest.mark.parametrize("value", WIRE)
def test_is_error_unless_completed(value: str) -> None:
    """isError is stopReason != completed: max_tokens and cancelled are errors too."""
    assert is_error(value) is (value != "completed")


def test_the_refusal_names_the_value_and_what_is_accepted() -> None:
    """The error says which value was refused and lists the wire values."""
    with pytest.raises(ValueError) as caught:
        normalise_stop_reason("done")
    assert str(caught.value) == (
        "unknown stop reason 'done'; expected one of completed, max_tokens, max_turns, refusal, "
        "cancelled, error, timeout or a known alias"
    )


def _pattern() -> str:
    """The OpenAPI ``pattern`` for stopReason, built afresh (it is built once at import)."""
    return stop_reasons._accepted_pattern()


@pytest.mark.parametrize(("value", "wire"), [(w, w) for w in WIRE] + sorted(ALIASES.items()))
def test_the_openapi_pattern_matches_every_accepted_spelling(value: str, wire: str) -> None:
    """The pattern published for stopReason accepts each spelling that normalises, padded too."""
    for spelling in [*_spellings(value), f" \t{value}\r\n"]:
        assert re.fullmatch(_pattern(), spelling), spelling
    assert _pattern() == ACCEPTED_PATTERN


@settings(max_examples=300, deadline=None)
@given(st.one_of(
    st.text(alphabet=st.sampled_from("abcdeilmnorstuvwx_- \tAB"), max_size=20),
    st.sampled_from([*WIRE, *ALIASES]).map(lambda word: word[:-1] + "?" + word[-1:]),
))
def test_the_openapi_pattern_agrees_with_normalising(value: str) -> None:
    """For any ASCII string, the pattern matches exactly when normalise_stop_reason accepts it."""
    try:
        normalise_stop_reason(value)
        accepted = True
    except ValueError:
        accepted = False
    assert bool(re.fullmatch(_pattern(), value)) is accepted


def _lookalike(draw: st.DrawFn) -> str:
    """An accepted spelling with some characters swapped for Unicode look-alikes or spaces."""
    word = list(draw(st.sampled_from(ACCEPTED_INPUTS)))
    swaps = {"k": "\u212a", "s": "\u017f", "i": "\u0130", "K": "\u212a", "_": "\uff3f"}
    for position in draw(st.lists(st.integers(0, len(word) - 1), max_size=3)):
        word[position] = swaps.get(word[position], word[position].upper())
    pad = st.sampled_from(["", " ", "\t", "\n", "\r", "\xa0", "\u2003", "\u3000", "\x0b", "\x0c"])
    return draw(pad) + "".join(word) + draw(pad)


@settings(max_examples=500, deadline=None)
@given(st.composite(_lookalike)() | st.text(max_size=20))
def test_accepted_exactly_when_the_openapi_pattern_matches(value: str) -> None:
    """A stop reason is accepted if and only if the published pattern (ASCII only) matches it."""
    matches = re.fullmatch(ACCEPTED_PATTERN.removeprefix("^").removesuffix("$"), value) is not None
    try:
        normalise_stop_reason(value)
        accepted = True
    except ValueError:
        accepted = False
    assert accepted is matches, value


@pytest.mark.parametrize("value", ["max_to\u212aens", "\xa0completed", "completed\u2003", "\u017ftop", "cancelled\x0b"])
def test_unicode_lookalikes_and_spaces_are_refused(value: str) -> None:
    """The Kelvin sign, the long s and non-ASCII spaces do not pass for their ASCII look-alikes."""
    with pytest.raises(ValueError, match="unknown stop reason"):
        normalise_stop_reason(value)
