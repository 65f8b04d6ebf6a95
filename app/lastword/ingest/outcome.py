"""What an ingest answers: what it stored, and how the stream stopped (a face writes it out)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lastword.errors import LastwordError
from lastword.rules.records import AppendOutcome


@dataclass
class Stored:
    """What a body stored: ``last_seq`` is None when nothing was appended at all (a streamed
    ``text/plain`` body that was empty). ``stop_reason`` and ``provider_stop_reason``: how a
    provider's or a CLI's stream said it stopped, when it said so."""

    accepted: int = 0
    duplicates: int = 0
    last_seq: int | None = None
    stop_reason: str | None = None
    provider_stop_reason: str | None = None

    def answer(self) -> dict[str, Any]:
        """The ``AppendResult`` (or ``IngestResult``) document."""
        answer: dict[str, Any] = {"accepted": self.accepted, "duplicates": self.duplicates, "lastSeq": self.last_seq}
        if self.stop_reason is not None:
            answer["stopReason"] = self.stop_reason
        if self.provider_stop_reason is not None:
            answer["providerStopReason"] = self.provider_stop_reason
        return answer


class Progress:
    """What a streamed body has stored so far (reported in the answer, or in a problem)."""

    def __init__(self) -> None:
        self.accepted = 0
        self.duplicates = 0
        self.last_seq: int | None = None

    def add(self, outcome: AppendOutcome) -> None:
        self.accepted += outcome.accepted
        self.duplicates += outcome.duplicates
        self.last_seq = outcome.last_seq

    def stored(self) -> Stored:
        return Stored(self.accepted, self.duplicates, self.last_seq)

    def annotate(self, error: LastwordError) -> LastwordError:
        """Tell the producer what was kept before the failure."""
        error.extra.setdefault("accepted", self.accepted)
        error.extra.setdefault("duplicates", self.duplicates)
        if self.last_seq is not None:
            error.extra.setdefault("lastSeq", self.last_seq)
        return error
