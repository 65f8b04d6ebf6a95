"""The store over SQL, written once for both backends: the queries, the schema and its versions,
the transactions, the folds of open turns and the batch writer (:mod:`lastword.store.sql.store`)."""
