"""Dagster ``ConfigurableResource``s: one abstract resource per engine (store, rollout, compute, checkpoints)
with real implementations chosen per environment in ``pc_pipelines/definitions.py``. Filled by the Dagster
code-location and scale issues.
"""
