"""The PostgreSQL backend (:mod:`lastword.store.postgres.store`): pipelined transactions and the
merged commit of many replicas' small appends."""
