"""Retention: ended runs past LASTWORD_RETENTION_HOURS are deleted; readers get a clear answer."""

from __future__ import annotations

from typing import Any

import httpx
from lastword.settings import Settings

from tests.clock import ManualClock
from tests.servers import threaded_server

RETENTION_HOURS = 1.0


def _retention_settings(make_settings: Any, **overrides: Any) -> Settings:
    """Retention of an hour, looked at every 10 ms of real time; the lease sweep runs only at
    start-up, so that afterwards only retention passes read the clock (see ``_pass``)."""
    values = {"retention_hours": RETENTION_HOURS, "retention_interval_seconds": 0.01,
              "sweep_interval_seconds": 3600, **overrides}
    return make_settings(**values)  # type: ignore[no-any-return]


def _pass(clock: ManualClock, seconds: float) -> None:
    """Move the clock on and return once a whole retention pass ran at the new time: passes
    read the clock once as they start and run one after the other, and no request is in flight."""
    clock.advance(seconds)
    clock.wait_for_reads(2, by="retention")


def test_ended_runs_are_deleted_and_answer_410(make_settings: Any) -> None:
    """An ended run past retention is deleted: every read of it answers 410 run_deleted; open runs stay."""
    clock = ManualClock()
    with threaded_server(_retention_settings(make_settings, lease_seconds=0), clock) as url, \
            httpx.Client(base_url=url) as api:
        ended = api.post("/v1/runs", json={"agent": "old"}).json()["runId"]
        api.post(f"/v1/runs/{ended}/events", json=[{"type": "x-a"}]).raise_for_status()
        api.post(f"/v1/runs/{ended}/end", json={"stopReason": "completed"}).raise_for_status()
        open_run = api.post("/v1/runs", json={"agent": "open"}).json()["runId"]
        idle = api.post("/v1/runs", json={"mode": "continuable"}).json()["runId"]
        api.post(f"/v1/runs/{idle}/end", json={"stopReason": "completed"}).raise_for_status()

        _pass(clock, RETENTION_HOURS * 3600 - 10)
        assert api.get(f"/v1/runs/{ended}").status_code == 200  # not old enough yet
        _pass(clock, 20)
        gone = api.get(f"/v1/runs/{ended}")
        assert gone.status_code == 410
        assert gone.headers["content-type"] == "application/problem+json"
        assert gone.json()["code"] == "run_deleted"
        for path in ("/result", "/tool-result", "/events", "/stream"):
            assert api.get(f"/v1/runs/{ended}{path}").status_code == 410, path
        assert api.post(f"/v1/runs/{ended}/events", json=[{"type": "x-late"}]).status_code == 410
        assert api.post("/v1/runs", json={"runId": ended}).status_code == 410  # its id is not reused
        listed = [run["runId"] for run in api.get("/v1/runs").json()["runs"]]
        assert ended not in listed
        # Not ended: a running run and an idle continuable run are kept however old.
        assert api.get(f"/v1/runs/{open_run}").status_code == 200
        assert api.get(f"/v1/runs/{idle}").status_code == 200


def test_firehose_readers_resume_across_deleted_rows(make_settings: Any) -> None:
    """A firehose reader resuming after an id whose run was deleted gets what came after."""
    clock = ManualClock()
    with threaded_server(_retention_settings(make_settings), clock) as url, httpx.Client(base_url=url) as api:
        old = api.post("/v1/runs", json={}).json()["runId"]
        api.post(f"/v1/runs/{old}/end", json={"stopReason": "cancelled"}).raise_for_status()
        _pass(clock, RETENTION_HOURS * 3600 + 10)
        assert api.get(f"/v1/runs/{old}").status_code == 410
        new = api.post("/v1/runs", json={}).json()["runId"]
        with api.stream("GET", "/v1/stream", params={"after": 1}, timeout=10) as stream:
            for line in stream.iter_lines():
                if line.startswith("data:"):
                    assert new in line and old not in line
                    break


def test_firehose_resumes_after_retention_deleted_its_newest_rows(make_settings: Any) -> None:
    """Every run deleted, the feed empty: resuming from the last id the firehose sent still works."""
    clock = ManualClock()
    with threaded_server(_retention_settings(make_settings), clock) as url, httpx.Client(base_url=url) as api:
        runs = [api.post("/v1/runs", json={}).json()["runId"] for _ in range(3)]
        for run in runs:
            api.post(f"/v1/runs/{run}/end", json={"stopReason": "completed"}).raise_for_status()
        # Three starts and three ends: the firehose sent ids 1..6.
        sent = []
        with api.stream("GET", "/v1/stream", params={"after": 0}, timeout=10) as stream:
            for line in stream.iter_lines():
                if line.startswith("id:"):
                    sent.append(int(line.removeprefix("id:")))
                if len(sent) == 6:
                    break
        _pass(clock, RETENTION_HOURS * 3600 + 10)
        for run in runs:
            assert api.get(f"/v1/runs/{run}").status_code == 410
        for resume in (sent[-1], sent[0]):
            for how in ({"params": {"after": resume}}, {"headers": {"Last-Event-ID": str(resume)}}):
                with api.stream("GET", "/v1/stream", timeout=10, **how) as stream:
                    assert stream.status_code == 200, (resume, stream.read())
        # Past what was ever sent is still refused.
        refused = api.get("/v1/stream", params={"after": sent[-1] + 1})
        assert refused.status_code == 400 and refused.json()["code"] == "invalid_last_event_id"
        # And what comes next is delivered to a reader resuming from the last id it had.
        with api.stream("GET", "/v1/stream", params={"after": sent[-1]}, timeout=10) as stream:
            new = api.post("/v1/runs", json={}).json()["runId"]
            for line in stream.iter_lines():
                if line.startswith("data:"):
                    assert new in line
                    break
