"""`make bench`: the benchmark runner and one module per measurement (issues 9, 14; how to add
one: tests/benchmarks/README.md).

Run `python tests/benchmarks/run.py --help`. Kept out of `make test` (`--ignore=tests/benchmarks`
in pyproject); `tests/test_benchmarks_smoke.py` runs every measurement at a tiny size so the
harness cannot rot. The measurements use only gen_agent's public API (and the Claude CLI
backend's public translator), so they keep working while the core changes.
"""
