"""``lastword serve`` whose SQLite writer can be held before a COMMIT: ``python -m tests.held_server GATE``.

While ``GATE/hold`` exists the writer stops after writing a batch and before its ``COMMIT``, and
says so by creating ``GATE/paused`` (tests/test_group_commit.py kills the process there). The
rest is the service as ``lastword serve`` runs it, configured by the same ``LASTWORD_`` variables:
the core is opened with the gate handed to its store, and the app serves that core.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from lastword.core import open_core
from lastword.http.logs import configure_logging
from lastword.main import create_app
from lastword.server import LastwordServer, uvicorn_config
from lastword.settings import Settings


async def serve(gate: Path) -> None:
    settings = Settings()
    configure_logging(settings.log_level)
    async with open_core(settings, store_options={"hold_commit_dir": gate}) as core:
        await LastwordServer(uvicorn_config(settings, app=create_app(core=core))).serve()


if __name__ == "__main__":
    asyncio.run(serve(Path(sys.argv[1])))
