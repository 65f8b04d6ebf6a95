"""What the parent-SDK tests share: the Claude Agent SDK's options for a fake model, and summaries.

The Claude Agent SDK runs the Claude Code it bundles; pointed at a scripted model server
(``tests/cli_children/fake_models.py``) with ``ANTHROPIC_BASE_URL`` and its configuration in a
temporary ``CLAUDE_CONFIG_DIR``, it needs no network and no account.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from claude_agent_sdk import AssistantMessage, ClaudeAgentOptions, ResultMessage, TextBlock, ToolUseBlock, UserMessage


def claude_options(model_url: str, home: Path, **fields: Any) -> ClaudeAgentOptions:
    """Options that run the bundled Claude Code against the fake model at ``model_url``."""
    env = {
        "ANTHROPIC_BASE_URL": model_url, "ANTHROPIC_API_KEY": "fake", "HOME": str(home),
        "CLAUDE_CONFIG_DIR": str(home / ".claude"), "DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_MAX_RETRIES": "2", "CLAUDE_CODE_OVERLOADED_RETRY_BASE_DELAY_MS": "200",
        "CLAUDE_CODE_OVERLOADED_RETRY_MAX_DELAY_MS": "1000", "CLAUDE_CODE_OVERLOADED_RETRY_MAX_WAIT_MS": "5000",
        "IS_SANDBOX": "1",
    }
    work = home / "work"
    work.mkdir(parents=True, exist_ok=True)
    return ClaudeAgentOptions(env=env, model="claude-sonnet-4-5", cwd=str(work), permission_mode="bypassPermissions",
                              allowed_tools=["Bash", "Agent", "Task"], **fields)


def summary(message: Any) -> tuple[Any, ...]:
    """What a caller reads of a message, without its ids, times and costs (they differ per run)."""
    if isinstance(message, AssistantMessage):
        return ("assistant", message.model, message.parent_tool_use_id is not None, message.error,
                tuple(block.text if isinstance(block, TextBlock) else
                      (block.name, tuple(sorted(block.input))) if isinstance(block, ToolUseBlock) else
                      type(block).__name__ for block in message.content))
    if isinstance(message, UserMessage):
        content = message.content
        return ("user", message.parent_tool_use_id is not None,
                content if isinstance(content, str) else tuple(type(block).__name__ for block in content))
    if isinstance(message, ResultMessage):
        return ("result", message.subtype, message.is_error, message.result, message.num_turns)
    return (type(message).__name__, getattr(message, "subtype", None))
