"""Fixtures of the fault suite (``tests/integration/faults``; its ``pilot-commit`` driver is
``tests/support/fault_cli.py``)."""

from pathlib import Path

import pytest
from fault_cli import train


@pytest.fixture(scope="module")
def run4_and_ref5(tmp_path_factory, base_policy) -> Path:
    """A folder holding a finished 4-step run, ``run4`` (checkpoints after steps 0..3), and the same run trained to
    5 steps uninterrupted, ``ref5``: what a resume from ``run4`` must reproduce bit for bit."""
    root = tmp_path_factory.mktemp("trained")
    train(root / "run4", "t", base_policy, 4, check_rc=0)
    train(root / "ref5", "t", base_policy, 5, check_rc=0)
    return root
