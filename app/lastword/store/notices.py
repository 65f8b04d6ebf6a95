"""What a commit notice says (PostgreSQL ``NOTIFY``), as the store writes it and replicas read it.

Inside every writing transaction the PostgreSQL store sends a notice naming the run, the ``seq``
range and the feed id it committed (or the Durable Stream it changed);
:mod:`lastword.fanout.notify` listens and parses them. The encoding lives here, beside its writer
and below its reader, so both use one definition. A notice says where to look, never the data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

#: The longest notice payload sent, in bytes (PostgreSQL refuses 8000 or more).
MAX_PAYLOAD = 4000


@dataclass(frozen=True, slots=True)
class Notice:
    """A transaction committed ``first_seq..last_seq`` of a run (and feed id ``feed_id``)."""

    run_id: str
    first_seq: int
    last_seq: int
    feed_id: int | None = None

    def payload(self) -> str:
        return orjson.dumps(
            {"run": self.run_id, "first": self.first_seq, "last": self.last_seq, "feed": self.feed_id}
        ).decode()

    @classmethod
    def parse(cls, payload: str) -> Notice:
        data: dict[str, Any] = orjson.loads(payload)
        feed = data.get("feed")
        return cls(str(data["run"]), int(data["first"]), int(data["last"]), None if feed is None else int(feed))


@dataclass(frozen=True, slots=True)
class StreamNotice:
    """A transaction changed the Durable Stream at ``path`` (SPEC §17): its readers read again.

    A path too long for a notice (PostgreSQL takes payloads under 8000 bytes) is sent as None:
    some stream changed, and every parked reader reads again."""

    path: str | None

    def payload(self) -> str:
        text = orjson.dumps({"ds": self.path}).decode()
        return text if len(text.encode()) <= MAX_PAYLOAD else orjson.dumps({"ds": None}).decode()


def parse_notice(payload: str) -> Notice | StreamNotice:
    """A notice's payload as the notice it is: a stream's names its path, a run's its seq range."""
    data: dict[str, Any] = orjson.loads(payload)
    if "ds" in data:
        return StreamNotice(None if data["ds"] is None else str(data["ds"]))
    return Notice.parse(payload)
