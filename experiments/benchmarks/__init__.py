"""Micro-benchmarks of specjax components (run as modules: python -m experiments.benchmarks.X)."""
