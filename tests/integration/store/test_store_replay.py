"""Replayed steps and replayed runs never double rows; runs carry their resolved config."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from pc_pipelines.config import from_dict, resolve
from pc_pipelines.simulator import SIM_BENCHMARK, record_simulation
from pc_pipelines.store import STEP_TABLES, RunRecord, Store, StoreError

pytestmark = pytest.mark.integration

SMALL = {"sim.num_prompts": 3000, "sim.eval_prompts": 200, "allocator.train_batch": 16, "allocator.n": 8,
         "training.eval_every": 3}


def record(run_id="r1", family="fam", method="pc", seed=0):
    return RunRecord(run_id=run_id, family=family, method=method, preset="hand", seed=seed, config={"a": 1},
                     config_hash="h1", kind="simulate")


def hand_tables(run_id: str, step: int, sampled: int, prompts: list[tuple[int, float]]) -> dict[str, pa.Table]:
    return {
        "steps": pa.Table.from_pylist([{"run_id": run_id, "step": step, "sampled_rollouts": sampled,
                                        "trained_rollouts": sampled // 2}], schema=STEP_TABLES["steps"]),
        "prompt_observations": pa.Table.from_pylist(
            [{"run_id": run_id, "step": step, "prompt_id": pid, "stage": "pilot", "n": 4, "n_correct": nc,
              "p_hat": nc / 4, "decision": "kept", "evicted": False, "lag": 0} for pid, nc in prompts],
            schema=STEP_TABLES["prompt_observations"]),
        "buffer_state": pa.Table.from_pylist([{"run_id": run_id, "step": step, "entry_id": sampled, "prompt_id": 1}],
                                             schema=STEP_TABLES["buffer_state"]),
        "evictions": STEP_TABLES["evictions"].empty_table(),
    }


def small_config(method="pc", seed=0, **extra):
    pc_only = {"allocator.n_pilot": 2} if method == "pc" else {}  # GRPO/DAPO refuse a PC setting
    return resolve("simulator", {**SMALL, **pc_only, **extra}, method=method, seed=seed)


# ---- a replayed step ---------------------------------------------------------------------------------------------
def test_replayed_step_leaves_one_copy_with_the_second_content(new_store):
    st = new_store
    st.register_run(record())
    w = st.writer("r1")
    w.write_step(1, hand_tables("r1", 1, 10, [(1, 1.0)]))
    w.write_step(2, hand_tables("r1", 2, 11, [(1, 2.0), (2, 0.0)]))
    assert st.query("SELECT step, sampled_rollouts FROM steps ORDER BY step") == [
        {"step": 1, "sampled_rollouts": 10}, {"step": 2, "sampled_rollouts": 11}]

    # step 2 replayed after a "crash", with different content
    w2 = st.writer("r1")
    w2.write_step(2, hand_tables("r1", 2, 99, [(3, 3.0), (4, 4.0), (5, 1.0)]))

    assert st.query("SELECT step, sampled_rollouts FROM steps ORDER BY step") == [
        {"step": 1, "sampled_rollouts": 10}, {"step": 2, "sampled_rollouts": 99}]
    obs = st.query("SELECT prompt_id, n_correct, p_hat FROM prompt_observations WHERE step = 2 ORDER BY prompt_id")
    assert obs == [{"prompt_id": 3, "n_correct": 3.0, "p_hat": 0.75}, {"prompt_id": 4, "n_correct": 4.0, "p_hat": 1.0},
                   {"prompt_id": 5, "n_correct": 1.0, "p_hat": 0.25}]
    assert st.query("SELECT entry_id FROM buffer_state WHERE step = 2") == [{"entry_id": 99}]
    assert st.query("SELECT cumulative_sampled FROM step_costs ORDER BY step") == [
        {"cumulative_sampled": 10}, {"cumulative_sampled": 109}]
    assert sorted(p.name for p in st.run_dir("r1").iterdir()) == ["step-00000001", "step-00000002"]


def test_many_replays_of_the_same_steps_stay_single(new_store):
    st = new_store
    st.register_run(record())
    w = st.writer("r1")
    for attempt in range(4):
        for step in range(1, 6):
            w.write_step(step, hand_tables("r1", step, 100 * attempt + step, [(step, 1.0)]))
    rows = st.query("SELECT count(*) AS n, count(DISTINCT step) AS d, sum(sampled_rollouts) AS s FROM steps")
    assert rows == [{"n": 5, "d": 5, "s": 300 * 5 + sum(range(1, 6))}]
    assert st.query("SELECT count(*) AS n FROM prompt_observations") == [{"n": 5}]


# ---- a replayed run -----------------------------------------------------------------------------------------------
def per_run_counts(st: Store) -> dict[str, tuple[int, int]]:
    rows = st.query("SELECT run_id, count(*) AS n, count(DISTINCT step) AS d FROM steps GROUP BY run_id")
    return {r["run_id"]: (r["n"], r["d"]) for r in rows}


def test_record_simulation_twice_with_the_same_run_id_has_no_doubled_steps(tmp_path):
    st = Store(tmp_path / "s.duckdb")
    cfg = small_config()
    first = list(record_simulation(cfg, st, 10, run_id="replayed"))
    sampled_first = [r.sim_step.outcome.ledger.sampled_rollouts for r in first]
    # a replay must be asked for (issue 18: an existing run is never replaced silently) ...
    with pytest.raises(StoreError, match="already exists .* with 10 steps.*--overwrite"):
        list(record_simulation(cfg, st, 10, run_id="replayed"))
    assert per_run_counts(st) == {"replayed": (10, 10)}
    # ... with overwrite
    second = list(record_simulation(cfg, st, 10, run_id="replayed", overwrite=True))
    # the simulator is deterministic: the replay wrote the same steps again, once each
    assert [r.sim_step.outcome.ledger.sampled_rollouts for r in second] == sampled_first
    assert per_run_counts(st) == {"replayed": (10, 10)}
    steps = st.query("SELECT step, sampled_rollouts FROM steps ORDER BY step")
    assert [r["step"] for r in steps] == list(range(1, 11))
    assert [r["sampled_rollouts"] for r in steps] == sampled_first
    evals = st.query("SELECT step, count(*) AS n FROM eval_results GROUP BY step ORDER BY step")
    assert evals == [{"step": s, "n": 1} for s in (0, 3, 6, 9, 10)]  # before training, eval_every=3, the last step
    run = st.get_run("replayed")
    assert run["status"] == "finished" and run["status_reason"] is None
    assert len(st.query("SELECT * FROM runs")) == 1

    # a shorter replay forgets the steps (and evals) it did not redo
    list(record_simulation(cfg, st, 4, run_id="replayed", overwrite=True))
    assert per_run_counts(st) == {"replayed": (4, 4)}
    assert [r["step"] for r in st.query("SELECT step FROM eval_results ORDER BY step")] == [0, 3, 4]


def test_replays_of_several_runs_stay_separate(tmp_path):
    st = Store(tmp_path / "s.duckdb")
    for method in ("grpo", "pc"):
        cfg = small_config(method=method)
        for _ in range(2):
            list(record_simulation(cfg, st, 6, overwrite=True))
    counts = per_run_counts(st)
    assert len(counts) == 2 and all(v == (6, 6) for v in counts.values())
    assert set(counts) == {small_config(method=m).default_run_id() for m in ("grpo", "pc")}


def test_same_run_id_with_another_config_is_refused(tmp_path):
    st = Store(tmp_path / "s.duckdb")
    list(record_simulation(small_config(), st, 2, run_id="x"))
    with pytest.raises(StoreError, match="different config"):
        list(record_simulation(small_config(**{"allocator.p_upper": 0.875}), st, 2, run_id="x"))
    assert per_run_counts(st) == {"x": (2, 2)}
    assert st.get_run("x")["status"] == "finished"


def test_interrupted_simulation_is_marked_failed_with_a_reason(tmp_path):
    st = Store(tmp_path / "s.duckdb")
    gen = record_simulation(small_config(), st, 50, run_id="cut")
    for i, _ in enumerate(gen):
        if i == 2:
            break
    gen.close()
    run = st.get_run("cut")
    assert (run["status"], run["status_reason"]) == ("failed", "interrupted")
    assert per_run_counts(st) == {"cut": (3, 3)}


def test_resolved_config_is_stored_with_the_run(tmp_path):
    st = Store(tmp_path / "s.duckdb")
    cfg = small_config(method="dapo", seed=4, **{"training.lr": 3.0e-6})
    list(record_simulation(cfg, st, 3))
    run = st.get_run(cfg.default_run_id())
    assert (run["family"], run["method"], run["preset"], run["seed"], run["kind"]) == ("sim", "dapo", "simulator", 4,
                                                                                       "simulate")
    assert run["config_hash"] == cfg.config_hash
    back = from_dict(json.loads(run["config_json"]))
    assert back == cfg and back.config_hash == cfg.config_hash
    assert back.training.lr == 3.0e-6 and back.sim.num_prompts == 3000
    acc = st.query("SELECT accuracy, temperature, n_prompts FROM eval_results WHERE step = 0 AND benchmark = ?",
                   [SIM_BENCHMARK])
    assert acc[0]["temperature"] == cfg.training.eval_temperature and acc[0]["n_prompts"] == 200


def test_set_status_refuses_unknown_statuses(new_store):
    st = new_store
    st.register_run(record())
    with pytest.raises(StoreError, match="unknown run status"):
        st.set_status("r1", "exploded")
    st.set_status("r1", "paused", "preempted")
    assert st.get_run("r1")["status_reason"] == "preempted"
    st.register_run(record())  # resume: running again, reason cleared
    assert (st.get_run("r1")["status"], st.get_run("r1")["status_reason"]) == ("running", None)


@pytest.mark.parametrize("bad", ["", "a/b", ".hidden", "_schema", "../up", "*", "[a-z]*", "?ictim", "x" * 300])
def test_run_ids_outside_the_allowed_set_are_refused(new_store, bad):
    st = new_store
    with pytest.raises(StoreError, match=r"letters, digits, '\.', '_' and '-'.*Fix:"):
        st.register_run(record(run_id=bad))
    with pytest.raises(StoreError, match="Fix:"):
        st.writer(bad)
    assert st.query("SELECT count(*) AS n FROM runs") == [{"n": 0}]
    assert (sorted(p.name for p in st.runs_root.iterdir()) if st.runs_root.exists() else []) == []


def test_replace_steps_swaps_compacted_rows_of_a_mid_run_replay_only(new_store):
    """A training segment replayed in the middle of a run: its steps' rows are swapped, later steps untouched."""
    st = new_store
    st.register_run(record())
    w = st.writer("r1")
    for step in range(1, 7):
        w.write_step(step, hand_tables("r1", step, 10 + step, [(step, 1)]))
    st.compact("r1", through=4)  # steps 1..4 in the catalog, 5..6 still files
    # replay steps 3..5 with new values (as a re-materialized segment would write them)
    for step in (3, 4, 5):
        w.write_step(step, hand_tables("r1", step, 100 + step, [(step, 3)]))
    # before the swap, readers still see the old compacted rows of 3..4 (the new files sit under the watermark)
    assert [r["sampled_rollouts"] for r in st.query("SELECT * FROM steps ORDER BY step")] == [11, 12, 13, 14, 105, 16]
    assert st.replace_steps("r1", 3, 5) == 2  # steps 3 and 4 were compacted; 5 is a file replaced in place
    rows = st.query("SELECT step, sampled_rollouts FROM steps ORDER BY step")
    assert [(r["step"], r["sampled_rollouts"]) for r in rows] == [(1, 11), (2, 12), (3, 103), (4, 104), (5, 105), (6, 16)]
    obs = st.query("SELECT step, n_correct FROM prompt_observations ORDER BY step")
    assert [o["n_correct"] for o in obs] == [1, 1, 3, 3, 3, 1]
    st.compact("r1")
    assert st.query("SELECT count(*) AS n, sum(sampled_rollouts) AS s FROM steps") == [{"n": 6, "s": 11 + 12 + 103 + 104 + 105 + 16}]
    assert st.get_run("r1")["compacted_through"] == 6
