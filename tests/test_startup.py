"""Start-up failures an operator meets first, said in words that tell what to do."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.conftest import POSTGRES_URL, require_postgres
from tests.servers import ServerProcess, free_port

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

REPO = Path(__file__).resolve().parents[1]


def test_a_missing_postgres_database_is_named_at_start_up() -> None:
    """A PostgreSQL URL naming a database that does not exist stops start-up with a line that
    names the database and says to create it (not the pool's "initialization incomplete")."""
    require_postgres()
    name = f"lw_missing_{uuid.uuid4().hex[:12]}"
    url = urlunsplit(urlsplit(POSTGRES_URL)._replace(path=f"/{name}"))
    server = ServerProcess({"LASTWORD_DATABASE_URL": url, "LASTWORD_LOG_LEVEL": "info"}, cwd=REPO)
    with pytest.raises(RuntimeError, match="server exited"):
        server.start(timeout=60)
    log = server.log_path.read_text()
    assert f'cannot start: the PostgreSQL database \\"{name}\\" does not exist' in log
    assert "create it first" in log
    assert "initialization incomplete" not in log


def test_a_missing_postgres_database_is_one_line_and_the_exit_status() -> None:
    """`lastword serve` on a database that does not exist says so in one error line and exits 3
    (uvicorn's start-up failure), with no traceback and no "Application startup failed"."""
    require_postgres()
    name = f"lw_missing_{uuid.uuid4().hex[:12]}"
    url = urlunsplit(urlsplit(POSTGRES_URL)._replace(path=f"/{name}"))
    env = {**os.environ, "LASTWORD_DATABASE_URL": url, "LASTWORD_PORT": str(free_port()),
           "LASTWORD_HOST": "127.0.0.1", "LASTWORD_LOG_LEVEL": "info"}
    done = subprocess.run([sys.executable, "-m", "lastword.cli", "serve"], capture_output=True, text=True, env=env,
                          timeout=60, check=False, cwd=REPO)
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr and "Application startup failed" not in done.stderr, done.stderr
    errors = [json.loads(line) for line in done.stderr.splitlines() if '"level":"error"' in line]
    assert [error["message"].split(":")[0] for error in errors] == ["cannot start"], done.stderr
    assert f'the PostgreSQL database "{name}" does not exist' in errors[0]["message"]
