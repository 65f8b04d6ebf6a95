"""The rules: the fold and selection, event shapes, the run state machine, stop reasons, the
transcript and the tool result. Pure: no I/O, no store, no HTTP."""
