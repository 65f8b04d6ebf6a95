"""``lastword audit``: how often children leave histories that break naive replay.

Reads stored runs through the client (``list_runs``, then ``messages`` in both formats) and
reports, per run, what the provider-safe transcript (SPEC §12) had to leave out or repair:
empty messages, blank text, unsigned reasoning, unanswered tool calls, unknown results. The
counting (:func:`tally`, :func:`report_lines`) is pure; only :func:`audit_runs` talks to the
service (a refusal raises :class:`~lastword.client.core.LastwordAPIError`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from lastword.client.core import LastwordAPIError, LastwordClient
from lastword.rules.transcript import TRANSCRIPT_FORMATS
from lastword.schemas import Run, TranscriptPage

RUNS_PAGE = 200


@dataclass(slots=True)
class FormatTally:
    """What one format's transcript of a run left out (by reason) and added (by reason)."""

    omitted: Counter[str] = field(default_factory=Counter)
    inserted: Counter[str] = field(default_factory=Counter)

    def __bool__(self) -> bool:
        return bool(self.omitted or self.inserted)


@dataclass(slots=True)
class RunAudit:
    run_id: str
    agent: str | None
    status: str
    formats: dict[str, FormatTally]

    @property
    def clean(self) -> bool:
        return not any(self.formats.values())


def tally(transcript: TranscriptPage | Mapping[str, Any]) -> FormatTally:
    """Count a ``/messages`` answer's omissions and insertions by reason."""
    if isinstance(transcript, TranscriptPage):
        transcript = transcript.model_dump(exclude_none=True)
    counted = FormatTally()
    for entry in transcript.get("omitted", []):
        counted.omitted[str(entry["reason"])] += 1
    for entry in transcript.get("inserted") or []:
        counted.inserted[str(entry["reason"])] += 1
    return counted


def _counts(counter: Counter[str]) -> str:
    return ", ".join(f"{reason}={count}" for reason, count in sorted(counter.items()))


def report_lines(audits: list[RunAudit], since_hours: float) -> Iterator[str]:
    """The human report: one line per run (more for a run that needed repairs), then a total."""
    totals: dict[str, FormatTally] = {name: FormatTally() for name in TRANSCRIPT_FORMATS}
    for audit in audits:
        agent = audit.agent or "-"
        if audit.clean:
            yield f"{audit.run_id}  agent={agent}  {audit.status}: clean"
            continue
        yield f"{audit.run_id}  agent={agent}  {audit.status}:"
        for name, counted in audit.formats.items():
            totals[name].omitted.update(counted.omitted)
            totals[name].inserted.update(counted.inserted)
            parts = []
            if counted.omitted:
                parts.append("omitted " + _counts(counted.omitted))
            if counted.inserted:
                parts.append("inserted " + _counts(counted.inserted))
            yield f"  {name + ':':<10} " + ("; ".join(parts) or "nothing")
    repaired = sum(1 for audit in audits if not audit.clean)
    yield (f"audited {len(audits)} run(s) created in the last {since_hours:g} h: "
           f"{repaired} needed omissions or repairs")
    for name, counted in totals.items():
        if counted:
            yield f"  {name + ':':<10} omitted {_counts(counted.omitted) or 'nothing'}; " \
                  f"inserted {_counts(counted.inserted) or 'nothing'}"


def _created(run: Run) -> float:
    return datetime.fromisoformat(run.createdAt.replace("Z", "+00:00")).timestamp()


def _tallies(client: LastwordClient, run_id: str) -> dict[str, FormatTally] | None:
    """Each format's tally of the run's transcript; None for a run deleted since it was listed."""
    formats: dict[str, FormatTally] = {}
    for name in TRANSCRIPT_FORMATS:
        try:
            formats[name] = tally(client.messages(run_id, name))
        except LastwordAPIError as error:
            if error.status in (404, 410):
                return None
            raise
    return formats


def audit_runs(client: LastwordClient, *, since_hours: float, now: float) -> list[RunAudit]:
    """Audit every run created in the last ``since_hours`` hours, newest first."""
    cutoff = now - since_hours * 3600
    audits: list[RunAudit] = []
    cursor: str | None = None
    while True:
        page = client.list_runs(limit=RUNS_PAGE, cursor=cursor)
        for run in page.runs:
            if _created(run) < cutoff:
                return audits  # newest first: every later run is older still
            formats = _tallies(client, run.runId)
            if formats is not None:
                audits.append(RunAudit(run.runId, run.agent, run.status, formats))
        if not page.nextCursor:
            return audits
        cursor = page.nextCursor
