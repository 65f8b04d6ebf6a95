"""Record Claude Code's stdout **and** the transcripts it writes (SPEC §19).

    python tests/cli_children/record_transcripts.py [SCENARIO ...]

For each scenario (default: the subagent ones), runs Claude Code headless against the scripted
model server (``record.run_cli``) and keeps, under ``fixtures/claude-code-transcript/<scenario>/``:
``stdout.ndjson`` (what it printed), ``session.jsonl`` (``<config>/projects/<cwd slug>/<session>.jsonl``)
and ``subagents/agent-<agentId>.jsonl`` with its ``.meta.json``. The machine's temporary
directory is replaced by ``$TMP`` (and its slug in the project directory's name by ``-$TMP``),
so the fixtures do not change with the machine.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # run as a script from anywhere: the repository's root

from tests.cli_children.record import run_cli  # noqa: E402

OUT = HERE / "fixtures" / "claude-code-transcript"
DEFAULT = ("subagent_split", "subagent_cut")


def _scrub(text: str, tmp: str) -> str:
    slug = "".join(c if c.isalnum() else "-" for c in tmp)
    return text.replace(tmp, "$TMP").replace(slug, "-$TMP")


def record(scenario: str) -> Path:
    details: dict[str, object] = {}
    out, _ = run_cli("claude-code", scenario, keep=True, details=details)
    tmp = str(details["tmp"])
    try:
        target = OUT / scenario
        shutil.rmtree(target, ignore_errors=True)
        (target / "subagents").mkdir(parents=True)
        (target / "stdout.ndjson").write_text(_scrub(out.decode(), tmp))
        projects = Path(tmp) / "home" / ".claude" / "projects"
        for session in projects.glob("*/*.jsonl"):
            (target / "session.jsonl").write_text(_scrub(session.read_text(), tmp))
            for agent in sorted((session.parent / session.stem / "subagents").glob("agent-*")):
                (target / "subagents" / agent.name).write_text(_scrub(agent.read_text(), tmp))
        return target
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    for name in sys.argv[1:] or DEFAULT:
        print("recorded", record(name), file=sys.stderr)
