"""Hydra entry points (thin: compose a config, call specjax)."""
