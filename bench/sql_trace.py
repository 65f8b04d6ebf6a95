"""Run a command line of lastword (``… -m lastword.cli serve``) counting its SQLite statements.

Scenario (q) launches the server under this script (``Server(launcher=…)``): every SQLite
connection the process opens gets a trace callback, which counts each statement SQLite runs by
its first word (``SELECT``, ``INSERT``, ``SAVEPOINT`` …) and by the thread that ran it (the
writer, the readers, the checkpointer). ``SIGUSR1`` writes the counts so far as JSON to the
file named by :data:`OUTPUT` and starts counting again from zero.

Only the standard library is used: this runs under the interpreter of the code measured (an
older commit's, under ``python -m bench.ab``), whose lastword may differ from this tree's.
"""

from __future__ import annotations

import json
import os
import runpy
import signal
import sqlite3
import sys
import threading
from collections import Counter
from typing import Any

#: The environment variable naming the file the counts are written to.
OUTPUT = "LASTWORD_BENCH_SQL_TRACE"

_counts: Counter[tuple[str, str]] = Counter()
_lock = threading.Lock()
_connect = sqlite3.connect


def _thread_kind() -> str:
    # "sqlite-writer", "sqlite-reader_0", "sqlite-checkpointer": the role, not the instance.
    return threading.current_thread().name.split("_")[0]


def _count(statement: str) -> None:
    word = statement.lstrip().split(None, 1)[0].upper() if statement.strip() else "?"
    with _lock:
        _counts[(_thread_kind(), word)] += 1


def _traced_connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
    connection: sqlite3.Connection = _connect(*args, **kwargs)
    connection.set_trace_callback(_count)
    return connection


def _dump(signum: int, frame: Any) -> None:
    with _lock:
        counts = [[thread, word, n] for (thread, word), n in sorted(_counts.items())]
        _counts.clear()
    path = os.environ[OUTPUT]
    with open(path + ".part", "w") as out:
        json.dump(counts, out)
    os.replace(path + ".part", path)  # the reader never sees half a file


def main() -> None:
    # argv: [this script, python, -m, <package>.cli, serve, …]: run the module as that python would.
    module = sys.argv[3]
    # Run as a script, this file's directory is first on the path: bench/http.py would shadow
    # the standard library's http for the server.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [entry for entry in sys.path if os.path.abspath(entry or ".") != here]
    sqlite3.connect = _traced_connect  # type: ignore[assignment]
    signal.signal(signal.SIGUSR1, _dump)
    sys.argv = [module, *sys.argv[4:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
