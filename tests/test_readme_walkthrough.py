"""docs/WALKTHROUGH.md's walkthrough ("The whole loop, by hand") runs as written, and runs twice; so does
docs/RUNNING.md's two-replica block."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest
from psycopg import sql

from tests.conftest import POSTGRES_URL, require_postgres
from tests.servers import free_port

ROOT = Path(__file__).resolve().parent.parent
WALKTHROUGH = ROOT / "docs" / "WALKTHROUGH.md"
RUNNING = ROOT / "docs" / "RUNNING.md"
BLOCK = re.compile(r"```sh\n(.*?)```", re.DOTALL)

pytestmark = pytest.mark.slow


def walkthrough() -> str:
    section = WALKTHROUGH.read_text().split("## The whole loop, by hand", 1)[1].split("\n## ", 1)[0]
    return "\n".join(BLOCK.findall(section))


def test_the_walkthrough_uses_one_way_of_calling_the_command() -> None:
    """The walkthrough calls the command as `lastword`, never by a path."""
    script = walkthrough()
    assert re.search(r"^(\w+=\$\()?lastword ", script, re.MULTILINE)
    for page in (ROOT / "README.md", WALKTHROUGH, RUNNING):
        assert ".venv/bin/lastword" not in page.read_text(), page
        assert "python -m lastword.cli" not in page.read_text(), page


@pytest.mark.skipif(shutil.which("curl") is None, reason="the walkthrough uses curl")
def test_the_walkthrough_runs_twice_in_a_row(base_url: str) -> None:
    """Every block of the walkthrough, run against a server and then run again on the same
    database, succeeds both times and no request of it is refused."""
    # The streams that follow forever (the firehose) are cut after a few seconds; a request
    # the service refuses shows in the output as a problem document.
    prelude = (
        "set -euo pipefail\n"
        'curl() { command curl --max-time 3 "$@" || [ $? -eq 28 ]; }\n'
    )
    script = prelude + walkthrough().replace("localhost:8000", base_url.removeprefix("http://"))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "LASTWORD_URL": base_url}
    for attempt in (1, 2):
        done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=120,
                              check=False)
        assert done.returncode == 0, f"run {attempt}: {done.stderr[-2000:]}"
        assert "Traceback" not in done.stderr, f"run {attempt}: {done.stderr[-2000:]}"
        refusals = re.findall(r'"status":\s*4\d\d[^}]*', done.stdout)
        assert not refusals, f"run {attempt}: refused: {refusals}"
        assert '"stopReason":"max_tokens"' in done.stdout.replace(" ", "")
        assert "event: subagent/start" in done.stdout  # the firehose from ?after=0


@pytest.mark.postgres
@pytest.mark.skipif(shutil.which("createdb") is None or shutil.which("curl") is None,
                    reason="the block uses createdb and curl")
def test_the_two_replica_block_runs_on_postgres() -> None:
    """docs/RUNNING.md's "Two replicas on PostgreSQL, without Docker" block runs as written, twice
    in a row (on a database of its own and free ports), leaving nothing set in the shell: the run
    played into one replica is followed to its end on the other."""
    require_postgres()
    where = urlsplit(POSTGRES_URL)
    if (where.hostname, where.port or 5432, where.username) != ("127.0.0.1", 5432, "postgres"):
        pytest.skip("the block names the PostgreSQL at 127.0.0.1:5432 as user postgres")
    section = RUNNING.read_text().split("## Two replicas on PostgreSQL, without Docker", 1)[1].split("\n## ", 1)[0]
    [block] = BLOCK.findall(section)
    database = f"lw_readme_{uuid.uuid4().hex[:12]}"
    first, second = str(free_port()), str(free_port())
    script = (block.replace("postgres lastword", f"postgres {database}").replace("5432/lastword", f"5432/{database}")
              .replace("datname = 'lastword'", f"datname = '{database}'").replace("8001", first).replace("8002", second))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "LASTWORD_LOG_LEVEL": "warning"}
    # Twice in one shell: the second run finds the database there; after both, the shell holds no
    # LASTWORD_DATABASE_URL that a later `lastword serve` would pick up.
    twice = f"set -euo pipefail\n{script}\n{script}\necho \"left set: ${{LASTWORD_DATABASE_URL:-nothing}}\"\n"
    process = subprocess.Popen(["bash", "-c", twice], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        out, err = process.communicate(timeout=180)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # the replicas, if the block did not stop them
        with psycopg.connect(POSTGRES_URL, autocommit=True) as connection:
            connection.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database)))
    assert process.returncode == 0, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    # Whichever of tail and demo gets there first, tail prints the whole answer and the end.
    runs = re.findall(r"\[(two-\d+)\] end turn 1: completed", out)
    assert len(set(runs)) == 2, out
    assert out.rstrip().endswith("left set: nothing"), out
    assert "The build fails because the lockfile pins an old resolver." in out, out
