#!/usr/bin/env python3
"""Print one short line per stdout line of recorded fixtures (a reading aid).

    python tests/cli_children/summarize.py [fixtures/<cli>/<scenario>.ndjson ...]
    python tests/cli_children/summarize.py --table    # one row per fixture, for README.md
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _short(v: Any, n: int = 70) -> str:
    s = v if isinstance(v, str) else json.dumps(v)
    return s if len(s) <= n else s[: n - 3] + "..."


def _blocks(content: Any) -> str:
    out: list[str] = []
    for b in content if isinstance(content, list) else [content]:
        if not isinstance(b, dict):
            out.append(_short(b, 40))
        elif b.get("type") == "text":
            out.append(f"text={_short(b.get('text'), 60)!r}")
        elif b.get("type") == "tool_use":
            out.append(f"tool_use[{b.get('name')} {b.get('id')}]")
        elif b.get("type") == "tool_result":
            out.append(f"tool_result[{b.get('tool_use_id')} err={b.get('is_error')} "
                       f"{_short(b.get('content'), 40)!r}]")
        else:
            out.append(b.get("type", "?"))
    return ", ".join(out)


def describe(o: dict[str, Any]) -> str:
    t = o.get("type")
    # Claude Code
    if t == "system":
        extra = {k: o[k] for k in ("status", "error", "attempt", "retry_delay_ms", "error_status", "max_retries")
                 if k in o}
        return f"system/{o.get('subtype')} {json.dumps(extra) if extra else ''}"
    if t in ("assistant", "user") and "message" in o:
        m = o["message"]
        bits = [f"{t}", f"id={m.get('id')}" if m.get("id") else "", f"model={m.get('model')}" if m.get("model") else "",
                f"stop={m.get('stop_reason')}" if t == "assistant" else "",
                f"parent={o.get('parent_tool_use_id')}" if o.get("parent_tool_use_id") else "",
                "error=" + str(o.get("error")) if o.get("error") else "",
                "tool_use_result" if "tool_use_result" in o else "", _blocks(m.get("content"))]
        return " ".join(b for b in bits if b)
    if t == "stream_event":
        e = o["event"]
        d = e.get("delta", {})
        s = f"stream_event/{e.get('type')}"
        if "text" in d:
            s += f" {d['text']!r}"
        if "stop_reason" in d:
            s += f" stop={d['stop_reason']}"
        if e.get("content_block"):
            s += f" [{e['content_block'].get('type')}]"
        if o.get("parent_tool_use_id"):
            s += f" parent={o['parent_tool_use_id']}"
        return s
    if t == "result":
        return (f"result/{o.get('subtype')} is_error={o.get('is_error')} stop={o.get('stop_reason')} "
                f"turns={o.get('num_turns')} result={_short(o.get('result'), 80)!r}"
                + (f" errors={_short(o.get('errors'), 80)}" if o.get("errors") else ""))
    # Codex
    if t and t.startswith(("item.", "turn.", "thread.")) or t == "error":
        it = o.get("item") or {}
        bits = [t]
        if it:
            bits.append(f"{it.get('id')}:{it.get('type')}")
            for k in ("text", "command", "aggregated_output", "exit_code", "status", "message"):
                if k in it:
                    bits.append(f"{k}={_short(it[k], 50)!r}")
        for k in ("thread_id", "message", "error", "usage"):
            if k in o:
                bits.append(f"{k}={_short(o[k], 90)}")
        return " ".join(bits)
    # opencode
    if "part" in o:
        p = o["part"]
        bits = [f"{t}", f"part={p.get('type')}"]
        for k in ("text", "tool", "reason"):
            if k in p:
                bits.append(f"{k}={_short(p[k], 60)!r}")
        st = p.get("state")
        if isinstance(st, dict):
            bits.append(f"state={st.get('status')} out={_short(st.get('output', st.get('error', '')), 40)!r}")
        return " ".join(bits)
    return _short(o, 160)


def tag(o: dict[str, Any]) -> str:
    """A short name for a line's kind, as used in README.md's tables."""
    t = o.get("type")
    if t == "system":
        return f"system/{o.get('subtype')}"
    if t == "stream_event":
        return f"stream_event/{o['event']['type']}"
    if t in ("assistant", "user"):
        c = o["message"]["content"]
        kinds = ",".join(b.get("type", "?") for b in c) if isinstance(c, list) else "text"
        extra = "<synthetic>" if o["message"].get("model") == "<synthetic>" else ""
        extra += "(sub)" if o.get("parent_tool_use_id") else ""
        extra += "(isSynthetic)" if o.get("isSynthetic") else ""
        return f"{t}[{kinds}]{extra}"
    if t == "result":
        return f"result/{o.get('subtype')}"
    if isinstance(t, str) and t.startswith("item."):
        return f"{t}:{o['item']['type']}"
    return str(t)


def table() -> None:
    for cli_dir in sorted((HERE / "fixtures").iterdir()):
        cli = cli_dir.name
        print(f"\n### {cli}\n\n| scenario | exit | model requests | lines (runs collapsed) | final answer |")
        print("| --- | --- | --- | --- | --- |")
        for p in sorted(cli_dir.glob("*.ndjson")):
            lines = [json.loads(x) for x in p.read_text().splitlines() if x.strip()]
            seq: list[list[Any]] = []
            for o in lines:
                tg = tag(o)
                if seq and seq[-1][0] == tg:
                    seq[-1][1] += 1
                else:
                    seq.append([tg, 1])
            flow = " → ".join(f"{a}×{n}" if n > 1 else a for a, n in seq)
            meta = json.loads((p.parent / f"{p.stem.split('.')[0]}.meta.json").read_text())
            if p.stem.endswith(".turn2"):  # the resumed session's second invocation
                meta = {**meta, **meta["turn2"], "model_requests": "(of the first's)"}
            if cli.startswith("claude"):
                fin = "<br>".join(f"`{o['subtype']}` is_error={o['is_error']} terminal_reason={o.get('terminal_reason')} "
                                  f"stop_reason={o.get('stop_reason')}: {_short(o.get('result'), 80)!r}"
                                  for o in lines if o.get("type") == "result")
            elif cli == "codex":
                msgs = [o["item"]["text"] for o in lines
                        if o.get("type") == "item.completed" and o["item"]["type"] == "agent_message"]
                fin = f"last agent_message: {msgs[-1]!r}" if msgs else "no agent_message"
            else:
                texts = [o["part"]["text"] for o in lines if o.get("type") == "text"]
                fin = f"last text: {texts[-1]!r}" if texts else "no text"
            print(f"| {p.stem} | {meta['exit_code']} | {meta['model_requests']} | `{flow}` | {fin} |")


def main(paths: list[str]) -> None:
    if not paths:
        paths = sorted(str(p) for p in (HERE / "fixtures").glob("*/*.ndjson"))
    for p in paths:
        print(f"== {p}")
        for line in Path(p).read_text().splitlines():
            if not line.strip():
                continue
            try:
                print("  " + describe(json.loads(line)))
            except ValueError:
                print("  (not JSON) " + _short(line, 150))


if __name__ == "__main__":
    if sys.argv[1:] == ["--table"]:
        table()
    else:
        main(sys.argv[1:])
