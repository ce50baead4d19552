"""Shared fixtures. The embedded base policy is built once per test session, into a temporary cache (never the
user's ``~/.cache``), exactly as ``pilot-commit train`` builds it on first use.

``PC_PIPELINES_TEST_CACHE=DIR`` reuses a policy cache across sessions while developing (CI leaves it unset, so
every CI run builds the warm start from scratch)."""

import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def policy_cache(tmp_path_factory) -> Path:
    reuse = os.environ.get("PC_PIPELINES_TEST_CACHE")
    return Path(reuse) if reuse else tmp_path_factory.mktemp("policy-cache")


@pytest.fixture(scope="session")
def base_policy(policy_cache) -> Path:
    """The embedded default's SFT warm start (about 2 minutes on 2 cores, once per session)."""
    from pc_pipelines.config import resolve
    from pc_pipelines.training.base_policy import ensure_base_policy

    cfg = resolve("embedded", method="grpo")
    return ensure_base_policy(cfg.task, cfg.policy, cfg.training.prompt_template, cache_dir=policy_cache)
