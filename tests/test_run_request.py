"""A create request keeps the stored form runs were always compared by (idempotent ``runId``).

The service takes a plain :class:`~lastword.rules.records.NewRun`, not the HTTP body; what it
stores for the idempotency comparison must still be what every earlier release stored for the
same body (the body's dump, fields added later left out when not sent, a webhook secret as its
digest), or a repeated create of an old run would answer 409.
"""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from lastword.rules.runstate import secret_digest
from lastword.schemas import RunCreate
from lastword.service import canonical_request

ids = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,12}", fullmatch=True)
json_values = st.recursive(st.none() | st.booleans() | st.integers(-10, 10) | st.text(max_size=4),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
                           max_leaves=6)
bodies = st.fixed_dictionaries({}, optional={
    "runId": ids, "parentRunId": ids, "agent": st.text(max_size=8),
    "mode": st.sampled_from(["oneshot", "continuable"]),
    "metadata": st.dictionaries(st.text(max_size=4), json_values, max_size=3),
    "leaseSeconds": st.integers(0, 100) | st.floats(0, 100),
    "forkOf": st.fixed_dictionaries({"runId": ids, "afterSeq": st.integers(0, 2**53 - 1)}),
    "selection": st.fixed_dictionaries({}, optional={"joinContinuations": st.booleans()}),
    "webhook": st.fixed_dictionaries({"url": st.just("https://example.com/hook")},
                                     optional={"secret": st.none() | st.text(min_size=1, max_size=8)}),
})


def stored_by_earlier_releases(request: RunCreate, run_id: str) -> str:
    """The canonical form as releases before the plain service input built it from the body."""
    body: dict[str, Any] = request.model_dump()
    for optional in ("forkOf", "selection", "webhook"):
        if body[optional] is None:
            del body[optional]
    body["runId"] = run_id
    if "webhook" in body and body["webhook"]["secret"] is not None:
        body["webhook"]["secret"] = secret_digest(body["webhook"]["secret"])
    return orjson.dumps(body, option=orjson.OPT_SORT_KEYS).decode()


@given(bodies, ids)
def test_the_stored_request_is_what_earlier_releases_stored(body: dict[str, Any], made_id: str) -> None:
    request = RunCreate.model_validate(body)
    run_id = request.runId or made_id
    assert canonical_request(request.new_run(), run_id) == stored_by_earlier_releases(request, run_id)
