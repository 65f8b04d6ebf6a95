"""Configuration: environment variables prefixed ``LASTWORD_`` (a ``.env`` file is read too).

Every field here is listed with its default in docs/RUNNING.md's configuration table.
"""

from __future__ import annotations

import os
from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from lastword.rules.limits import MAX_LEASE_SECONDS


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="LASTWORD_", env_file=".env", extra="ignore")

    host: str = Field("127.0.0.1", description="Address to listen on.")
    port: int = Field(8000, description="Port to listen on.")
    workers: int = Field(
        1, ge=1, description="Processes serving the one port, each a full replica; 'auto': one per core.",
    )
    database_url: str = Field(
        "sqlite:///./data/lastword.db",
        description="sqlite:///PATH (embedded) or postgresql://… (several replicas).",
    )
    fanout_url: str | None = Field(
        None, description="nats://HOST:PORT (comma-separated for a cluster): replicas on PostgreSQL hear each "
        "other's commits over NATS instead of LISTEN/NOTIFY. Unset: LISTEN/NOTIFY.",
    )
    durability: Literal["normal", "full"] = Field(
        "normal",
        description="SQLite: 'normal' survives a crash of the process, 'full' a power cut.",
    )
    lease_seconds: float = Field(
        600.0, ge=0, le=MAX_LEASE_SECONDS, description="Default lease of a run; a turn silent this long ends as timeout. 0: none."
    )
    sweep_interval_seconds: float = Field(1.0, gt=0, description="How often expired leases are looked for.")
    retention_hours: float = Field(
        0.0, ge=0, description="Ended runs older than this are deleted in the background. 0: keep forever."
    )
    retention_interval_seconds: float = Field(60.0, gt=0, description="How often retention looks for old runs.")
    max_body_bytes: int = Field(16 * 1024 * 1024, gt=0, description="Largest request body accepted.")
    max_event_bytes: int = Field(1024 * 1024, gt=0, description="Largest single event accepted (as JSON).")
    max_line_bytes: int = Field(
        16 * 1024 * 1024, gt=0,
        description="Longest line of an agent CLI's output (SPEC §16); such a body has no total limit.",
    )
    max_batch_events: int = Field(10_000, gt=0, description="Most events accepted in one JSON batch.")
    otel_genai_conventions: Literal["0.1.0", "legacy"] = Field(
        "0.1.0", description="The OpenTelemetry GenAI conventions' release the turn spans follow; "
        "'legacy': as lastword made them before 0.1.0 (kept for one release).")
    ds_max_json_messages: int = Field(
        10_000, gt=0, description="Most messages one JSON-mode /ds write (an array) may hold; more is 413.")
    fold_cache_bytes: int = Field(
        256 * 1024 * 1024, gt=0,
        description="Bytes the folds of open turns kept in memory may hold; past it the least recently used are "
                    "dropped (rebuilt from the log when asked for).",
    )
    max_page_size: int = Field(
        1000, gt=0, description="Most items one page of runs or events returns (larger limits are lowered)."
    )
    keepalive_seconds: float = Field(15.0, gt=0, description="Keep-alive comment interval on idle SSE streams.")
    max_wait_seconds: float = Field(300.0, gt=0, description="Longest ?wait= a result request may ask for.")
    sse_max_lifetime_seconds: float = Field(
        3600.0, gt=0, description="An SSE connection is asked to reconnect after this long (server/reconnect)."
    )
    sse_send_timeout_seconds: float = Field(
        30.0, gt=0, description="An SSE client that has not taken a message for this long is disconnected."
    )
    subscriber_buffer: int = Field(
        1000, gt=0, description="Events buffered per SSE subscriber before a slow one is cut off."
    )
    ds_long_poll_seconds: float = Field(
        20.0, gt=0, description="How long a Durable Streams long poll (/ds, live=long-poll) waits for data."
    )
    ds_sse_seconds: float = Field(
        60.0, gt=0, description="A Durable Streams SSE read (/ds, live=sse) ends after this long; clients resume."
    )
    http_keepalive_seconds: int = Field(
        75, gt=0, description="An idle keep-alive connection is closed after this long; keep it above the idle "
        "timeout of any proxy or client pool in front (60 s is common), so that they close first."
    )
    log_level: str = Field("info", description="Log level.")
    header_timeout_seconds: float = Field(
        10.0, gt=0, description="A client must send its request headers within this time (else 408)."
    )
    body_timeout_seconds: float = Field(
        30.0, gt=0, description="Longest pause between two pieces of a request body (else 408 body_timeout)."
    )
    drain_seconds: float = Field(
        10.0, ge=0, description="On SIGTERM, the longest drain: streams are told to reconnect and in-flight "
        "requests finish, then the process exits (keep the pod's terminationGracePeriodSeconds above it)."
    )
    ingest_token: SecretStr | None = Field(
        None, description="Bearer token that ingest (every POST under /v1) requires. Unset: open."
    )
    read_token: SecretStr | None = Field(
        None, description="Bearer token for reads; reads also take the ingest token. Unset: open."
    )
    webhook_backoff_seconds: float = Field(
        1.0, gt=0, description="Delay before a webhook's first retry; it doubles (with jitter) after each failure."
    )
    webhook_max_attempts: int = Field(8, ge=1, description="Attempts of one webhook delivery before it is marked failed.")
    webhook_timeout_seconds: float = Field(10.0, gt=0, description="Longest one webhook attempt may take.")
    webhook_allowed_hosts: str = Field(
        "", description="Comma-separated hosts webhooks may target (exact, or '*.example.com'); unset or '*': any."
    )
    webhook_allow_private: bool = Field(
        False, description="Let webhooks target loopback, private, link-local and other non-global addresses."
    )
    allowed_hosts: str = Field(
        "", description="Comma-separated extra Host names /mcp answers (any port), beside loopback, address "
        "literals and LASTWORD_HOST; '*': any Host (no DNS-rebinding check)."
    )
    cors_origins: str = Field(
        "", description="Comma-separated origins allowed to call the API from a browser ('*' for any)."
    )

    @property
    def cors_origin_list(self) -> list[str]:
        return [origin.strip() for origin in self.cors_origins.split(",") if origin.strip()]

    def token(self, name: str) -> str | None:
        secret: SecretStr | None = getattr(self, f"{name}_token")
        return secret.get_secret_value() if secret is not None else None

    @field_validator("workers", mode="before")
    @classmethod
    def _cores(cls, value: object) -> object:
        # 'auto' is the cores this process may run on (a container's CPU set, not the host's).
        if isinstance(value, str) and value.strip().lower() == "auto":
            return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        return value
