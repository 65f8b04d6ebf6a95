"""Webhooks (SPEC §14): what a delivery carries and signs, and the sender that drains the outbox."""
