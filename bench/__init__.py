"""Benchmarks: each measures the gateway against a baseline run in the same process or run."""
