"""Fixtures of the fault suite (``tests/integration/faults``; its ``pilot-commit`` driver is
``tests/support/fault_cli.py``). The trained runs are built once per test session for every worker
(``shared_runs``, tests/conftest.py) and read by several files; every test copies them and never changes them."""

from pathlib import Path

import pytest
from fault_cli import train, train_recipe


def _shared(shared_runs, base_policy, name: str, steps: int) -> Path:
    """The fault suite's PC run ``t`` of ``steps`` steps (fault_cli.train), from the session's shared runs."""
    def build(out: Path) -> None:
        train(out, "t", base_policy, steps, timeout=900, check_rc=0)
    return shared_runs.get(name, train_recipe("t", base_policy, steps), build)


@pytest.fixture(scope="session")
def run4(shared_runs, base_policy) -> Path:
    """A finished 4-step run ``t`` (checkpoints after steps 1..4)."""
    return _shared(shared_runs, base_policy, "faults-run4", 4)


@pytest.fixture(scope="session")
def run4_and_ref5(run4, shared_runs, base_policy, tmp_path_factory) -> Path:
    """A folder holding ``run4`` and the same run trained to 5 steps uninterrupted, ``ref5``: what a resume from
    ``run4`` must reproduce bit for bit (links to the shared runs)."""
    ref5 = _shared(shared_runs, base_policy, "faults-ref5", 5)
    root = tmp_path_factory.mktemp("trained")
    (root / "run4").symlink_to(run4, target_is_directory=True)
    (root / "ref5").symlink_to(ref5, target_is_directory=True)
    return root
