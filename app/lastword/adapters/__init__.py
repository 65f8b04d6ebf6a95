"""Native stream adapters (SPEC §13): a provider's own stream in, the session events of §4 out.

``ADAPTERS`` maps each ``{format}`` of ``POST /v1/runs/{runId}/ingest/{format}`` to its
adapter class; :func:`translate` runs one over a whole list of provider events (the demo, the
client's tests and the benchmark use it; the endpoint feeds the adapter as the body streams).
"""

from __future__ import annotations

from collections.abc import Iterable

import orjson

from lastword.adapters.acp import ACPAdapter
from lastword.adapters.anthropic import AnthropicAdapter
from lastword.adapters.base import Event, NotTheFormat, ProviderAdapter, StreamStop
from lastword.adapters.claude_code import ClaudeCodeAdapter
from lastword.adapters.claude_code_transcript import ClaudeCodeTranscriptAdapter
from lastword.adapters.cli_base import CliAdapter
from lastword.adapters.codex import CodexAdapter
from lastword.adapters.openai_responses import OpenAIResponsesAdapter
from lastword.adapters.opencode import OpencodeAdapter

ADAPTERS: dict[str, type[ProviderAdapter]] = {
    adapter.format: adapter for adapter in (AnthropicAdapter, OpenAIResponsesAdapter, ACPAdapter)
}
PROVIDER_FORMATS = tuple(ADAPTERS)
#: Agent CLIs' standard output (SPEC §16), by ``{format}`` of the same endpoint: the one list of
#: the CLI formats (the endpoint's, ``lastword run``'s and the client's come from here).
CLI_ADAPTERS: dict[str, type[CliAdapter]] = {
    adapter.format: adapter for adapter in (ClaudeCodeAdapter, CodexAdapter, OpencodeAdapter, ClaudeCodeTranscriptAdapter)}
CLI_FORMATS = tuple(CLI_ADAPTERS)
#: Every ``{format}`` of ``POST /v1/runs/{runId}/ingest/{format}``.
INGEST_FORMATS = PROVIDER_FORMATS + CLI_FORMATS
#: ``lastword run --format auto``: the CLI format of a command, by the command's name.
#: (A transcript is no command's output: its ``command`` is empty.)
FORMATS_BY_COMMAND = {adapter.command: adapter.format for adapter in CLI_ADAPTERS.values() if adapter.command}


def translate(
    format: str, events: Iterable[Event], *, end: bool = False, idempotency_key: str | None = None
) -> tuple[list[Event], StreamStop]:
    """The §4 events of a whole provider stream, and how it stopped."""
    adapter = ADAPTERS[format](idempotency_key)
    made: list[Event] = []
    for index, event in enumerate(events):
        made.extend(adapter.feed(index, event))
    made.extend(adapter.finish(end=end))
    adapter.name_events()
    # A message's source holds its raw events as JSON fragments (ProviderAdapter.kept_raw):
    # read back, the caller gets plain values, as a reader of the stored event would.
    made = [orjson.loads(orjson.dumps(event)) if event["type"] == "assistant/message" else event for event in made]
    return made, adapter.stop


__all__ = ["ADAPTERS", "CLI_ADAPTERS", "CLI_FORMATS", "FORMATS_BY_COMMAND", "INGEST_FORMATS", "PROVIDER_FORMATS", "NotTheFormat", "ProviderAdapter", "StreamStop", "translate"]
