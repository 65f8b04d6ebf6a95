"""The dashboard in a real browser: Debian's Chromium, headless, driven by Playwright.

Each test starts a real server, opens ``/dashboard`` and changes runs only through the API (or
the demo children), then looks at what the page shows, never reloading it. The browser is the
system's ``/usr/bin/chromium`` (``.ci/run`` installs it when missing); Playwright downloads
nothing. Without that browser these tests skip, unless ``LASTWORD_REQUIRE_BROWSER=1`` (set by
``.ci/run``) makes that a failure.

Screenshots go to ``test-artifacts/dashboard/`` (git-ignored; ``LASTWORD_TEST_ARTIFACTS``
moves it). ``LASTWORD_DOCS_SCREENSHOT=1`` also writes the README's ``docs/dashboard.png``.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from axe_playwright_python.sync_playwright import Axe
from lastword.cli.demo import run_scenario
from lastword.settings import Settings
from playwright import sync_api as playwright_api
from playwright.sync_api import expect

from tests.builders import create_run
from tests.servers import ServerProcess, threaded_server

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path(os.environ.get("LASTWORD_TEST_CHROMIUM", "/usr/bin/chromium"))
ARTIFACTS = Path(os.environ.get("LASTWORD_TEST_ARTIFACTS", ROOT / "test-artifacts")) / "dashboard"
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run"]
#: A laptop screen.
VIEWPORT = {"width": 1366, "height": 768}

pytestmark = [pytest.mark.browser, pytest.mark.slow]

expect.set_options(timeout=20_000)  # a shared 2-core machine: generous, never a speed claim


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        message = f"no Chromium at {CHROMIUM} (apt-get install -y chromium)"
        if os.environ.get("LASTWORD_REQUIRE_BROWSER") == "1":
            pytest.fail(message + "; LASTWORD_REQUIRE_BROWSER=1 makes this a failure", pytrace=False)
        pytest.skip(message)
    with playwright_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
        try:
            yield launched
        finally:
            launched.close()


class Tab:
    """A page on the dashboard that records the script errors it meets (a test fails on any)."""

    def __init__(self, browser: Any, url: str) -> None:
        self.context = browser.new_context(viewport=VIEWPORT)
        self.page: Any = self.context.new_page()
        self.errors: list[str] = []
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))
        self.page.goto(url)

    def row(self, run_id: str) -> Any:
        return self.page.locator(f'#tree [data-run-id="{run_id}"]')

    def shown_ids(self) -> list[str]:
        ids: list[str] = self.page.locator("#tree > li").evaluate_all("rows => rows.map(row => row.dataset.runId)")
        return ids

    def screenshot(self, name: str) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        self.page.screenshot(path=str(path))
        return path

    def close(self) -> None:
        self.context.close()
        assert self.errors == [], self.errors


def sqlite_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {"LASTWORD_DATABASE_URL": f"sqlite:///{tmp_path / 'lastword.db'}", "LASTWORD_KEEPALIVE_SECONDS": "1",
            "LASTWORD_LOG_LEVEL": "warning", **extra}


def push_text(api: httpx.Client, run_id: str, text: str) -> None:
    response = api.post(f"/v1/runs/{run_id}/chunks", json={"text": text})
    assert response.status_code == 200, response.text


def badge_colour(tab: Tab, run_id: str) -> str:
    colour: str = tab.row(run_id).locator(".badge").nth(1).evaluate("node => getComputedStyle(node).backgroundColor")
    return colour


def test_the_tree_live_text_stop_reasons_and_recovery_after_a_restart(browser: Any, tmp_path: Path) -> None:
    """Without a reload the page shows a parent's children as a tree, a running child's text as it
    grows, how the others ended (in colour and words), the truncated child's partial output and
    its errored tool result; after the server stops and restarts it resumes and shows what was
    ingested meanwhile, every chunk once and in order."""
    env = sqlite_env(tmp_path)
    server = ServerProcess(env, tmp_path).start()
    tab = Tab(browser, server.url + "/dashboard")
    page = tab.page
    try:
        expect(page.locator("#connection")).to_have_text("Live")
        page.evaluate("window.notReloaded = true")
        with httpx.Client(base_url=server.url, timeout=30) as api:
            parent = create_run(api, agent="planner")
            expect(tab.row(parent)).to_contain_text("planner")
            truncated = create_run(api, agent="demo:max-tokens-partial", parentRunId=parent)
            cancelled = create_run(api, agent="demo:cancelled-streaming", parentRunId=parent)
            running = create_run(api, agent="researcher", parentRunId=parent)
            run_scenario("max-tokens-partial", server.url, run_id=truncated)
            run_scenario("cancelled-streaming", server.url, run_id=cancelled)

            # The tree: the parent, then its children newest first, one level down.
            expect(tab.row(parent)).to_have_attribute("aria-expanded", "true")
            expect(tab.row(parent)).to_contain_text("3 children")
            for child in (truncated, cancelled, running):
                expect(tab.row(child)).to_have_attribute("aria-level", "2")
            assert tab.shown_ids() == [parent, running, cancelled, truncated]

            # How each ended, in words and in colour.
            expect(tab.row(truncated)).to_contain_text("Truncated")
            expect(tab.row(truncated)).to_contain_text("max tokens")
            expect(tab.row(cancelled)).to_contain_text("Cancelled")
            expect(tab.row(running)).to_contain_text("running")
            expect(tab.row(running)).not_to_contain_text("streaming…")  # nothing said it streams
            expect(tab.row(truncated)).to_contain_text("2.6k in · 4.2k out")
            plain = badge_colour(tab, running)  # a turn still running has no stop reason to flag
            assert plain == "rgba(0, 0, 0, 0)"
            assert len({badge_colour(tab, truncated), badge_colour(tab, cancelled), plain}) == 3

            # The running child's text, growing as it streams.
            tab.row(running).click()
            expect(page.locator("#d-live-sec")).to_be_visible()
            sent = ""
            for piece in ("Reading parse_config. ", "Two callers pass a path; ", "one passes a dict. "):
                push_text(api, running, piece)
                sent += piece
                expect(page.locator("#d-live")).to_have_text(sent)

            # The truncated child: the partial answer, and the parent's errored tool result.
            tab.row(truncated).click()
            partial = "Found three call sites of parse_config; two pass a path, one passes a dict."
            expect(page.locator("#d-verdict")).to_contain_text("Truncated: cut off at its output-token limit")
            expect(page.locator("#d-output pre").first).to_have_text(partial)
            expect(page.locator("#d-tool-flag")).to_have_text("isError: true")
            expect(page.locator("#d-tool")).to_contain_text("The subagent did not complete (stopReason: max_tokens)")
            expect(page.locator("#d-tool")).to_contain_text(partial)
            tab.screenshot("truncated-child")

            # The cancelled child kept the text it had only streamed.
            tab.row(cancelled).click()
            expect(page.locator("#d-output pre").first).to_have_text(
                "Draft summary: the migration touches 4 tables and needs a backfill for users.email")
            expect(page.locator("#d-tool")).to_contain_text("stopReason: cancelled")

            tab.row(running).click()
            expect(page.locator("#d-live")).to_have_text(sent)
            tab.screenshot("running-child")

        # The server goes away; meanwhile another process on the same database takes events.
        server.stop()
        expect(page.locator("#connection")).not_to_have_text("Live")
        away = ServerProcess(env, tmp_path).start()
        try:
            with httpx.Client(base_url=away.url, timeout=30) as other:
                for piece in ("While the page was away, ", "the child kept streaming."):
                    push_text(other, running, piece)
                    sent += piece
                assert other.post(f"/v1/runs/{running}/end", json={"stopReason": "max_tokens"}).status_code == 200
                late = create_run(other, agent="late-child", parentRunId=parent)
                run_scenario("completed", away.url, run_id=late)
        finally:
            away.stop()
        server.start()

        expect(page.locator("#connection")).to_have_text("Live")
        expect(tab.row(late)).to_contain_text("Completed")
        expect(tab.row(late)).to_have_attribute("aria-level", "2")
        expect(tab.row(running)).to_contain_text("Truncated")
        expect(page.locator("#d-live")).to_have_text(sent)  # every chunk once, in order
        expect(page.locator("#d-output pre").first).to_have_text(sent)
        expect(page.locator("#d-tool-flag")).to_have_text("isError: true")
        assert tab.shown_ids() == [parent, late, running, cancelled, truncated]
        assert page.evaluate("window.notReloaded") is True
        tab.screenshot("after-restart")

        # One that failed and one streaming now: the README's picture shows every kind of row.
        with httpx.Client(base_url=server.url, timeout=30) as api:
            failed = create_run(api, agent="critic", parentRunId=parent)
            assert api.post(f"/v1/runs/{failed}/end", json={
                "stopReason": "error", "error": {"message": "tool sandbox crashed"}}).status_code == 200
            streaming = create_run(api, agent="summariser", parentRunId=parent)
            push_text(api, streaming, "Summary so far: parse_config has three callers; ")
        expect(tab.row(failed)).to_contain_text("Failed")
        expect(tab.row(streaming)).to_contain_text("running")
        tab.row(truncated).click()
        expect(page.locator("#d-tool-flag")).to_have_text("isError: true")
        shot = tab.screenshot("dashboard")
        if os.environ.get("LASTWORD_DOCS_SCREENSHOT") == "1":
            (ROOT / "docs" / "dashboard.png").write_bytes(shot.read_bytes())
    finally:
        tab.close()
        server.stop()


def test_filters_search_link_and_keyboard(browser: Any, tmp_path: Path) -> None:
    """Status, stop-reason and agent filters narrow the list; typing filters by run id and Enter
    opens a run that is not on the page; a run's link opens it in a fresh tab; the tree is
    walked and opened with the keyboard alone."""
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'lastword.db'}", keepalive_seconds=1.0)
    with threaded_server(settings) as url, httpx.Client(base_url=url, timeout=30) as api:
        ended = {}
        for reason in ("completed", "max_tokens", "cancelled", "timeout", "error"):
            run_id = create_run(api, runId=f"run-{reason}", agent="writer" if reason != "error" else "critic")
            ended[reason] = run_id
            assert api.post(f"/v1/runs/{run_id}/end", json={"stopReason": reason}).status_code == 200
        create_run(api, runId="run-open", agent="critic")
        tab = Tab(browser, url + "/dashboard")
        page = tab.page
        try:
            expect(page.locator("#tree > li")).to_have_count(6)
            expect(tab.row("run-timeout")).to_contain_text("Timed out")
            expect(tab.row("run-error")).to_contain_text("Failed")

            page.select_option("#f-stop", "cancelled")
            expect(page.locator("#tree > li")).to_have_count(1)
            expect(tab.row("run-cancelled")).to_be_visible()
            assert "stopReason=cancelled" in page.url
            page.select_option("#f-stop", "")
            page.select_option("#f-status", "running")
            expect(page.locator("#tree > li")).to_have_count(1)
            expect(tab.row("run-open")).to_be_visible()
            page.select_option("#f-status", "")
            page.fill("#f-agent", "critic")
            page.locator("#f-agent").dispatch_event("change")
            expect(page.locator("#tree > li")).to_have_count(2)
            page.click("#clear")
            expect(page.locator("#tree > li")).to_have_count(6)

            # Live updates respect the filter in force.
            page.select_option("#f-stop", "max_tokens")
            expect(page.locator("#tree > li")).to_have_count(1)
            late = create_run(api, runId="run-late", agent="writer")
            assert api.post(f"/v1/runs/{late}/end", json={"stopReason": "max_tokens"}).status_code == 200
            expect(page.locator("#tree > li")).to_have_count(2)
            page.click("#clear")

            # Search: typing filters by id; Enter opens an id, fetched if the page lacks it.
            page.fill("#search", "time")
            expect(page.locator("#tree > li")).to_have_count(1)
            page.fill("#search", "")
            expect(page.locator("#tree > li")).to_have_count(7)
            page.fill("#search", "run-error")
            page.press("#search", "Enter")
            expect(page.locator("#d-title")).to_contain_text("run-error")
            expect(page.locator("#d-verdict")).to_contain_text("Failed")
            page.fill("#search", "no-such-run")
            page.press("#search", "Enter")
            expect(page.locator("#notice")).to_have_text("No run with id no-such-run.")
            page.fill("#search", "")

            # A link to a run opens it in another tab, straight away.
            page.fill("#search", "run-max_tokens")
            page.press("#search", "Enter")
            link = page.locator("#d-link").get_attribute("href")
            assert link is not None and link.endswith("#run=run-max_tokens")
            other = Tab(browser, link)
            try:
                expect(other.page.locator("#d-title")).to_contain_text("run-max_tokens")
                expect(other.page.locator("#d-tool-flag")).to_have_text("isError: true")
                expect(other.row("run-max_tokens")).to_have_attribute("aria-selected", "true")
            finally:
                other.close()

            # The keyboard alone: / to search, Tab into the tree, arrows, Enter.
            page.fill("#search", "")
            page.locator("#tree > li").first.focus()
            page.keyboard.press("Home")
            page.keyboard.press("ArrowDown")
            page.keyboard.press("ArrowDown")
            focused = page.evaluate("document.activeElement.dataset.runId")
            assert focused == tab.shown_ids()[2]
            page.keyboard.press("Enter")
            expect(page.locator("#d-title")).to_contain_text(focused)
            expect(tab.row(focused)).to_have_attribute("aria-selected", "true")
            page.keyboard.press("/")
            assert page.evaluate("document.activeElement.id") == "search"
        finally:
            tab.close()


def test_stop_icons_are_drawn_and_long_agent_names_can_be_read(browser: Any, tmp_path: Path) -> None:
    """Every stop reason's icon is inline SVG, drawn whatever fonts the system has (no symbol
    glyph such as U+29D7 that shows as an empty box), in the row and in the selected run's verdict;
    an agent name cut short in its row has the whole name as a tooltip."""
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'lastword.db'}", keepalive_seconds=1.0)
    reasons = ("completed", "max_tokens", "max_turns", "cancelled", "timeout", "error", "refusal")
    long_name = "research-assistant-for-the-quarterly-infrastructure-cost-review"
    with threaded_server(settings) as url, httpx.Client(base_url=url, timeout=30) as api:
        for reason in reasons:
            run_id = create_run(api, runId=f"run-{reason}", agent=long_name if reason == "timeout" else "writer")
            assert api.post(f"/v1/runs/{run_id}/end", json={"stopReason": reason}).status_code == 200
        tab = Tab(browser, url + "/dashboard#run=run-timeout")
        page = tab.page
        try:
            expect(page.locator("#tree > li")).to_have_count(len(reasons))
            for reason in reasons:
                badge = tab.row(f"run-{reason}").locator(".badge").nth(1)
                expect(badge.locator("svg")).to_have_count(1)
                box = badge.locator("svg").bounding_box()
                assert box is not None and box["width"] > 0 and box["height"] > 0, reason
                text: str = badge.evaluate("node => node.textContent")
                assert text.isascii(), (reason, text)
            expect(page.locator("#d-verdict")).to_contain_text("Timed out")
            expect(page.locator("#d-verdict svg")).to_have_count(1)
            assert page.locator("#d-verdict").evaluate("node => node.textContent").isascii()
            agent = tab.row("run-timeout").locator(".agent")
            expect(agent).to_have_attribute("title", long_name)
            assert agent.evaluate("node => node.scrollWidth > node.clientWidth"), "the name is not cut: a longer one"
        finally:
            tab.close()


def test_the_transcript_is_shown_where_the_server_has_one(browser: Any, tmp_path: Path) -> None:
    """An ended run shows its transcript when the server answers GET …/messages, and the page
    does without it (the section stays hidden, nothing breaks) on a server that does not."""
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'lastword.db'}", keepalive_seconds=1.0)
    with threaded_server(settings) as url, httpx.Client(base_url=url, timeout=30) as api:
        run_id = create_run(api, agent="replayed")
        events = [
            {"type": "user/message", "message": {"content": "Find the callers of parse_config."}},
            {"type": "assistant/message", "message": {"content": [{"type": "text", "text": "Three callers."}]}},
            {"type": "turn/end", "stopReason": "end_turn"},
        ]
        assert api.post(f"/v1/runs/{run_id}/events", json=events).status_code == 200
        has_transcript = api.get(f"/v1/runs/{run_id}/messages", params={"format": "anthropic"}).status_code == 200
        tab = Tab(browser, f"{url}/dashboard#run={run_id}")
        page = tab.page
        try:
            expect(page.locator("#d-tool")).to_have_text("Three callers.")
            if has_transcript:
                page.click("#d-transcript-details summary")
                expect(page.locator("#d-transcript")).to_contain_text("Find the callers of parse_config.")
                expect(page.locator("#d-transcript")).to_contain_text("Three callers.")
            else:
                expect(page.locator("#d-transcript-sec")).to_be_hidden()
        finally:
            tab.close()


def test_a_subagents_own_messages_and_a_hand_back_only_child_are_told_apart(browser: Any, tmp_path: Path) -> None:
    """Claude Code's stdout alone makes a child from the parent's (cut) tool result: the page says
    so. With the subagent's transcript in, the child shows its own messages (SPEC §19)."""
    fixtures = Path(__file__).resolve().parent / "cli_children" / "fixtures" / "claude-code-transcript" / "subagent_split"
    (agent,) = (fixtures / "subagents").glob("agent-*.jsonl")
    (meta,) = (fixtures / "subagents").glob("agent-*.meta.json")
    call = json.loads(meta.read_text())["toolUseId"]
    ndjson = {"content-type": "application/x-ndjson"}
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'lastword.db'}", keepalive_seconds=1.0)
    with threaded_server(settings) as url, httpx.Client(base_url=url, timeout=30) as api:
        stdout_only = create_run(api, agent="parent")
        assert api.post(f"/v1/runs/{stdout_only}/ingest/claude-code", content=(fixtures / "stdout.ndjson").read_bytes(),
                        headers=ndjson).status_code == 200
        with_transcript = create_run(api, agent="parent", selection={"joinContinuations": True})
        assert api.post(f"/v1/runs/{with_transcript}/ingest/claude-code-transcript", content=agent.read_bytes(),
                        params={"toolUseId": call}, headers=ndjson).status_code == 200
        tab = Tab(browser, f"{url}/dashboard#run={stdout_only}.{call}")
        page = tab.page
        try:
            expect(page.locator("#d-output-origin")).to_contain_text("From the parent's tool result only")
            page.goto(f"{url}/dashboard#run={with_transcript}.{call}")
            expect(page.locator("#d-output")).to_contain_text("Report part one: the first half of the findings, cut")
            expect(page.locator("#d-output-origin")).to_have_text("From the subagent's own messages (its transcript).")
            page.click("#d-transcript-details summary")
            expect(page.locator("#d-transcript")).to_contain_text("Report part one")
        finally:
            tab.close()


def test_a_run_that_never_streamed_is_not_shown_streaming(browser: Any, tmp_path: Path) -> None:
    """A parent whose own turn never streamed: its row says only that it has not ended, and its
    pane says "no text yet" until its first text arrives, then "streaming…"."""
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'lastword.db'}", keepalive_seconds=1.0)
    with threaded_server(settings) as url, httpx.Client(base_url=url, timeout=30) as api:
        parent = create_run(api, agent="orchestrator")
        create_run(api, agent="worker", parentRunId=parent)
        tab = Tab(browser, f"{url}/dashboard#run={parent}")
        page = tab.page
        try:
            expect(page.locator("#d-badges")).to_contain_text("no text yet")
            expect(tab.row(parent)).to_contain_text("running")
            expect(tab.row(parent)).not_to_contain_text("streaming…")
            push_text(api, parent, "now it speaks")
            expect(page.locator("#d-live")).to_have_text("now it speaks")
            expect(page.locator("#d-badges")).to_contain_text("streaming…")
            expect(tab.row(parent)).not_to_contain_text("streaming…")
        finally:
            tab.close()


def test_a_continuable_run_streams_each_turn_then_shows_its_end(browser: Any, tmp_path: Path) -> None:
    """A continuable run's detail goes from live text to the ended turn's output and back to live
    text (of the new turn only) when the next turn starts; its row follows, turn by turn."""
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'lastword.db'}", keepalive_seconds=1.0)
    with threaded_server(settings) as url, httpx.Client(base_url=url, timeout=30) as api:
        run_id = create_run(api, agent="chatty", mode="continuable")
        tab = Tab(browser, f"{url}/dashboard#run={run_id}")
        page = tab.page
        try:
            push_text(api, run_id, "first turn text")
            expect(page.locator("#d-live")).to_have_text("first turn text")
            assert api.post(f"/v1/runs/{run_id}/end", json={"stopReason": "cancelled"}).status_code == 200
            expect(tab.row(run_id)).to_contain_text("idle")
            expect(tab.row(run_id)).to_contain_text("Cancelled")
            expect(page.locator("#d-output pre").first).to_have_text("first turn text")
            expect(page.locator("#d-tool")).to_contain_text("stopReason: cancelled")

            assert api.post(f"/v1/runs/{run_id}/turns").status_code == 201
            expect(tab.row(run_id)).to_contain_text("running")
            expect(page.locator("#d-output-sec")).to_be_hidden()
            push_text(api, run_id, "second turn")
            expect(page.locator("#d-live")).to_have_text("second turn")
            assert api.post(f"/v1/runs/{run_id}/end", json={"stopReason": "completed"}).status_code == 200
            expect(tab.row(run_id)).to_contain_text("Completed")
            expect(page.locator("#d-tool")).to_have_text("second turn")
            expect(tab.row(run_id).locator(".num").first).to_have_text("2")
        finally:
            tab.close()


def test_axe_finds_no_accessibility_violation(browser: Any, tmp_path: Path) -> None:
    """axe-core (shipped inside the axe-playwright-python package) finds no WCAG violation on the
    page: with the tree and an ended run selected, with a running run streaming, and with the
    token dialog open."""
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'lastword.db'}", keepalive_seconds=1.0)
    with threaded_server(settings) as url, httpx.Client(base_url=url, timeout=30) as api:
        parent = create_run(api, agent="planner")
        truncated = create_run(api, agent="demo:max-tokens-partial", parentRunId=parent)
        run_scenario("max-tokens-partial", url, run_id=truncated)
        running = create_run(api, agent="researcher", parentRunId=parent)
        push_text(api, running, "Still reading.")
        for reason in ("cancelled", "timeout", "error", "refusal", "completed"):
            ended = create_run(api, agent=f"child-{reason}", parentRunId=parent)
            assert api.post(f"/v1/runs/{ended}/end", json={"stopReason": reason}).status_code == 200
        tab = Tab(browser, f"{url}/dashboard#run={truncated}")
        page = tab.page
        try:
            expect(page.locator("#d-tool-flag")).to_have_text("isError: true")
            ended_report = Axe().run(page)
            assert ended_report.violations_count == 0, ended_report.generate_report()
            tab.row(running).click()
            expect(page.locator("#d-live")).to_have_text("Still reading.")
            live_report = Axe().run(page)
            assert live_report.violations_count == 0, live_report.generate_report()
        finally:
            tab.close()
    guarded = Settings(database_url=f"sqlite:///{tmp_path / 'guarded.db'}", read_token="r", ingest_token="i")
    with threaded_server(guarded) as url:
        tab = Tab(browser, f"{url}/dashboard")
        try:
            expect(tab.page.locator("#token-dialog")).to_be_visible()
            dialog_report = Axe().run(tab.page)
            assert dialog_report.violations_count == 0, dialog_report.generate_report()
        finally:
            tab.close()


def test_the_page_asks_for_the_read_token_once_per_tab(browser: Any, tmp_path: Path) -> None:
    """With tokens on, the page asks for the read token, then lists and streams with it; a reload
    of the tab does not ask again, a new tab does; a wrong token is asked for again; a cancelled
    prompt leaves a notice saying what is needed."""
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'lastword.db'}", keepalive_seconds=1.0,
                        ingest_token="ingest-secret", read_token="read-secret")
    with threaded_server(settings) as url, httpx.Client(
        base_url=url, timeout=30, headers={"Authorization": "Bearer ingest-secret"}
    ) as api:
        first = create_run(api, agent="guarded")
        tab = Tab(browser, url + "/dashboard")
        page = tab.page
        try:
            dialog = page.locator("#token-dialog")
            expect(dialog).to_be_visible()
            page.fill("#token-input", "wrong")
            page.press("#token-input", "Enter")
            expect(page.locator("#token-why")).to_contain_text("That token was refused")
            page.fill("#token-input", "read-secret")
            page.press("#token-input", "Enter")
            expect(tab.row(first)).to_contain_text("guarded")
            expect(page.locator("#connection")).to_have_text("Live")
            # The firehose, with the token in its query, brings new runs.
            second = create_run(api, agent="guarded-too")
            expect(tab.row(second)).to_be_visible()
            tab.row(second).click()
            push_text(api, second, "streamed behind a token")
            expect(page.locator("#d-live")).to_have_text("streamed behind a token")

            page.reload()
            expect(tab.row(second)).to_be_visible()
            expect(dialog).to_be_hidden()
            assert page.evaluate("sessionStorage.getItem('lastword.readToken')") == "read-secret"
        finally:
            tab.close()
        fresh = Tab(browser, url + "/dashboard")
        try:
            expect(fresh.page.locator("#token-dialog")).to_be_visible()
            expect(fresh.page.locator("#connection")).to_have_text("Needs a read token")
            fresh.page.click("#token-cancel")
            expect(fresh.page.locator("#notice")).to_contain_text("needs a read token")
            expect(fresh.page.locator("#token-dialog")).to_be_hidden()
        finally:
            fresh.close()


# -- scale ----------------------------------------------------------------------------------

RUNS_IN_STORE = 2000
STREAMING = 50
SAMPLES = 20


def _seed(url: str, count: int) -> None:
    """``count`` ended runs, created through the API by a few clients at once."""

    def make(indices: range) -> None:
        with httpx.Client(base_url=url, timeout=60) as api:
            for index in indices:
                run_id = create_run(api, agent=f"bulk-{index % 7}")
                api.post(f"/v1/runs/{run_id}/end", json={"stopReason": ("completed", "max_tokens", "cancelled")[index % 3]})

    step = count // 4
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(make, [range(i, min(count, i + step)) for i in range(0, count, step)]))


MEASURE_TEXT_LATENCY = """async ([runId, samples]) => {
  // ingest (a POST of one chunk) -> the chunk's text on screen, timed on the page's own clock
  const pre = document.getElementById('d-live');
  const out = [];
  for (let i = 0; i < samples; i += 1) {
    const marker = ` [probe-${i}-${Math.random().toString(36).slice(2)}]`;
    const seen = new Promise((resolve) => {
      const check = () => { if (pre.textContent.includes(marker)) { observer.disconnect(); resolve(performance.now()); } };
      const observer = new MutationObserver(check);
      observer.observe(pre, { childList: true, characterData: true, subtree: true });
    });
    const start = performance.now();
    const response = await fetch(`/v1/runs/${runId}/chunks`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ text: marker }) });
    if (!response.ok) throw new Error(`ingest answered ${response.status}`);
    out.push((await seen) - start);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return out;
}"""

MEASURE_ROW_LATENCY = """async ([parent, samples]) => {
  // a run created -> its row in the tree (through /v1/stream), on the page's clock
  const tree = document.getElementById('tree');
  const out = [];
  for (let i = 0; i < samples; i += 1) {
    const runId = `probe-row-${i}-${Math.random().toString(36).slice(2, 8)}`;
    const seen = new Promise((resolve) => {
      const check = () => { if (tree.querySelector(`[data-run-id="${runId}"]`)) { observer.disconnect(); resolve(performance.now()); } };
      const observer = new MutationObserver(check);
      observer.observe(tree, { childList: true, subtree: true });
    });
    const start = performance.now();
    const response = await fetch('/v1/runs', { method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ runId, parentRunId: parent, agent: 'probe' }) });
    if (!response.ok) throw new Error(`create answered ${response.status}`);
    out.push((await seen) - start);
  }
  return out;
}"""


def _summary(values: list[float]) -> str:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return f"median {statistics.median(ordered):.0f} ms, p95 {p95:.0f} ms, max {ordered[-1]:.0f} ms (n={len(ordered)})"


def test_scale_2000_runs_and_50_children_streaming(browser: Any, tmp_path: Path) -> None:
    """With 2,000 runs stored the page renders the first page only and pages on when asked; with
    50 children streaming at once the selected child's text and new runs' rows still arrive.
    Times are measured in the browser and printed (speed is reported, never asserted)."""
    # A server process of its own: in this process it would share one interpreter lock with the
    # 50 producer threads, and the figures would measure that.
    server = ServerProcess(sqlite_env(tmp_path), tmp_path).start()
    url = server.url
    with contextlib.closing(server), httpx.Client(base_url=url, timeout=60) as api:
        _seed(url, RUNS_IN_STORE - STREAMING - 1)
        parent = create_run(api, agent="fleet")
        children = [create_run(api, agent=f"worker-{i % 5}", parentRunId=parent) for i in range(STREAMING)]

        tab = Tab(browser, url + "/dashboard")
        page = tab.page
        try:
            expect(page.locator("#tree > li").first).to_be_visible()
            first_render = page.evaluate("window.lastwordDashboard.stats.firstRenderMs")
            first_rows = len(tab.shown_ids())
            page_request = page.evaluate(
                "performance.getEntriesByType('resource').find(e => e.name.includes('/v1/runs?limit=100')).duration")
            loaded = page.evaluate("performance.getEntriesByType('navigation')[0].domContentLoadedEventEnd")
            expect(page.locator("#count")).to_contain_text("more to load")
            assert len(tab.shown_ids()) == 100  # one page, not 2,000 runs
            expect(tab.row(parent)).to_contain_text(f"{STREAMING} children")

            stop = threading.Event()
            sent = [0]

            def stream(run_id: str) -> None:
                with httpx.Client(base_url=url, timeout=60) as producer:
                    while not stop.is_set():
                        push_text(producer, run_id, "token ")
                        sent[0] += 1
                        stop.wait(0.2)

            producers = [threading.Thread(target=stream, args=(child,), daemon=True) for child in children]
            started = time.monotonic()
            for thread in producers:
                thread.start()
            try:
                watched = children[STREAMING // 2]
                tab.row(watched).click()
                expect(page.locator("#d-live")).to_contain_text("token")
                text_latency = page.evaluate(MEASURE_TEXT_LATENCY, [watched, SAMPLES])
                row_latency = page.evaluate(MEASURE_ROW_LATENCY, [parent, 10])
            finally:
                stop.set()
                for thread in producers:
                    thread.join(timeout=30)
            elapsed = time.monotonic() - started
            slowest_render = page.evaluate("window.lastwordDashboard.stats.slowestRenderMs")
            tab.screenshot("scale")

            page.click("#more")
            expect(page.locator("#tree > li")).to_have_count(200 + 10, timeout=30_000)  # + the probe rows
        finally:
            tab.close()

    print(
        f"\n[dashboard scale] {RUNS_IN_STORE} runs stored, {STREAMING} children streaming "
        f"({sent[0]} chunks in {elapsed:.1f} s, {sent[0] / elapsed:.0f}/s)\n"
        f"  first render ({first_rows} rows): {first_render:.0f} ms after navigation start "
        f"(DOMContentLoaded {loaded:.0f} ms; the first page's request {page_request:.0f} ms); "
        f"slowest render of the tree: {slowest_render:.0f} ms\n"
        f"  ingest -> text visible (selected child): {_summary(text_latency)}\n"
        f"  run created -> row visible (firehose): {_summary(row_latency)}"
    )
