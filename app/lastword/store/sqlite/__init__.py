"""The embedded SQLite backend (:mod:`lastword.store.sqlite.store`): its driver's quirks, its group
commit with held changes, and its WAL checkpoints."""
