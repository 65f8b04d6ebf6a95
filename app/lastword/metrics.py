"""Prometheus metrics, one registry per app so tests can build many apps in one process."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from lastword.store.base import AppendOutcome


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.events_ingested = Counter(
            "lastword_events_ingested", "Events stored, by type.", ["type"], registry=self.registry
        )
        #: ``events_ingested`` by type, as ``labels()`` gives it (the types are the §4 few).
        self._ingested_by_type: dict[str, Counter] = {}
        self.duplicates = Counter(
            "lastword_events_duplicate", "Events recognised as retries by eventId.", registry=self.registry
        )
        self.ingest_seconds = Histogram(
            "lastword_ingest_batch_seconds", "Time to store one ingest batch (after validation).",
            registry=self.registry,
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0),
        )
        self.runs_created = Counter("lastword_runs_created", "Runs created.", registry=self.registry)
        self.turns_ended = Counter(
            "lastword_turns_ended", "Turns ended, by stop reason.", ["stop_reason"], registry=self.registry
        )
        self.leases_expired = Counter(
            "lastword_leases_expired", "Turns ended because their lease expired.", registry=self.registry
        )
        self.runs = Gauge("lastword_runs", "Runs by status (counted when scraped).", ["status"], registry=self.registry)
        self.runs_deleted = Counter(
            "lastword_runs_deleted", "Ended runs deleted by retention.", registry=self.registry
        )
        self.webhook_deliveries = Counter(
            "lastword_webhook_deliveries", "Webhook deliveries finished, by outcome (delivered, failed).",
            ["outcome"], registry=self.registry,
        )
        self.webhook_attempts = Counter(
            "lastword_webhook_attempts", "Webhook attempts, by result (ok, http_error, network_error).",
            ["result"], registry=self.registry,
        )
        self.outbox_depth = Gauge(
            "lastword_webhook_outbox_pending", "Webhook deliveries pending (counted when scraped).",
            registry=self.registry,
        )
        self.outbox_oldest_age = Gauge(
            "lastword_webhook_outbox_oldest_seconds", "Age of the oldest pending delivery (0 when none).",
            registry=self.registry,
        )
        self.subscribers = Gauge(
            "lastword_sse_subscribers", "Open SSE subscriptions.", registry=self.registry
        )
        self.result_waiters = Gauge(
            "lastword_result_waiters", "Long polls (?wait=, MCP waits) parked until a turn ends.",
            registry=self.registry,
        )
        self.result_polls_waiting = Gauge(
            "lastword_result_polls_waiting",
            "Result long polls that have read their turn, found it running and wait for its end.",
            registry=self.registry,
        )

    def observe_ingest(self, outcome: AppendOutcome, seconds: float) -> None:
        self.ingest_seconds.observe(seconds)
        if outcome.duplicates:
            self.duplicates.inc(outcome.duplicates)
        # Only what was stored: a retried event is counted once, in ``duplicates``.
        for kind, count in outcome.accepted_types.items():
            counter = self._ingested_by_type.get(kind)
            if counter is None:
                # ``labels()`` builds and looks up its key under a lock on every call: a third
                # of what counting an append cost, once per append on the event loop.
                counter = self._ingested_by_type[kind] = self.events_ingested.labels(kind)
            counter.inc(count)

    def count_runs(self, by_status: dict[str, int]) -> None:
        for status in ("running", "idle", "ended"):
            self.runs.labels(status).set(by_status.get(status, 0))

    def count_outbox(self, pending: int, oldest_created_at: float | None, now: float) -> None:
        self.outbox_depth.set(pending)
        self.outbox_oldest_age.set(0 if oldest_created_at is None else max(0.0, now - oldest_created_at))

    def render(self) -> bytes:
        return generate_latest(self.registry)
