"""Compaction: steps move from Parquet step directories into catalog tables without the views changing."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pyarrow as pa
import pytest

from pc_pipelines.config import resolve
from pc_pipelines.simulator import record_simulation
from pc_pipelines.store import STEP_TABLES, RunRecord, Store, hold_run

pytestmark = pytest.mark.integration

VIEW_COLS = "run_id, step, sampled_rollouts, trained_rollouts, shortfall, band_lower, loss"


def tables(run_id: str, step: int, marker: int) -> dict[str, pa.Table]:
    return {
        "steps": pa.Table.from_pylist(
            [{"run_id": run_id, "step": step, "sampled_rollouts": marker, "trained_rollouts": marker // 2,
              "shortfall": step % 2 == 0, "band_lower": 0.125, "loss": None}], schema=STEP_TABLES["steps"]),
        "prompt_observations": pa.Table.from_pylist(
            [{"run_id": run_id, "step": step, "prompt_id": p, "stage": "pilot", "n": 4, "n_correct": float(p % 5),
              "p_hat": (p % 5) / 4, "decision": "kept", "evicted": p == 3, "lag": 0} for p in range(4)],
            schema=STEP_TABLES["prompt_observations"]),
        "buffer_state": pa.Table.from_pylist([{"run_id": run_id, "step": step, "entry_id": marker, "prompt_id": 1}],
                                             schema=STEP_TABLES["buffer_state"]),
        "evictions": pa.Table.from_pylist([{"run_id": run_id, "step": step, "prompt_id": 3, "effective_epoch": 1}],
                                          schema=STEP_TABLES["evictions"]),
    }


def make_store(tmp_path, steps: int, run_id: str = "r") -> Store:
    st = Store(tmp_path / "c.duckdb").init()
    st.register_run(RunRecord(run_id=run_id, family="f", method="pc", preset="p", seed=0, config={},
                              config_hash="h", kind="train"))
    w = st.writer(run_id)
    for s in range(1, steps + 1):  # steps count from 1
        w.write_step(s, tables(run_id, s, 10 + s))
    return st


def snapshot(st: Store) -> dict:
    return {
        "steps": st.query(f"SELECT {VIEW_COLS} FROM steps ORDER BY run_id, step"),
        "obs": st.query("SELECT * FROM prompt_observations ORDER BY run_id, step, prompt_id"),
        "buffer": st.query("SELECT * FROM buffer_state ORDER BY run_id, step"),
        "evictions": st.query("SELECT * FROM evictions ORDER BY run_id, step"),
        "costs": st.query("SELECT * FROM step_costs ORDER BY run_id, step"),
    }


def step_dir_numbers(st: Store, run_id: str = "r") -> list[int]:
    return sorted(int(p.name.split("-")[1]) for p in st.run_dir(run_id).glob("step-*"))


def test_compaction_leaves_every_view_unchanged(tmp_path):
    st = make_store(tmp_path, 10)
    before = snapshot(st)
    assert len(before["steps"]) == 10 and len(before["obs"]) == 40

    assert st.compact("r", through=5) == 5
    assert st.get_run("r")["compacted_through"] == 5
    # The files just compacted stay (hidden by the watermark) until a later pass: a reader may still open them.
    assert step_dir_numbers(st) == list(range(1, 11))
    assert snapshot(st) == before
    assert st.query("SELECT count(*) AS n FROM compacted_steps") == [{"n": 5}]

    assert st.compact("r") == 5  # the rest; deletes the batch the previous compaction hid
    assert st.get_run("r")["compacted_through"] == 10
    assert step_dir_numbers(st) == [6, 7, 8, 9, 10]
    assert snapshot(st) == before
    with hold_run("r", st.run_dir("r")):  # only the run's writer vacuums it (issue 54)
        assert st.vacuum("r") == 5
    assert step_dir_numbers(st) == []
    assert snapshot(st) == before
    assert st.compact("r") == 0  # nothing left
    assert snapshot(st) == before
    assert st.query("SELECT count(*) AS n, count(DISTINCT step) AS d FROM compacted_steps") == [{"n": 10, "d": 10}]


def test_step_rewritten_at_or_below_the_watermark_is_not_doubled(tmp_path):
    st = make_store(tmp_path, 6)
    st.compact("r")
    st.writer("r").write_step(4, tables("r", 4, 999))  # a stray late write of a compacted step
    rows = st.query("SELECT step, sampled_rollouts FROM steps ORDER BY step")
    assert [r["step"] for r in rows] == list(range(1, 7))
    assert rows[3]["sampled_rollouts"] == 14  # step 4: the compacted copy wins; the file is ignored


def test_reopen_after_then_replay_gives_one_copy_per_step(tmp_path):
    st = make_store(tmp_path, 10)
    st.add_eval_results([{"run_id": "r", "step": s, "benchmark": "b", "accuracy": s / 10} for s in (0, 5, 10)])
    st.compact("r", through=8)
    st.reopen_after("r", 6)  # resume from the checkpoint after step 6
    assert st.get_run("r")["compacted_through"] == 6
    assert [r["step"] for r in st.query("SELECT step FROM steps ORDER BY step")] == list(range(1, 7))
    assert [r["step"] for r in st.query("SELECT step FROM eval_results ORDER BY step")] == [0, 5]
    w = st.writer("r")
    for s in range(7, 13):
        w.write_step(s, tables("r", s, 1000 + s))
    rows = st.query("SELECT step, sampled_rollouts FROM steps ORDER BY step")
    assert [r["step"] for r in rows] == list(range(1, 13))
    assert [r["sampled_rollouts"] for r in rows] == [10 + s for s in range(1, 7)] + [1000 + s for s in range(7, 13)]
    assert st.query("SELECT count(*) AS n FROM prompt_observations") == [{"n": 48}]

    st.reopen_after("r", -1)  # start over (the evaluation before training too)
    assert st.get_run("r")["compacted_through"] is None
    assert st.query("SELECT count(*) AS n FROM steps") == [{"n": 0}]
    assert step_dir_numbers(st) == []


def test_compact_unknown_run_is_refused(tmp_path):
    from pc_pipelines.store import StoreError

    st = make_store(tmp_path, 1)
    with pytest.raises(StoreError, match="no run"):
        st.compact("nope")


def test_record_simulation_with_and_without_compaction_agree(tmp_path):
    cfg = resolve("simulator", {"sim.num_prompts": 3000, "sim.eval_prompts": 200, "allocator.train_batch": 16,
                                "allocator.n": 8, "allocator.n_pilot": 2}, method="pc")
    a, b = Store(tmp_path / "a.duckdb"), Store(tmp_path / "b.duckdb")
    list(record_simulation(cfg, a, 11, run_id="x", compact_every=None))
    list(record_simulation(cfg, b, 11, run_id="x", compact_every=3))
    assert a.get_run("x")["compacted_through"] is None and b.get_run("x")["compacted_through"] == 11
    cols = "step, sampled_rollouts, trained_rollouts, buffer_size, evicted, mean_reward_std"
    assert a.query(f"SELECT {cols} FROM steps ORDER BY step") == b.query(f"SELECT {cols} FROM steps ORDER BY step")
    q = "SELECT step, prompt_id, stage, n, n_correct, decision FROM prompt_observations ORDER BY ALL"
    assert a.query(q) == b.query(q)
    q = "SELECT step, cumulative_sampled FROM step_costs ORDER BY step"
    assert a.query(q) == b.query(q)
    with hold_run("x", b.run_dir("x")):
        b.vacuum("x")
    assert list(b.run_dir("x").glob("step-*")) == []


COMPACTOR = textwrap.dedent(
    """
    import shutil, sys, time
    from pathlib import Path
    from pc_pipelines.store import Store, hold_run
    from pc_pipelines.store import compaction

    # A shared volume (docs/DESIGN.md section 5: k8s pods on one volume) deletes slowly: a few ms per directory.
    real_rmtree, marker = shutil.rmtree, Path(sys.argv[2])

    def slow_rmtree(path, *args, **kwargs):
        marker.touch()
        time.sleep(0.004)
        return real_rmtree(path, *args, **kwargs)

    compaction.shutil.rmtree = slow_rmtree
    store = Store(sys.argv[1])
    print(store.compact("r"), flush=True)
    with hold_run("r", store.run_dir("r")):
        store.vacuum("r")  # the deletions readers race with
    """
)


@pytest.mark.slow
def test_readers_do_not_fail_while_compaction_deletes_step_dirs(tmp_path):
    """docs/DESIGN.md section 5: SQL works while runs write. After ``compact()`` commits, ``vacuum()`` deletes the
    compacted step directories; a reader whose ``read_parquet`` glob listed a directory just before it was deleted must still
    get an answer (the watermark already excludes those rows), not ``IO Error: Cannot open file ...``."""
    st = make_store(tmp_path, 250)
    expected = st.query("SELECT count(*) AS n, sum(sampled_rollouts) AS s FROM steps")
    script, marker = tmp_path / "compactor.py", tmp_path / "deleting"
    script.write_text(COMPACTOR)
    proc = subprocess.Popen([sys.executable, str(script), str(st.path), str(marker)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    errors, results = [], []
    try:
        deadline = time.monotonic() + 60
        while not marker.exists() and proc.poll() is None:
            assert time.monotonic() < deadline
            time.sleep(0.005)
        while proc.poll() is None:
            try:
                results.append(st.query("SELECT count(*) AS n, sum(sampled_rollouts) AS s FROM steps"))
            except Exception as exc:  # any failure of a reader is the finding
                errors.append(str(exc).splitlines()[0])
    finally:
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out.strip() == "250"
    assert results, "no read landed while the compacted directories were being deleted"
    assert errors == [], f"{len(errors)} of {len(errors) + len(results)} reads failed, e.g. {errors[0]}"
    assert all(r == expected for r in results)
