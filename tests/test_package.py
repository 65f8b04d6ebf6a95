"""The importable package is ``lastword``: users import the client from it without the server."""

from __future__ import annotations

import subprocess
import sys

SERVER_ONLY = ("fastapi", "uvicorn", "starlette", "psycopg", "psycopg_pool", "sqlite3", "sse_starlette", "prometheus_client", "mcp", "opentelemetry")


def test_client_import_pulls_in_no_server_or_driver_module() -> None:
    """``import lastword.client.core`` (and the top-level names) loads no web framework or database driver."""
    code = (
        "import sys\n"
        "from lastword import LastwordClient, AsyncLastwordClient\n"
        "import lastword.client.core\n"
        f"print(','.join(m for m in {SERVER_ONLY!r} if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_top_level_names_are_the_client_classes() -> None:
    """``from lastword import LastwordClient`` gives the client module's class itself."""
    import lastword
    import lastword.client.core

    assert lastword.LastwordClient is lastword.client.core.LastwordClient
    assert lastword.AsyncLastwordClient is lastword.client.core.AsyncLastwordClient


def test_python_dash_m_lastword_is_the_command() -> None:
    """``python -m lastword --help`` runs the CLI."""
    out = subprocess.run([sys.executable, "-m", "lastword", "--help"], capture_output=True, text=True, check=True)
    assert "serve" in out.stdout
