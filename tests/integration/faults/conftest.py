"""Fixtures of the fault suite (``tests/integration/faults``; its ``pilot-commit`` driver is
``tests/support/fault_cli.py``). The trained runs are built once per test process and read by several files (with
``--dist loadfile`` the files that land on one worker share them); every test copies them and never changes them."""

from pathlib import Path

import pytest
from fault_cli import train


@pytest.fixture(scope="session")
def trained_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("trained")


@pytest.fixture(scope="session")
def run4(trained_root, base_policy) -> Path:
    """A finished 4-step run ``t`` (checkpoints after steps 0..3), in ``trained_root / "run4"``."""
    out = trained_root / "run4"
    train(out, "t", base_policy, 4, timeout=900, check_rc=0)
    return out


@pytest.fixture(scope="session")
def run4_and_ref5(run4, trained_root, base_policy) -> Path:
    """A folder holding ``run4`` and the same run trained to 5 steps uninterrupted, ``ref5``: what a resume from
    ``run4`` must reproduce bit for bit."""
    train(trained_root / "ref5", "t", base_policy, 5, timeout=900, check_rc=0)
    return trained_root
