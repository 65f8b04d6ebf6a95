"""The ingest: a body's bytes in, stored session events and an outcome out (SPEC §9, §13, §16).

Every way events arrive is read here, over a plain byte iterator and the few header values that
say how to read it (:class:`lastword.ingest.body.Body`), whatever face received it:

- :mod:`body`: the bytes as they arrive, gzip decoded, held to the body limit; the charset.
- :mod:`json_input`: JSON read exactly (no integer changed), big arrays a slice at a time.
- :mod:`checks`: the one place an event is checked before it is stored (§4 rules, nesting, size).
- :mod:`events`: pushed events (JSON, NDJSON, chunk text) and small JSON documents.
- :mod:`provider`: a provider's own stream (§13), staged and stored at the body's end.
- :mod:`cli`: an agent CLI's output (§16), stored as it arrives.
- :mod:`outcome`: what an ingest answers (:class:`~lastword.ingest.outcome.Stored`).

It returns outcomes and raises :mod:`lastword.errors`; it never builds a response, and imports
no web framework (an import contract keeps it so).
"""
