"""Parents written with an agent SDK put their children's streams into lastword (SPEC §19).

* :mod:`lastword.integrations.claude_agent_sdk`: ``query()`` and ``ClaudeSDKClient`` as the Claude
  Agent SDK has them, each child turn streamed into its run as Claude Code's stream-json lines
  (``pip install 'lastword[claude-agent-sdk]'``).
* :mod:`lastword.integrations.openai_agents`: run hooks for the OpenAI Agents SDK that stream each
  agent used as a tool, or handed off to, into a child run as §4 events
  (``pip install 'lastword[openai-agents]'``).

Both use only the SDKs' public APIs and lastword's client; neither imports a server module (an
import-linter contract in ``pyproject.toml`` holds them to it). A turn is one streamed request,
and it is always ended: by the child's own last line when it printed one, else with the stop
reason of what happened to the SDK call (``cancelled``, or ``error`` naming the exception).
"""
