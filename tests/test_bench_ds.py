"""``python -m bench --only s`` (issue 25 item 5): the Durable Streams figures of lastword and of
the Node reference server, side by side.

The scenario runs in its smallest size (``--quick``) against both real servers; the test checks
the figures and ratios it reports are there and are numbers, never how fast anything was (speed
is what the bench itself prints).
"""

from __future__ import annotations

import importlib
import math
import shutil

import pytest

from bench.context import Context, Skip


def test_the_ds_scenario_reports_both_servers_figures_and_their_ratios() -> None:
    if shutil.which("node") is None:
        pytest.skip("node is not installed: the reference server cannot run")
    # Imported by name: the bench's modules are not under the suite's type check.
    scenarios = importlib.import_module("bench.__main__").SCENARIOS
    assert scenarios.get("s") == "bench.ds"
    scenario = importlib.import_module(scenarios["s"])
    try:
        result = scenario.run(Context(quick=True, postgres_url=None))
    except Skip as reason:
        pytest.skip(str(reason))

    figures = {figure.key: figure for figure in result.figures}
    for server in ("lastword", "reference"):
        assert figures[f"{server}_single"].unit == "appends/s"
        assert figures[f"{server}_batched"].unit == "messages/s"
        assert figures[f"{server}_single_cpu"].unit == figures[f"{server}_batched_cpu"].unit == "µs"
        assert figures[f"{server}_p50_100"].unit == "ms"
        assert figures[f"{server}_p99_100"].unit == "ms"
    for figure in figures.values():
        assert math.isfinite(figure.value) and figure.value > 0, figure
    ratios = {figure.key for figure in result.ratios}
    assert {"single", "batched", "p99_100"} <= ratios
    assert len(result.targets) == 2
