"""Live fan-out: the hub subscribers park on, and how replicas hear each other's writes."""
