"""Benchmarks of the package at study scale (``python -m benchmarks.run``); see docs/benchmarks.md."""
