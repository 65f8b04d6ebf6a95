#!/usr/bin/env python3
"""Record what real agent CLIs print on stdout in headless JSON mode.

Each CLI runs against a scripted fake model server (fake_models.py) on 127.0.0.1,
in a fresh temporary HOME / config dir and working dir, with telemetry,
auto-update and other network features switched off.

    python tests/cli_children/record.py [--cli NAME] [--scenario NAME] [--keep]

writes fixtures/<cli>/<scenario>.ndjson (stdout as printed) and
fixtures/<cli>/<scenario>.meta.json (version, argv, exit code, stderr tail,
model requests made).  ``run_cli()`` re-runs one scenario live for a test.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from collections.abc import Callable
from typing import Any

HERE = Path(__file__).resolve().parent
# importable both as a script (python tests/cli_children/record.py) and as tests.cli_children.record
sys.path.insert(0, str(HERE.parents[1]))
from tests.cli_children import fake_models  # noqa: E402

BIN = HERE / "node_modules" / ".bin"
FIXTURES = HERE / "fixtures"
PROMPT = "Say hello."
TIMEOUT = 90

# which fake flavour each CLI talks to, and which scenarios apply to it
COMMON = ["completion", "max_tokens_partial", "tool_then_empty_max_tokens", "tool_then_empty_end_turn",
          "continued_after_ceiling", "http_500_mid_run", "sse_error_mid_stream"]
CLAUDE = ["http_529_mid_run", "subagent", "subagent_foreground", "tool_cut_at_ceiling", "tool_cut_max_turns",
          "resume"]
CLIS: dict[str, dict[str, Any]] = {
    "claude-code": {"flavour": "anthropic", "scenarios": COMMON + CLAUDE},
    "claude-code-partial": {"flavour": "anthropic", "scenarios": COMMON + CLAUDE},
    "codex": {"flavour": "openai-responses",
              "scenarios": COMMON + ["sse_failed_mid_stream", "codex_shell_then_final", "codex_retry_repeat",
                                     "text_then_command", "resume"]},
    "opencode": {"flavour": "openai-chat", "scenarios": COMMON + ["subagent", "tool_cut_then_step"]},
    # opencode through its Anthropic provider (@ai-sdk/anthropic, bundled) against the Messages fake
    "opencode-anthropic": {"flavour": "anthropic", "scenarios": ["completion", "tool_cut_then_step"]},
}
PACKAGES = {"claude-code": "@anthropic-ai/claude-code", "claude-code-partial": "@anthropic-ai/claude-code",
            "codex": "@openai/codex", "opencode": "opencode-ai", "opencode-anthropic": "opencode-ai"}
#: Extra arguments of a scenario (Claude Code): one turn only, so the cut call ends the run.
CLAUDE_EXTRA = {"tool_cut_max_turns": ["--max-turns", "1"]}
#: Scenarios run twice on one session: the second invocation resumes the first's session and
#: its stdout is written to ``<scenario>.turn2.ndjson``.
TWO_TURNS = frozenset({"resume"})
SECOND_PROMPT = "Say it again."


def cli_version(cli: str) -> str:
    pkg = HERE / "node_modules" / PACKAGES[cli] / "package.json"
    return str(json.loads(pkg.read_text())["version"])


def _base_env(tmp: Path) -> dict[str, Any]:
    home = tmp / "home"
    for d in ("home", "home/.config", "home/.local/share", "home/.cache", "home/.local/state"):
        (tmp / d).mkdir(parents=True, exist_ok=True)
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "USER": os.environ.get("USER", "root"),
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "NO_COLOR": "1",
        "TMPDIR": str(tmp),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local/share"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_STATE_HOME": str(home / ".local/state"),
        # never let a CLI find a real proxy or key from the caller's environment
        "NO_PROXY": "127.0.0.1,localhost",
    }


def _setup_claude(cli: str, url: str, tmp: Path, work: Path, env: dict[str, Any], scenario: str = "") -> list[str]:
    env.update({
        "ANTHROPIC_BASE_URL": url,
        "ANTHROPIC_API_KEY": "fake",
        "CLAUDE_CONFIG_DIR": str(tmp / "home" / ".claude"),
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_UPDATES": "1",
        "DISABLE_GROWTHBOOK": "1",
        "CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY": "1",
        "CLAUDE_CODE_DISABLE_OFFICIAL_MARKETPLACE_AUTOINSTALL": "1",
        "CLAUDE_CODE_MAX_RETRIES": "2",
        "CLAUDE_CODE_OVERLOADED_RETRY_BASE_DELAY_MS": "200",
        "CLAUDE_CODE_OVERLOADED_RETRY_MAX_DELAY_MS": "1000",
        "CLAUDE_CODE_OVERLOADED_RETRY_MAX_WAIT_MS": "5000",
        "API_TIMEOUT_MS": "30000",
        "IS_SANDBOX": "1",
    })
    argv = [str(BIN / "claude"), "-p", PROMPT, "--output-format", "stream-json", "--verbose",
            "--model", "claude-sonnet-4-5", "--allowedTools", "Bash", "--dangerously-skip-permissions"]
    if cli == "claude-code-partial":
        argv.append("--include-partial-messages")
    return argv + CLAUDE_EXTRA.get(scenario, [])


def _setup_codex(url: str, tmp: Path, work: Path, env: dict[str, Any]) -> list[str]:
    codex_home = tmp / "codex_home"
    codex_home.mkdir()
    (codex_home / "config.toml").write_text(f"""\
model = "gpt-5.5"
model_provider = "fake"
check_for_update_on_startup = false

[model_providers.fake]
name = "fake"
base_url = "{url}/v1"
wire_api = "responses"
env_key = "FAKE_API_KEY"
request_max_retries = 1
stream_max_retries = 1
stream_idle_timeout_ms = 10000

[features]
plugins = false
remote_plugin = false
plugin_sharing = false
apps = false
in_app_updates = false
api_key_model_discovery = false
unbounded_connection_retries = false

[analytics]
enabled = false

[feedback]
enabled = false

[otel]
exporter = "none"
""")
    env.update({"CODEX_HOME": str(codex_home), "FAKE_API_KEY": "fake", "RUST_LOG": "warn"})
    return [str(BIN / "codex"), "exec", "--json", "--skip-git-repo-check",
            "--dangerously-bypass-approvals-and-sandbox", "-C", str(work), PROMPT]


def _setup_opencode(cli: str, url: str, tmp: Path, work: Path, env: dict[str, Any]) -> list[str]:
    cfg: dict[str, Any] = {
        "$schema": "https://opencode.ai/config.json",
        "autoupdate": False,
        "share": "disabled",
        "model": "fake/fake-model",
        "small_model": "fake/fake-model",
        "provider": {"fake": {
            "npm": "@ai-sdk/openai-compatible",
            "name": "Fake",
            "options": {"baseURL": url + "/v1", "apiKey": "fake"},
            "models": {"fake-model": {"name": "Fake model", "tool_call": True,
                                      "limit": {"context": 100000, "output": 4096}}},
        }},
        "permission": {"bash": "allow", "edit": "allow", "webfetch": "deny", "external_directory": "allow"},
    }
    if cli == "opencode-anthropic":
        cfg["provider"]["fake"]["npm"] = "@ai-sdk/anthropic"
    path = tmp / "opencode.json"
    path.write_text(json.dumps(cfg, indent=1))
    env.update({
        "OPENCODE_CONFIG": str(path),
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
        "OPENCODE_DISABLE_SHARE": "1",
        "OPENCODE_DISABLE_CLAUDE_CODE": "1",
        "OPENCODE_DISABLE_EXTERNAL_SKILLS": "1",
        "OPENCODE_DISABLE_PROJECT_CONFIG": "1",
        "OPENCODE_DISABLE_EMBEDDED_WEB_UI": "1",
    })
    return [str(BIN / "opencode"), "run", "--format", "json", PROMPT]


def _resume_argv(cli: str, argv: list[str], first: bytes) -> list[str]:
    """The second invocation of a two-turn scenario: the first's session resumed."""
    lines = [json.loads(line) for line in first.splitlines() if line.strip()]
    if cli == "codex":
        thread = next(line["thread_id"] for line in lines if line.get("type") == "thread.started")
        return [*argv[:-1], "resume", thread, SECOND_PROMPT]
    session = next(line["session_id"] for line in lines if "session_id" in line)
    return [argv[0], "-p", SECOND_PROMPT, "--resume", session, *argv[3:]]


def run_cli(cli: str, scenario: str, timeout: float = TIMEOUT, keep: bool = False,
            details: dict[str, Any] | None = None, env_extra: dict[str, str] | None = None,
            setup: Callable[[Path], None] | None = None,
            wrap: Callable[[list[str]], list[str]] | None = None) -> tuple[bytes, int]:
    """Run one CLI x scenario against its fake; return (stdout bytes, exit code).

    ``details``, when given, is filled with argv, stderr, the fake's request log, etc.; for a
    two-turn scenario also ``turn2`` = (argv, stdout, exit code, stderr) of the resumed run.
    ``env_extra`` is added to the CLI's environment; ``setup(tmp)`` runs before it starts (to
    write settings under ``tmp/home``). ``wrap(argv)`` gives the command actually run (the CLI under
    ``lastword run``, say); its stdout is then the wrapper's.
    """
    spec = CLIS[cli]
    tmp = Path(tempfile.mkdtemp(prefix=f"cli-{cli}-{scenario}-"))
    work = tmp / "work"
    work.mkdir()
    env = _base_env(tmp)
    server = fake_models.start(scenario, spec["flavour"])
    try:
        if cli.startswith("claude-code"):
            argv = _setup_claude(cli, server.url, tmp, work, env, scenario)
        elif cli == "codex":
            argv = _setup_codex(server.url, tmp, work, env)
        else:
            argv = _setup_opencode(cli, server.url, tmp, work, env)
        env.update(env_extra or {})
        if setup is not None:
            setup(tmp)
        if wrap is not None:
            argv = wrap(argv)
        t0 = time.monotonic()
        try:
            p = subprocess.run(argv, cwd=work, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                               timeout=timeout, start_new_session=True)
            out, err, rc = p.stdout, p.stderr, p.returncode
        except subprocess.TimeoutExpired as e:
            out, err, rc = e.stdout or b"", (e.stderr or b"") + b"\n[record.py: timed out]", 124
        elapsed = time.monotonic() - t0
        if scenario in TWO_TURNS and details is not None:
            again = _resume_argv(cli, argv, out)
            p = subprocess.run(again, cwd=work, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                               timeout=timeout, start_new_session=True)
            details["turn2"] = (again, p.stdout, p.returncode, p.stderr)
        if details is not None:
            details.update(argv=argv, stderr=err, elapsed=elapsed, tmp=str(tmp), log=list(server.log),
                           requests=list(server.requests), url=server.url)
        return out, rc
    finally:
        server.close()
        if not keep:
            shutil.rmtree(tmp, ignore_errors=True)


def _scrub(argv: list[str], url: str) -> list[str]:
    return [a.replace(str(HERE), "tests/cli_children").replace(url, "http://127.0.0.1:PORT") for a in argv]


def record(cli: str, scenario: str, keep: bool = False) -> dict[str, Any]:
    d: dict[str, Any] = {}
    out, rc = run_cli(cli, scenario, keep=keep, details=d)
    dest = FIXTURES / cli
    dest.mkdir(parents=True, exist_ok=True)
    (dest / f"{scenario}.ndjson").write_bytes(out)
    err_tail = d["stderr"].decode("utf-8", "replace")[-2000:]
    meta = {
        "cli": cli,
        "package": PACKAGES[cli],
        "version": cli_version(cli),
        "scenario": scenario,
        "flavour": CLIS[cli]["flavour"],
        "argv": _scrub(d["argv"], d["url"]),
        "exit_code": rc,
        "elapsed_s": round(d["elapsed"], 1),
        "stdout_lines": out.count(b"\n"),
        "model_requests": len(d["requests"]),
        "requests": [{k: e.get(k) for k in ("method", "path", "stream", "lane", "step") if k in e}
                     for e in d["log"]],
        "stderr_tail": err_tail.replace(d["tmp"], "$TMP"),
    }
    if "turn2" in d:
        again, out2, rc2, err2 = d["turn2"]
        (dest / f"{scenario}.turn2.ndjson").write_bytes(out2)
        meta["turn2"] = {"argv": _scrub(again, d["url"]), "exit_code": rc2, "stdout_lines": out2.count(b"\n"),
                         "stderr_tail": err2.decode("utf-8", "replace")[-2000:].replace(d["tmp"], "$TMP")}
    (dest / f"{scenario}.meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    if keep:
        (Path(d["tmp"]) / "requests.json").write_text(json.dumps(d["requests"], indent=1))
        print("kept", d["tmp"], file=sys.stderr)
    return meta


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cli", help="claude-code (both variants), claude-code-partial, codex, opencode, "
                                   "opencode-anthropic")
    ap.add_argument("--scenario")
    ap.add_argument("--keep", action="store_true", help="keep temp dirs and request bodies")
    a = ap.parse_args()
    for cli, spec in CLIS.items():
        if a.cli and not (cli == a.cli or (a.cli == "claude-code" and cli.startswith("claude-code"))):
            continue
        for sc in spec["scenarios"]:
            if a.scenario and sc != a.scenario:
                continue
            m = record(cli, sc, keep=a.keep)
            print(f"{cli:20} {sc:28} rc={m['exit_code']:<4} lines={m['stdout_lines']:<3} "
                  f"model_requests={m['model_requests']} {m['elapsed_s']}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
