"""lastword's benchmarks (issue 4): ``python -m bench``; see docs/BENCHMARKS.md."""
