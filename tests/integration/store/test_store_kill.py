"""A writer killed with SIGKILL at random moments never leaves a partial or doubled step visible.

Two real writer processes, each killed several times:

* ``StepLogWriter`` in a loop over large step tables (~60K observation rows, tens of ms per write), cycling over
  12 step numbers so most writes *replace* an existing step: kills land mid-Parquet-write and mid-replacement.
* ``record_simulation`` with compaction every few steps: kills also land inside catalog transactions (eval
  flushes, compaction) and inside the cleanup of compacted step directories.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pc_pipelines.config import resolve
from pc_pipelines.simulator import record_simulation
from pc_pipelines.store import STEP_TABLES, RunRecord, StepLogWriter, Store
from pc_pipelines.store.steplog import MANIFEST, verify_step_dir

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CYCLE = 12  # step numbers the loop writer cycles over
OBS_ROWS = 60_000

# Builds one step's four tables; every row carries ``marker`` so files of two different writes never pass as one.
TABLES_SRC = textwrap.dedent(
    f"""
    import numpy as np
    import pyarrow as pa
    from pc_pipelines.store import STEP_TABLES

    ROWS = {OBS_ROWS}
    _rng = np.random.default_rng(0)
    _FIXED = {{
        "round": np.zeros(ROWS, np.int16), "call": np.zeros(ROWS, np.int16), "prompt_id": np.arange(ROWS),
        "stage": pa.array(["pilot"] * ROWS), "n_correct": _rng.random(ROWS), "p_hat": _rng.random(ROWS),
        "decision": pa.array(["kept"] * ROWS), "evicted": np.zeros(ROWS, bool), "lag": np.zeros(ROWS, np.int32),
        "wave": np.zeros(ROWS, np.int16), "rule": pa.array(["band"] * ROWS), "returned": np.zeros(ROWS, bool),
    }}

    def make_tables(run_id, step, marker):
        obs = pa.table({{**_FIXED, "run_id": pa.array([run_id] * ROWS), "step": np.full(ROWS, step, np.int64),
                         "n": np.full(ROWS, marker, np.int32)}})
        return {{
            "steps": pa.Table.from_pylist([{{"run_id": run_id, "step": step, "sampled_rollouts": marker}}],
                                          schema=STEP_TABLES["steps"]),
            "prompt_observations": pa.table({{f.name: obs.column(f.name) if f.name in obs.column_names
                                               else pa.nulls(ROWS, f.type)  # the columns this test leaves NULL
                                               for f in STEP_TABLES["prompt_observations"]}}),
            "buffer_state": pa.Table.from_pylist([{{"run_id": run_id, "step": step, "entry_id": marker}}],
                                                 schema=STEP_TABLES["buffer_state"]),
            "evictions": pa.Table.from_pylist([{{"run_id": run_id, "step": step, "effective_epoch": marker}}],
                                              schema=STEP_TABLES["evictions"]),
        }}
    """
)

LOOP_WRITER = TABLES_SRC + textwrap.dedent(
    f"""
    import sys
    from pc_pipelines.store import StepLogWriter

    run_dir, run_id, base = sys.argv[1], sys.argv[2], int(sys.argv[3])
    w = StepLogWriter(run_dir)
    i = 0
    while True:
        t = make_tables(run_id, 1 + i % {CYCLE}, base + i)
        w.write_step(1 + i % {CYCLE}, t)
        if i == 0:
            print("ready", flush=True)
        i += 1
    """
)

SIM_WRITER = textwrap.dedent(
    """
    import sys
    from pc_pipelines.config import resolve
    from pc_pipelines.simulator import record_simulation
    from pc_pipelines.store import Store

    path, run_id, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    cfg = resolve("simulator", {"sim.num_prompts": 20000, "training.eval_every": 2}, method="pc")
    for rec in record_simulation(cfg, Store(path), steps, run_id=run_id, flush_every_s=0.05, compact_every=4):
        if rec.sim_step.outcome.step == 0:
            print("ready", flush=True)
    print("done", flush=True)
    """
)


def start(script: Path, *args: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, str(script), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    line = proc.stdout.readline()
    if line.strip() != "ready":
        proc.kill()
        _, err = proc.communicate(timeout=30)
        pytest.fail(f"writer did not start: {line!r}\n{err}")
    return proc


def kill(proc: subprocess.Popen, after_s: float) -> None:
    time.sleep(after_s)
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    proc.stdout.close()
    proc.stderr.close()


def step_dirs(run_dir: Path) -> dict[int, Path]:
    return {int(p.name.split("-")[1]): p for p in run_dir.iterdir() if p.name.startswith("step-")}


def hidden(run_dir: Path) -> list[str]:
    """Leftovers of killed writes; the writer's lock file and space reserve (issue 18) are the run's own and stay."""
    return [p.name for p in run_dir.iterdir() if p.name.startswith(".") and p.name not in (".writer.lock",
                                                                                         ".space-reserve")]


def read_step_dir(d: Path, step: int) -> int:
    """All four files and the manifest present and intact, all carrying one write's marker; returns the marker."""
    assert sorted(p.name for p in d.iterdir()) == sorted([MANIFEST, *(f"{t}.parquet" for t in STEP_TABLES)]), d
    assert verify_step_dir(d) is None, d
    tables = {t: pq.read_table(d / f"{t}.parquet") for t in STEP_TABLES if t != "prompt_observations"}
    tables["prompt_observations"] = pq.read_table(d / "prompt_observations.parquet", columns=["step", "n"])
    for name, t in tables.items():
        assert t.column("step").unique().to_pylist() == [step], (d, name)
    marker = tables["steps"].column("sampled_rollouts").to_pylist()
    assert len(marker) == 1
    assert tables["prompt_observations"].num_rows == OBS_ROWS
    assert set(tables["prompt_observations"].column("n").unique().to_pylist()) == set(marker)
    assert tables["buffer_state"].column("entry_id").to_pylist() == marker
    assert tables["evictions"].column("effective_epoch").to_pylist() == marker
    return marker[0]


def test_killed_step_writer_leaves_only_complete_steps(tmp_path):
    store = Store(tmp_path / "kill.duckdb").init()
    run_id = "killed-loop"
    store.register_run(RunRecord(run_id=run_id, family="f", method="pc", preset="p", seed=0, config={},
                                 config_hash="h", kind="train"))
    run_dir = store.run_dir(run_id)
    script = tmp_path / "loop_writer.py"
    script.write_text(LOOP_WRITER)
    rng = random.Random(1234)
    kills_with_temp_dir = 0

    for attempt in range(5):
        proc = start(script, str(run_dir), run_id, str((attempt + 1) * 1_000_000))
        kill(proc, rng.uniform(0.0, 0.4))

        dirs = step_dirs(run_dir)
        markers = {step: read_step_dir(d, step) for step, d in dirs.items()}
        leftovers = hidden(run_dir)
        assert all(name.startswith((".tmp-step-", ".old-step-")) for name in leftovers), leftovers
        kills_with_temp_dir += any(name.startswith(".tmp-step-") for name in leftovers)

        # the views see exactly the complete step directories, once each, and nothing in .tmp-*/.old-*
        rows = store.query("SELECT step, sampled_rollouts FROM steps WHERE run_id = ? ORDER BY step", [run_id])
        assert [r["step"] for r in rows] == sorted(markers)
        assert {r["step"]: r["sampled_rollouts"] for r in rows} == markers
        n_obs = store.query("SELECT count(*) AS n FROM prompt_observations WHERE run_id = ?", [run_id])[0]["n"]
        assert n_obs == OBS_ROWS * len(markers)
        one = store.query("SELECT count(*) AS n, count(DISTINCT n) AS d FROM prompt_observations "
                          "WHERE run_id = ? GROUP BY step", [run_id])
        assert all(r == {"n": OBS_ROWS, "d": 1} for r in one)

        # a fresh writer sweeps the leftovers and touches no complete step
        StepLogWriter(run_dir)
        assert hidden(run_dir) == []
        assert {s: read_step_dir(d, s) for s, d in step_dirs(run_dir).items()} == markers

    # the loop writes for tens of ms per step and spends microseconds between steps: kills land mid-write
    assert kills_with_temp_dir >= 1

    # replay every step: exactly one copy each, with the replayed content
    ns: dict = {}
    exec(TABLES_SRC, ns)
    w = StepLogWriter(run_dir)
    for step in range(1, CYCLE + 1):
        w.write_step(step, ns["make_tables"](run_id, step, 99_000_000 + step))
    rows = store.query("SELECT count(*) AS n, count(DISTINCT step) AS d, min(sampled_rollouts) AS lo, "
                       "max(sampled_rollouts) AS hi FROM steps WHERE run_id = ?", [run_id])
    assert rows == [{"n": CYCLE, "d": CYCLE, "lo": 99_000_001, "hi": 99_000_000 + CYCLE}]
    assert store.query("SELECT count(*) AS n FROM prompt_observations WHERE run_id = ?", [run_id]) == [
        {"n": CYCLE * OBS_ROWS}]
    assert hidden(run_dir) == []


def test_killed_simulation_with_compaction_leaves_a_consistent_store(tmp_path):
    path = tmp_path / "sim.duckdb"
    script = tmp_path / "sim_writer.py"
    script.write_text(SIM_WRITER)
    rng = random.Random(99)
    steps_total = 80
    killed: list[str] = []

    for attempt in range(4):
        run_id = f"killed-sim-{attempt}"
        proc = start(script, str(path), run_id, str(steps_total))
        kill(proc, rng.uniform(0.0, 0.5))
        killed.append(run_id)

        store = Store(path).init()  # the catalog opens (and upgrades / refreshes views) after the kill
        run = store.get_run(run_id)
        assert run is not None and run["status"] in ("running", "finished")
        watermark = 0 if run["compacted_through"] is None else run["compacted_through"]

        rows = store.query("SELECT step FROM steps WHERE run_id = ? ORDER BY step", [run_id])
        steps = [r["step"] for r in rows]
        assert steps == list(range(1, len(steps) + 1))  # distinct, in order, no gap: a sim writes steps in order
        assert watermark <= len(steps)
        # rows at or below the watermark come from the catalog, the ones above from complete step dirs
        compacted = store.query("SELECT count(*) AS n, count(DISTINCT step) AS d FROM compacted_steps "
                                "WHERE run_id = ?", [run_id])[0]
        assert compacted["n"] == compacted["d"] == watermark
        run_dir = store.run_dir(run_id)
        for step, d in step_dirs(run_dir).items():
            if step > watermark:
                assert sorted(p.name for p in d.iterdir()) == sorted([MANIFEST, *(f"{t}.parquet" for t in STEP_TABLES)])
                assert verify_step_dir(d) is None, d
                for t in STEP_TABLES:
                    pq.read_table(d / f"{t}.parquet")
        obs = store.query(
            "SELECT count(*) AS n FROM (SELECT step, round, call, prompt_id, stage, count(*) AS c "
            "FROM prompt_observations WHERE run_id = ? GROUP BY ALL HAVING c > 1)", [run_id])
        assert obs == [{"n": 0}]
        obs_steps = store.query("SELECT DISTINCT step FROM prompt_observations WHERE run_id = ?", [run_id])
        assert {r["step"] for r in obs_steps} <= set(steps)

        StepLogWriter(run_dir)
        assert hidden(run_dir) == []

    # replaying killed runs gives exactly the clean run's steps, once each
    cfg = resolve("simulator", {"sim.num_prompts": 20000, "training.eval_every": 2}, method="pc")
    store = Store(path)
    clean = [r.sim_step.outcome.ledger.sampled_rollouts
             for r in record_simulation(cfg, store, 30, run_id="clean", compact_every=None)]
    for run_id in killed[-1:]:
        list(record_simulation(cfg, store, 30, run_id=run_id, compact_every=7, overwrite=True))
        rows = store.query("SELECT step, sampled_rollouts FROM steps WHERE run_id = ? ORDER BY step", [run_id])
        assert [r["step"] for r in rows] == list(range(1, 31))
        assert [r["sampled_rollouts"] for r in rows] == clean
        assert store.get_run(run_id)["status"] == "finished"
        assert hidden(store.run_dir(run_id)) == []
