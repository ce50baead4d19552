"""Shared fixtures. The embedded base policy is the canonical warm start shipped with the package
(``pc_pipelines/warm_starts/``), exactly what ``pilot-commit train`` uses: the same weights on every machine, so no
test depends on which CPU kernels (AVX2 or AVX-512) built it. Builds of other recipes (tests that shrink the SFT)
go to a temporary cache, never the user's ``~/.cache``.

``PC_PIPELINES_TEST_CACHE=DIR`` reuses that cache across sessions while developing (CI leaves it unset)."""

import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def policy_cache(tmp_path_factory) -> Path:
    reuse = os.environ.get("PC_PIPELINES_TEST_CACHE")
    return Path(reuse) if reuse else tmp_path_factory.mktemp("policy-cache")


@pytest.fixture(scope="session")
def base_policy(policy_cache) -> Path:
    """The embedded default's SFT warm start: the shipped one (verified against its SHA256SUMS)."""
    from pc_pipelines.config import resolve
    from pc_pipelines.training.base_policy import ensure_base_policy

    cfg = resolve("embedded", method="grpo")
    return ensure_base_policy(cfg.task, cfg.policy, cfg.training.prompt_template, cache_dir=policy_cache)
