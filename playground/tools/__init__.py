"""Tools run from a checkout, never installed with the package: benchmarks, load tests, the Space deploy.

Run them as `python -m playground.tools.NAME` from the repository root (see the README)."""
