"""The fixed limits: bounds that follow from formats, not from configuration.

Configurable limits (request body, event size, batch length, page size, ``?wait=``) are fields
of :class:`lastword.settings.Settings` and every check reads them from there; the ones here are
the same for every deployment, and each is written only here. docs/ERRORS.md names the problem
each produces.
"""

from __future__ import annotations

#: The largest value a database integer holds: ids, seqs and cursors above it were never given
#: out, and a query naming one is refused (422) rather than sent to the database.
MAX_INT64 = 2**63 - 1

#: Longest agent name (characters).
MAX_AGENT_LENGTH = 200

#: Longest ``eventId`` (characters), on every ingest path (events, chunk text, fast path).
MAX_EVENT_ID_LENGTH = 200

#: Largest token count one event may carry: above 2**53 - 1 a count is not exact in JSON
#: readers (JavaScript), and is no real count.
MAX_TOKEN_COUNT = 2**53 - 1

#: The usage ceiling: a turn's summed token counts saturate here rather than fail (the turn can
#: always end), at the same bound as each count, so JavaScript reads every total exactly.
MAX_USAGE_TOTAL = MAX_TOKEN_COUNT

#: Longest lease (seconds): "now + lease" stays a time a date can show (about 31 years).
MAX_LEASE_SECONDS = 1e9
