"""Join (GET /v1/runs/{runId}/children?wait=): a parent waits for all, or the first, of its children."""

from __future__ import annotations

import random
import threading
from typing import Any

import httpx
from lastword.client.core import AsyncLastwordClient, LastwordClient

STOP_REASONS = ["end_turn", "max_tokens", "cancelled", "refusal"]
NORMALISED = {"end_turn": "completed", "max_tokens": "max_tokens", "cancelled": "cancelled", "refusal": "refusal"}


def make_family(http: httpx.Client, parent: str, count: int) -> list[str]:
    http.post("/v1/runs", json={"runId": parent}).raise_for_status()
    children = [f"{parent}-kid-{index}" for index in range(count)]
    for child in children:
        http.post("/v1/runs", json={"runId": child, "parentRunId": parent}).raise_for_status()
    return children


def test_join_answers_once_all_50_children_ended_at_random_times(base_url: str) -> None:
    """50 children end at random moments in random ways; the join answers with all 50 ended."""
    rng = random.Random(7)
    with httpx.Client(base_url=base_url, timeout=60) as http:
        children = make_family(http, "boss", 50)
        reasons = {child: rng.choice(STOP_REASONS) for child in children}
        delays = {child: rng.uniform(0, 1.5) for child in children}
        answers: list[Any] = []
        joining = threading.Thread(target=lambda: answers.append(
            http.get("/v1/runs/boss/children", params={"wait": 60}, timeout=90).json()))
        joining.start()

        def end(child: str) -> None:
            threading.Event().wait(delays[child])  # the child's own pace: the workload, not a sync
            with httpx.Client(base_url=base_url, timeout=30) as own:
                own.post(f"/v1/runs/{child}/end", json={"stopReason": reasons[child]}).raise_for_status()

        enders = [threading.Thread(target=end, args=(child,)) for child in children]
        for thread in enders:
            thread.start()
        for thread in enders:
            thread.join(60)
        joining.join(90)
    [joined] = answers
    assert joined["done"] is True and joined["runId"] == "boss"
    by_child = {result["runId"]: result for result in joined["children"]}
    assert set(by_child) == set(children)
    assert {child: r["stopReason"] for child, r in by_child.items()} == {c: NORMALISED[reasons[c]] for c in children}
    assert all(result["status"] == "ended" for result in by_child.values())


def test_any_answers_when_the_first_child_ends(base_url: str) -> None:
    """?any=true answers as soon as one child has ended, the others still running."""
    with httpx.Client(base_url=base_url, timeout=60) as http:
        children = make_family(http, "lead", 5)
        answers: list[Any] = []
        joining = threading.Thread(target=lambda: answers.append(
            http.get("/v1/runs/lead/children", params={"wait": 60, "any": "true"}, timeout=90).json()))
        joining.start()
        wait_for_parked(http, len(children))
        with httpx.Client(base_url=base_url, timeout=30) as other:
            other.post(f"/v1/runs/{children[2]}/end", json={"stopReason": "end_turn"}).raise_for_status()
        joining.join(90)
    [joined] = answers
    assert joined["done"] is True
    states = {r["runId"]: r["status"] for r in joined["children"]}
    assert states[children[2]] == "ended"
    assert sorted(states.values()) == ["ended", "running", "running", "running", "running"]


def test_a_wait_that_runs_out_says_not_done(base_url: str) -> None:
    """With children still running when the wait runs out, done is false; without ?wait it answers at once."""
    with httpx.Client(base_url=base_url, timeout=60) as http:
        make_family(http, "slowpoke", 2)
        waited = http.get("/v1/runs/slowpoke/children", params={"wait": 0.2}).json()
        at_once = http.get("/v1/runs/slowpoke/children").json()
        nobody = http.get("/v1/runs/childless/children").json()
    assert waited["done"] is False and len(waited["children"]) == 2
    assert at_once["done"] is False
    assert nobody == {"runId": "childless", "done": True, "children": []}


def test_the_clients_join(base_url: str) -> None:
    """LastwordClient.join and AsyncLastwordClient.join return the same joined children."""
    import anyio

    with httpx.Client(base_url=base_url, timeout=60) as http:
        children = make_family(http, "family", 3)
        for child in children:
            http.post(f"/v1/runs/{child}/end", json={"stopReason": "end_turn"}).raise_for_status()
    with LastwordClient(base_url) as client:
        joined = client.join("family", timeout=5)

    async def join_async() -> Any:
        async with AsyncLastwordClient(base_url) as client:
            return await client.join("family", timeout=5)

    joined_async = anyio.run(join_async)
    assert joined.done and joined_async.done
    assert {c.runId for c in joined.children} == set(children) == {c.runId for c in joined_async.children}


def wait_for_parked(http: httpx.Client, count: int) -> None:
    """Return once the server holds ``count`` waiters on turn ends (its gauge; bounded)."""
    for _ in range(3000):
        if f"lastword_result_waiters {float(count)}" in http.get("/metrics").text:
            return
        threading.Event().wait(0.01)
    raise AssertionError("the join never parked")
