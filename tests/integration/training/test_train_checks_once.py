"""One `pilot-commit train` checks each thing once, at its layer: the allocator config against the registries
(``check_config``, where the run starts: ``start_training_run``), the run's writer lock (``hold_run``: the segment
driver's, not the CLI's too) and the store's catalog (``Store.init``: once a segment, under the lock), for a fresh
run, a resumed one and one started over. Counted by wrapping the real functions; the run trains for real."""

from __future__ import annotations

import contextlib
import io
import json
from collections import Counter

import pytest
from call_counts import count_calls

import pc_pipelines.allocation as allocation
import pc_pipelines.allocation.allocator as allocator_module
import pc_pipelines.cli.args as cli_args
import pc_pipelines.run.lifecycle as lifecycle
import pc_pipelines.run.start as start
import pc_pipelines.store as store_package
import pc_pipelines.store.runlock as runlock
from pc_pipelines.cli import main
from pc_pipelines.store import Store

pytestmark = pytest.mark.slow

SMALL = [a for s in ("allocator.train_batch=4", "allocator.n=4", "task.num_prompts=40", "training.ppo_minibatch=4",
                     "training.eval_every=2", "training.eval_samples=1") for a in ("--set", s)]


@pytest.fixture
def counts(monkeypatch) -> Counter:
    seen: Counter = Counter()
    count_calls(monkeypatch, seen, "check_config", (allocator_module, allocation, start, cli_args), "check_config")
    count_calls(monkeypatch, seen, "hold_run", (runlock, store_package, lifecycle), "hold_run")
    count_calls(monkeypatch, seen, "store.init", (Store,), "init")
    return seen


def train(*args: str) -> int:
    with contextlib.redirect_stdout(io.StringIO()):
        return main(["train", "--method", "grpo", "--quiet", "--json", *SMALL, *args])


def test_a_train_checks_its_config_takes_its_lock_and_inits_the_store_once(base_policy, tmp_path, counts):
    common = ["--out", str(tmp_path), "--policy", str(base_policy), "--run-name", "once"]
    assert train("--steps", "1", *common) == 0
    assert counts == {"check_config": 1, "hold_run": 1, "store.init": 1}
    counts.clear()
    assert train("--steps", "2", "--resume", *common) == 0  # restores the checkpoint's allocator: no second check
    assert counts == {"check_config": 1, "hold_run": 1, "store.init": 1}
    counts.clear()
    assert train("--steps", "1", "--overwrite", *common) == 0
    assert counts == {"check_config": 1, "hold_run": 1, "store.init": 1}
    rows = Store(tmp_path / "pc.duckdb").query("SELECT status, lineage_json FROM runs WHERE run_id = 'once'")
    assert rows[0]["status"] == "finished" and json.loads(rows[0]["lineage_json"])["planned_steps"] == 1
