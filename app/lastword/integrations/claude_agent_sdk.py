"""The Claude Agent SDK's ``query()`` and ``ClaudeSDKClient``, each child turn streamed into its lastword run.

``pip install 'lastword[claude-agent-sdk]'``, then use these where you used the SDK's own::

    from lastword import AsyncLastwordClient
    from lastword.integrations.claude_agent_sdk import query

    async with AsyncLastwordClient("http://127.0.0.1:8000") as lw:
        async for message in query(prompt="fix the test", options=options, lastword=lw, run_id="fix-1"):
            ...                                   # the SDK's own messages, unchanged
        result = await lw.result("fix-1")         # the child's last word (SPEC §5/§16)

Each turn (a ``query()`` call; a ``ClaudeSDKClient.query()`` up to its ``ResultMessage``) is one
streamed ``POST /v1/runs/{runId}/ingest/claude-code``: every message is written as the line Claude
Code printed (:mod:`lastword.integrations.claude_lines`, which says what the SDK's typed messages
lose and how it is made up for) the moment the SDK yields it, so the run, its subagents' child runs
(``{runId}.{tool_use_id}``) and their subscribers follow the child live. The turn is always ended:
by the CLI's ``result`` line when it printed one (its stop reason as §16 reads it, also when the SDK
then raises ``ResultError`` for it), else ``cancelled`` when the caller cancelled or left the
iteration early or interrupted the client, else ``error`` naming the exception the SDK raised.
The caller gets the SDK's messages and exceptions as the SDK gave them: the same objects, in the
same order, the same exception raised. Only if lastword itself cannot take the turn (it refused a
line, or stayed unreachable) does the call raise lastword's error once the SDK has finished without
one of its own (an SDK exception is never replaced; lastword's trouble is added to it as a note).

With ``include_partial_messages`` in the options, the text deltas reach lastword (and its
subscribers) as they are streamed, and each reply's stop reason with them.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Mapping
from typing import Any, cast

import claude_agent_sdk
from claude_agent_sdk import ClaudeAgentOptions, Message, ResultMessage, Transport

from lastword.client.aio import AsyncLastwordClient
from lastword.integrations.claude_lines import LineWriter
from lastword.integrations.turn_stream import KEEPALIVE, TurnStream, end_open_turn

__all__ = ["ClaudeSDKClient", "query"]

FORMAT = "claude-code"
NAME = "claude-agent-sdk"


class _Turn:
    """One child turn on its way into the run: its lines, and how it ended."""

    def __init__(self, client: AsyncLastwordClient, run_id: str, writer: LineWriter, keepalive: float) -> None:
        self._client = client
        self.run_id = run_id
        self._writer = writer
        self._stream = TurnStream(client, run_id, FORMAT, keepalive=keepalive)
        self.finished = False

    def take(self, message: Message) -> None:
        for line in self._writer.lines(message):
            self._stream.append(line)

    async def finish(self, *, cancelled: bool = False, raised: BaseException | None = None) -> None:
        """End the body; end the turn if its lines did not. Raises lastword's own failure."""
        if self.finished:
            return
        self.finished = True
        for line in self._writer.held():
            self._stream.append(line)
        delivery = await self._stream.finish()
        await end_open_turn(self._client, self.run_id, delivery, cancelled=cancelled, raised=raised, name=NAME)
        if delivery.failure is not None:
            raise delivery.failure
        if delivery.refusal is not None and delivery.refusal.code != "run_ended":
            raise delivery.refusal

    async def finish_after(self, raised: BaseException) -> None:
        """Finish after the SDK call ended by ``raised``; lastword's trouble becomes a note on it."""
        cancelled = not isinstance(raised, Exception)  # CancelledError, GeneratorExit, KeyboardInterrupt
        try:
            await self.finish(cancelled=cancelled, raised=None if cancelled else raised)
        except Exception as trouble:
            raised.add_note(f"lastword could not keep the turn of run {self.run_id}: {trouble!r}")


async def _create_run(client: AsyncLastwordClient, run_id: str | None, fields: Mapping[str, Any]) -> str:
    run = await client.create_run(run_id, **fields)
    return run.runId


async def query(
    *, prompt: str | AsyncIterable[dict[str, Any]], options: ClaudeAgentOptions | None = None,
    transport: Transport | None = None, lastword: AsyncLastwordClient, run_id: str | None = None,
    parent_run_id: str | None = None, agent: str | None = None, selection: Mapping[str, Any] | None = None,
    metadata: Mapping[str, Any] | None = None, keepalive: float = KEEPALIVE,
) -> AsyncGenerator[Message, None]:
    """``claude_agent_sdk.query()``, its turn streamed into the run ``run_id`` (created, or made
    when None; ``parent_run_id``, ``agent``, ``selection``, ``metadata`` as ``create_run`` takes
    them). Yields the SDK's messages and raises its exceptions, unchanged."""
    created = await _create_run(lastword, run_id, {"parent_run_id": parent_run_id, "agent": agent,
                                                   "selection": selection, "metadata": metadata})
    turn = _Turn(lastword, created, LineWriter(), keepalive)
    # An async generator (declared an iterator): closed at once when the caller stops early.
    messages = cast(AsyncGenerator[Message, None],
                    claude_agent_sdk.query(prompt=prompt, options=options, transport=transport))
    try:
        async for message in messages:
            turn.take(message)
            yield message
    except BaseException as raised:
        # The SDK first (it stops Claude Code), then the turn: its end is the last thing done.
        await messages.aclose()
        await turn.finish_after(raised)
        raise
    await turn.finish()


class ClaudeSDKClient(claude_agent_sdk.ClaudeSDKClient):
    """``claude_agent_sdk.ClaudeSDKClient`` whose turns go into one continuable lastword run.

    The run ``run_id`` (made when None; ``.run_id`` after the first ``query()``) is created at the
    first ``query()``; each later ``query()`` starts its next turn. A turn's messages are streamed
    as ``receive_messages()``/``receive_response()`` yield them and it ends at its
    ``ResultMessage``; ``interrupt()`` and ``disconnect()`` end an open turn ``cancelled``, an
    exception raised while receiving ends it ``error``.
    """

    def __init__(
        self, options: ClaudeAgentOptions | None = None, transport: Transport | None = None, *,
        lastword: AsyncLastwordClient, run_id: str | None = None, parent_run_id: str | None = None,
        agent: str | None = None, selection: Mapping[str, Any] | None = None,
        metadata: Mapping[str, Any] | None = None, keepalive: float = KEEPALIVE,
    ) -> None:
        super().__init__(options, transport)
        self._lastword = lastword
        self.run_id = run_id
        self._fields = {"parent_run_id": parent_run_id, "agent": agent, "selection": selection,
                        "metadata": metadata, "mode": "continuable"}
        self._keepalive = keepalive
        self._writer = LineWriter()
        self._turn: _Turn | None = None
        self._turns = 0

    async def query(self, prompt: str | AsyncIterable[dict[str, Any]], session_id: str = "default") -> None:
        """Send the prompt as the SDK does, and start its turn in the run."""
        await self._start_turn()
        await super().query(prompt, session_id)

    async def _start_turn(self) -> None:
        if self._turn is not None and not self._turn.finished:
            return  # a prompt sent while the turn runs belongs to it
        if self._turns == 0:
            self.run_id = await _create_run(self._lastword, self.run_id, self._fields)
        else:
            assert self.run_id is not None
            await self._lastword.next_turn(self.run_id)
        self._turns += 1
        self._turn = _Turn(self._lastword, self.run_id, self._writer, self._keepalive)

    async def receive_messages(self) -> AsyncIterator[Message]:
        """The SDK's messages, unchanged; each is written into the open turn first."""
        try:
            async for message in super().receive_messages():
                turn = self._turn
                if turn is not None and not turn.finished:
                    turn.take(message)
                    if isinstance(message, ResultMessage):
                        await turn.finish()
                yield message
        except Exception as raised:
            if self._turn is not None and not self._turn.finished:
                await self._turn.finish_after(raised)
            raise

    async def interrupt(self) -> None:
        """Interrupt as the SDK does; the open turn ends ``cancelled``."""
        turn = self._turn
        if turn is not None and not turn.finished:
            await turn.finish(cancelled=True)
        await super().interrupt()

    async def disconnect(self) -> None:
        """Disconnect as the SDK does; an open turn ends ``cancelled``."""
        turn = self._turn
        try:
            await super().disconnect()
        finally:
            if turn is not None and not turn.finished:
                await turn.finish(cancelled=True)
