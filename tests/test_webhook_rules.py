"""The webhook rules that need no server: allowed hosts, secrets, backoff."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st
from lastword.errors import InvalidWebhook
from lastword.webhooks.rules import (
    MAX_RETRY_DELAY_SECONDS,
    allowed_host_patterns,
    check_webhook,
    host_allowed,
    retry_delay,
)


def test_allowed_hosts_match_exactly_or_by_suffix() -> None:
    """'a.example' matches itself only; '*.example' matches its subdomains, not the bare name."""
    patterns = allowed_host_patterns(" hooks.example , *.corp.internal ")
    assert host_allowed("hooks.example", patterns) and host_allowed("HOOKS.example.", patterns)
    assert host_allowed("a.b.corp.internal", patterns)
    assert not host_allowed("corp.internal", patterns)
    assert not host_allowed("evilhooks.example", patterns) and not host_allowed("xcorp.internal", patterns)
    assert allowed_host_patterns("") == () and allowed_host_patterns("a, *") == ()
    assert host_allowed("anything.at.all", ())


@pytest.mark.parametrize("secret", ["whsec_", "whsec_%%%", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_YQ=x"])
def test_secrets_must_be_standard_webhooks_secrets(secret: str) -> None:
    with pytest.raises(InvalidWebhook):
        check_webhook("https://h.example/x", secret, ())


@given(attempts=st.integers(min_value=1, max_value=10_000), base=st.floats(min_value=0.001, max_value=100))
def test_backoff_doubles_with_jitter_and_is_capped(attempts: int, base: float) -> None:
    """Each delay is the doubled base within ±50 %, and never past the cap (with its jitter)."""
    delay = retry_delay(attempts, base, random.Random(attempts))
    doubled = min(base * 2.0 ** min(attempts - 1, 64), MAX_RETRY_DELAY_SECONDS)
    assert 0.5 * doubled <= delay <= 1.5 * doubled
