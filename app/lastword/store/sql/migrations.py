"""Schema versions: applying the steps of :mod:`lastword.store.sql.schema` that a database lacks."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from lastword.store.sql.tx import Tx

#: One schema version's step: statements (``;``-separated), or a function that also moves data.
Step = str | Callable[[Tx], None]


def run_statements(tx: Tx, statements: str) -> None:
    """Run each of the ``;``-separated ``statements``."""
    for statement in statements.split(";"):
        if statement.strip():
            tx.run(statement)


def upgrade_schema(tx: Tx, migrations: Sequence[Step]) -> int:
    """Bring the schema up to version ``len(migrations)``; the version it was found at.

    ``migrations[i]`` holds the statements (``;``-separated), or the function, that take
    version ``i`` to ``i + 1``. The caller holds the lock that serialises start-ups (SQLite: ``BEGIN
    IMMEDIATE``; PostgreSQL: an advisory lock), so replicas starting together apply each step
    once, one after the other, and the later ones find nothing to do. A database written by a
    newer release is refused rather than run with a schema this code does not know.
    """
    tx.run("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    row = tx.one("SELECT value FROM meta WHERE key = 'schema_version'")
    found = int(row[0]) if row is not None else 0
    if found > len(migrations):
        raise RuntimeError(
            f"the database has schema version {found}, newer than this release's {len(migrations)}"
        )
    for step in migrations[found:]:
        if isinstance(step, str):
            run_statements(tx, step)
        else:
            step(tx)
    if found < len(migrations):
        tx.run(
            "INSERT INTO meta (key, value) VALUES ('schema_version', ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (str(len(migrations)),),
        )
    return found
