"""One shape for each answer: the models in ``lastword.schemas`` (what the OpenAPI document
declares) and the views in ``lastword.http.views`` (what the routes send, built by hand because
pydantic on every answer costs) must agree. The models are the source: for every record a view
may be given, its answer validates against the model and holds no key the model does not declare
(the models do not forbid extra keys, so the fuzzing against the document would not see one)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from lastword.http.views import delivery_view, logged_event_view, result_view, run_view, turn_summary_view
from lastword.rules.records import Delivery, RunRecord, StoredEvent, TurnRecord
from lastword.schemas import DeliveryView, LoggedEvent, Run, SubagentResult, TurnSummary
from pydantic import BaseModel

TIMES = st.floats(min_value=0, max_value=4_000_000_000, allow_nan=False)
IDS = st.from_regex(r"[a-z0-9][a-z0-9._:-]{0,7}", fullmatch=True)
MAYBE = st.none() | IDS
USAGE = st.fixed_dictionaries({name: st.integers(0, 10**6) for name in
                               ("inputTokens", "outputTokens", "cacheReadTokens", "cacheWriteTokens")})
STOP = st.sampled_from(["completed", "max_tokens", "max_turns", "refusal", "error", "cancelled", "timeout"])
OUTPUT = st.lists(st.builds(lambda text: {"type": "text", "text": text}, st.text(max_size=5)), max_size=2)

runs = st.builds(
    RunRecord, pk=st.integers(1, 100), run_id=IDS, parent_run_id=MAYBE, agent=MAYBE,
    mode=st.sampled_from(["oneshot", "continuable"]), metadata=st.dictionaries(IDS, st.integers(), max_size=2),
    lease_seconds=st.floats(0, 3600), canonical=st.just("{}"), status=st.sampled_from(["running", "idle", "ended"]),
    turn=st.integers(1, 9), last_seq=st.integers(0, 10**6), lease_expires_at=st.none() | TIMES,
    created_at=TIMES, updated_at=TIMES, fork_of=st.none() | st.tuples(IDS, st.integers(0, 99)),
    join_continuations=st.none() | st.booleans())

turns = st.builds(
    TurnRecord, run_id=IDS, turn=st.integers(1, 9), start_seq=st.integers(0, 99), started_at=TIMES,
    ended_at=st.none() | TIMES, stop_reason=st.none() | STOP,
    error=st.none() | st.fixed_dictionaries({"type": IDS, "message": st.text(max_size=5)}), output=OUTPUT,
    usage=USAGE | st.just({}))

deliveries = st.builds(
    Delivery, id=st.integers(1, 99), webhook_id=IDS, run_id=IDS, turn=st.integers(1, 9),
    state=st.sampled_from(["pending", "delivered", "failed"]),
    attempts=st.lists(st.fixed_dictionaries({"at": st.just("2026-12-04T00:00:00Z"), "durationMs": st.floats(0, 9)},
                                            optional={"statusCode": st.integers(100, 599)}), max_size=2),
    last_status=st.none() | st.integers(100, 599), next_attempt_at=st.none() | TIMES)

events = st.builds(
    StoredEvent, run_id=IDS, seq=st.integers(1, 99), turn=st.integers(1, 9), type=st.just("assistant/chunk"),
    body=st.builds(lambda text: {"type": "assistant/chunk", "delta": {"type": "text", "text": text}}, st.text(max_size=5)),
    received_at=TIMES, event_id=MAYBE)


def declared(model: type[BaseModel]) -> set[str]:
    return {field.alias or name for name, field in model.model_fields.items()}


def holds(answer: dict[str, Any], model: type[BaseModel]) -> None:
    assert set(answer) <= declared(model), set(answer) - declared(model)
    model.model_validate(answer)


@given(runs)
def test_a_run_is_answered_as_declared(run: RunRecord) -> None:
    holds(run_view(run), Run)


@given(turns)
def test_a_result_and_a_turn_summary_are_answered_as_declared(turn: TurnRecord) -> None:
    holds(result_view(turn), SubagentResult)
    holds(turn_summary_view(turn), TurnSummary)


@given(deliveries)
def test_a_delivery_is_answered_as_declared(delivery: Delivery) -> None:
    holds(delivery_view(delivery), DeliveryView)


@given(events)
def test_a_logged_event_is_answered_as_declared(event: StoredEvent) -> None:
    holds(logged_event_view(event), LoggedEvent)
