"""The store's views and report on small hand-built data, against numbers computed by hand.

Family ``fam``, methods grpo / dapo / pc, seeds 0 and 1, three steps each (1, 2, 3), evals before training (step
0) and after every step on two benchmarks (accuracy = their mean). All accuracies are multiples of 1/8 so the
means are exact.

seed 0                       sampled per step   cumulative        mean accuracy at steps 0, 1, 2, 3
    grpo                     100 100 100        100 200 300       0.125  0.375  0.5    0.5      peak 0.5
    dapo                      80  80  80         80 160 240       0.125  0.25   0.375  0.4375   never reaches
    pc                        50  60  70         50 110 180       0.125  0.375  0.625  0.5      peak 0.625
    target = min(0.5, 0.625) = 0.5: grpo 200 (step 2), dapo never, pc 110 (step 2)
    grpo/pc = 200/110, dapo/pc = NULL

seed 1
    grpo                     100 100 100        100 200 300       0.125  0.25   0.375  0.625    peak 0.625
    dapo                      80  80  80         80 160 240       0.125  0.25   0.625  0.625
    pc                        40  40  40         40  80 120       0.125  0.625  0.75   0.875    peak 0.875
    target = 0.625: grpo 300 (step 3), dapo 160 (step 2), pc 40 (step 1)
    grpo/pc = 7.5, dapo/pc = 4.0

medians over seeds: grpo/pc = (200/110 + 7.5) / 2; dapo/pc = 4.0 (seed 0 has none)

An older grpo run for (fam, seed 0) with a far better curve is registered first: only the latest run of each
(family, method, seed) counts, so it must not change anything above.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from pc_pipelines.store import STEP_TABLES, RunRecord, Store, StoreError

pytestmark = pytest.mark.integration

EXE = str(Path(sys.executable).parent / "pilot-commit")
FAMILY = "fam"

# (method, seed) -> (sampled per step, trained per step, [(b1, b2) accuracy at steps 0, 1, 2, 3])
RUNS = {
    ("grpo", 0): ([100, 100, 100], [64, 64, 64], [(0.125, 0.125), (0.25, 0.5), (0.5, 0.5), (0.25, 0.75)]),
    ("dapo", 0): ([80, 80, 80], [64, 64, 48], [(0.125, 0.125), (0.25, 0.25), (0.25, 0.5), (0.25, 0.625)]),
    ("pc", 0): ([50, 60, 70], [40, 48, 56], [(0.125, 0.125), (0.25, 0.5), (0.5, 0.75), (0.5, 0.5)]),
    ("grpo", 1): ([100, 100, 100], [64, 64, 64], [(0.125, 0.125), (0.25, 0.25), (0.25, 0.5), (0.5, 0.75)]),
    ("dapo", 1): ([80, 80, 80], [64, 64, 64], [(0.125, 0.125), (0.25, 0.25), (0.5, 0.75), (0.625, 0.625)]),
    ("pc", 1): ([40, 40, 40], [32, 32, 32], [(0.125, 0.125), (0.5, 0.75), (0.75, 0.75), (0.75, 1.0)]),
}
STALE = ("fam-grpo-s0-old", [10, 10, 10], [8, 8, 8], [(0.125, 0.125), (1.0, 1.0), (1.0, 1.0), (1.0, 1.0)])

# Hand-computed expectations (see the module docstring).
EXPECTED = {
    0: {"target": 0.5, "grpo": 200, "dapo": None, "pc": 110, "grpo_over_pc": 200 / 110, "dapo_over_pc": None},
    1: {"target": 0.625, "grpo": 300, "dapo": 160, "pc": 40, "grpo_over_pc": 7.5, "dapo_over_pc": 4.0},
}
MEDIAN_GRPO_OVER_PC = (200 / 110 + 7.5) / 2
MEDIAN_DAPO_OVER_PC = 4.0

# pc seed 0 observes prompt 7 three times.
PROMPT7 = [
    # step, round, stage, n, n_correct, decision, evicted, lag
    (1, 0, "pilot", 4, 2.0, "kept", False, 0),
    (2, 0, "commit", 12, 9.0, "trained", False, 1),
    (3, 1, "pilot", 4, 4.0, "skipped_easy", True, 0),
]


def run_id(method: str, seed: int) -> str:
    return f"{FAMILY}-{method}-s{seed}"


def step_tables(rid: str, step: int, sampled: int, trained: int, observations=()) -> dict[str, pa.Table]:
    steps = pa.Table.from_pylist(
        [{"run_id": rid, "step": step, "epoch": 0, "rounds": 1, "engine_calls": 1, "sampled_rollouts": sampled,
          "pilot_rollouts": sampled // 2, "commit_rollouts": sampled - sampled // 2, "full_rollouts": 0,
          "trained_rollouts": trained, "shortfall": False}],
        schema=STEP_TABLES["steps"],
    )
    obs_rows = [
        {"run_id": rid, "step": step, "round": rnd, "call": 0, "prompt_id": pid, "stage": stage, "n": n,
         "n_correct": nc, "p_hat": nc / n, "decision": dec, "evicted": ev, "lag": lag}
        for pid, (s, rnd, stage, n, nc, dec, ev, lag) in observations
        if s == step
    ]
    # a second prompt each step, so the per-prompt filter has something to filter out
    obs_rows.append({"run_id": rid, "step": step, "round": 0, "call": 0, "prompt_id": 8, "stage": "full", "n": 8,
                     "n_correct": 1.0, "p_hat": 0.125, "decision": "trained", "evicted": False, "lag": 0})
    obs = pa.Table.from_pylist(obs_rows, schema=STEP_TABLES["prompt_observations"])
    return {
        "steps": steps,
        "prompt_observations": obs,
        "buffer_state": STEP_TABLES["buffer_state"].empty_table(),
        "evictions": STEP_TABLES["evictions"].empty_table(),
    }


def write_run(store: Store, rid: str, method: str, seed: int, sampled, trained, accs, observations=()) -> None:
    store.register_run(
        RunRecord(run_id=rid, family=FAMILY, method=method, preset="hand", seed=seed, config={"method": method},
                  config_hash=f"h-{rid}", kind="simulate")
    )
    w = store.writer(rid)
    for step, (s, t) in enumerate(zip(sampled, trained), start=1):
        w.write_step(step, step_tables(rid, step, s, t, observations))
    store.add_eval_results(
        [{"run_id": rid, "step": step, "benchmark": bench, "k": 4, "temperature": 0.7, "accuracy": acc}
         for step, pair in zip(range(0, 4), accs) for bench, acc in zip(("b1", "b2"), pair)]
    )
    store.set_status(rid, "finished")


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Store:
    st = Store(tmp_path_factory.mktemp("views") / "hand.duckdb").init()
    rid, sampled, trained, accs = STALE
    write_run(st, rid, "grpo", 0, sampled, trained, accs)
    for (method, seed), (sampled, trained, accs) in RUNS.items():
        obs = [(7, o) for o in PROMPT7] if (method, seed) == ("pc", 0) else ()
        write_run(st, run_id(method, seed), method, seed, sampled, trained, accs, obs)
    return st


def cumsum(xs):
    out, total = [], 0
    for x in xs:
        total += x
        out.append(total)
    return out


def test_steps_view_has_every_hand_written_step(store):
    rows = store.query("SELECT run_id, count(*) AS n, count(DISTINCT step) AS d, sum(sampled_rollouts) AS s "
                       "FROM steps GROUP BY run_id ORDER BY run_id")
    got = {r["run_id"]: (r["n"], r["d"], r["s"]) for r in rows}
    expected = {run_id(m, s): (3, 3, sum(v[0])) for (m, s), v in RUNS.items()}
    expected[STALE[0]] = (3, 3, 30)
    assert got == expected


def test_step_costs_cumulative_sums(store):
    for (method, seed), (sampled, trained, _) in RUNS.items():
        rows = store.query("SELECT * FROM step_costs WHERE run_id = ? ORDER BY step", [run_id(method, seed)])
        assert [r["step"] for r in rows] == [1, 2, 3]
        assert [r["sampled_rollouts"] for r in rows] == sampled
        assert [r["cumulative_sampled"] for r in rows] == cumsum(sampled)
        assert [r["cumulative_trained"] for r in rows] == cumsum(trained)
        assert [r["pilot_rollouts"] + r["commit_rollouts"] for r in rows] == sampled
    # spelled out for one run: pc seed 0
    rows = store.query("SELECT cumulative_sampled, cumulative_trained FROM step_costs WHERE run_id = 'fam-pc-s0' "
                       "ORDER BY step")
    assert [(r["cumulative_sampled"], r["cumulative_trained"]) for r in rows] == [(50, 40), (110, 88), (180, 144)]


def test_pass_rate_history_for_one_prompt(store):
    rows = store.query("SELECT * FROM pass_rate_history WHERE prompt_id = ? ORDER BY run_id, step", [7])
    assert [r["run_id"] for r in rows] == ["fam-pc-s0"] * 3
    got = [(r["step"], r["round"], r["stage"], r["n"], r["n_correct"], r["p_hat"], r["decision"], r["evicted"],
            r["lag"]) for r in rows]
    assert got == [
        (1, 0, "pilot", 4, 2.0, 0.5, "kept", False, 0),
        (2, 0, "commit", 12, 9.0, 0.75, "trained", False, 1),
        (3, 1, "pilot", 4, 4.0, 1.0, "skipped_easy", True, 0),
    ]
    # prompt 8 is seen once per step in every run: 7 runs x 3 steps
    assert store.query("SELECT count(*) AS c FROM pass_rate_history WHERE prompt_id = 8")[0]["c"] == 21


def test_eval_curve_averages_benchmarks_and_attaches_costs(store):
    rows = store.query("SELECT * FROM eval_curve WHERE run_id = 'fam-pc-s0' ORDER BY step")
    assert [(r["step"], r["accuracy"], r["cumulative_sampled"], r["cumulative_trained"]) for r in rows] == [
        (0, 0.125, 0, 0),
        (1, 0.375, 50, 40),
        (2, 0.625, 110, 88),
        (3, 0.5, 180, 144),
    ]
    assert {(r["family"], r["method"], r["seed"]) for r in rows} == {(FAMILY, "pc", 0)}
    for (method, seed), (sampled, _, accs) in RUNS.items():
        rows = store.query("SELECT step, accuracy, cumulative_sampled FROM eval_curve WHERE run_id = ? ORDER BY step",
                           [run_id(method, seed)])
        assert [r["accuracy"] for r in rows] == [(a + b) / 2 for a, b in accs]
        assert [r["cumulative_sampled"] for r in rows] == [0, *cumsum(sampled)]


def test_rollouts_to_target(store):
    rows = store.query("SELECT * FROM rollouts_to_target ORDER BY family, seed")
    assert [(r["family"], r["seed"]) for r in rows] == [(FAMILY, 0), (FAMILY, 1)]
    for r in rows:
        exp = EXPECTED[r["seed"]]
        assert r["target"] == exp["target"]
        assert (r["grpo"], r["dapo"], r["pc"]) == (exp["grpo"], exp["dapo"], exp["pc"])
        assert r["grpo_over_pc"] == pytest.approx(exp["grpo_over_pc"])
        if exp["dapo_over_pc"] is None:
            assert r["dapo_over_pc"] is None
        else:
            assert r["dapo_over_pc"] == pytest.approx(exp["dapo_over_pc"])


def expected_report() -> dict:
    return {
        FAMILY: {
            "seeds": [
                {"seed": seed, "target": e["target"], "rollouts": {m: e[m] for m in ("grpo", "dapo", "pc")},
                 "grpo_over_pc": e["grpo_over_pc"], "dapo_over_pc": e["dapo_over_pc"]}
                for seed, e in sorted(EXPECTED.items())
            ],
            "median_grpo_over_pc": MEDIAN_GRPO_OVER_PC,
            "median_dapo_over_pc": MEDIAN_DAPO_OVER_PC,
        }
    }


def test_report_medians_across_seeds(store):
    rep = store.report()
    fam = rep[FAMILY]
    exp = expected_report()[FAMILY]
    assert set(rep) == {FAMILY}
    assert [s["seed"] for s in fam["seeds"]] == [0, 1]
    for got, want in zip(fam["seeds"], exp["seeds"]):
        assert got["target"] == want["target"]
        assert got["rollouts"] == want["rollouts"]
        assert got["grpo_over_pc"] == pytest.approx(want["grpo_over_pc"])
        assert got["dapo_over_pc"] == (None if want["dapo_over_pc"] is None else pytest.approx(want["dapo_over_pc"]))
    assert fam["median_grpo_over_pc"] == pytest.approx(MEDIAN_GRPO_OVER_PC)
    assert fam["median_dapo_over_pc"] == pytest.approx(MEDIAN_DAPO_OVER_PC)
    assert store.report(family=FAMILY) == rep
    assert store.report(family="no-such-family") == {}


def test_report_cli_json_and_table(store):
    out = subprocess.run([EXE, "report", "--store", str(store.path), "--json"], capture_output=True, text=True,
                         timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == json.loads(json.dumps(store.report()))
    got = json.loads(out.stdout)[FAMILY]
    assert got["median_grpo_over_pc"] == pytest.approx(MEDIAN_GRPO_OVER_PC)
    assert [s["rollouts"] for s in got["seeds"]] == [
        {"grpo": 200, "dapo": None, "pc": 110},
        {"grpo": 300, "dapo": 160, "pc": 40},
    ]

    table = subprocess.run([EXE, "report", "--store", str(store.path)], capture_output=True, text=True, timeout=60,
                           check=False)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert any(f"family {FAMILY}" in ln for ln in lines)
    seed0 = next(ln.split() for ln in lines if ln.split()[:1] == ["0"])
    seed1 = next(ln.split() for ln in lines if ln.split()[:1] == ["1"])
    median = next(ln.split() for ln in lines if ln.startswith("median"))
    assert seed0 == ["0", "0.5000", "200", "never", "110", f"{200 / 110:.2f}x", "-"]
    assert seed1 == ["1", "0.6250", "300", "160", "40", "7.50x", "4.00x"]
    assert median == ["median", f"{MEDIAN_GRPO_OVER_PC:.2f}x", "4.00x"]


# ---- SQL safety: user values reach SQL only as parameters ------------------------------------------------------
def test_report_with_an_injection_family_returns_nothing(store):
    assert store.report(family="x' OR 1=1 --") == {}
    assert store.report(family="fam' --") == {}


def test_get_run_with_a_quote_in_the_id(store):
    assert store.get_run("fam-pc-s0' OR '1'='1") is None
    assert store.get_run("it's") is None
    assert store.get_run("fam-pc-s0")["method"] == "pc"


def test_values_with_quotes_are_stored_verbatim(tmp_path):
    """Families and benchmarks with quotes go through as bound parameters; a run id with a quote is refused (run
    ids are held to letters, digits, '.', '_' and '-' since issue 18)."""
    st = Store(tmp_path / "q.duckdb").init()
    with pytest.raises(StoreError, match="Fix:"):
        st.register_run(RunRecord(run_id="o'brien-run", family="f", method="pc", preset="p", seed=0, config={},
                                  config_hash="h", kind="simulate"))
    rid = "obrien-run"
    st.register_run(RunRecord(run_id=rid, family="it's", method="pc", preset="p", seed=0, config={}, config_hash="h",
                              kind="simulate"))
    st.writer(rid).write_step(1, step_tables(rid, 1, 5, 4))
    st.add_eval_results([{"run_id": rid, "step": 1, "benchmark": "b'1", "accuracy": 0.5}])
    assert st.get_run(rid)["family"] == "it's"
    assert st.query("SELECT sampled_rollouts FROM steps WHERE run_id = ?", [rid]) == [{"sampled_rollouts": 5}]
    assert st.query("SELECT run_id FROM runs WHERE family = ?", ["it's"]) == [{"run_id": rid}]
    assert st.query("SELECT benchmark FROM eval_curve JOIN eval_results USING (run_id, step)") == [{"benchmark": "b'1"}]


# ---- a family without both GRPO and PC has no target ----------------------------------------------------------
def test_family_without_a_pc_run_has_no_target(tmp_path):
    """The target is min(GRPO peak, PC peak), so it needs both. Regression: DuckDB's ``least()`` skips NULLs,
    so a plain ``least(grpo_peak, pc_peak)`` gave a GRPO-only family target = GRPO peak and a report row."""
    st = Store(tmp_path / "grpo-only.duckdb").init()
    write_run(st, "fam-grpo-s0", "grpo", 0, [100, 100, 100], [64, 64, 64],
              [(0.125, 0.125), (0.25, 0.5), (0.5, 0.5), (0.25, 0.75)])
    assert st.query("SELECT * FROM rollouts_to_target") == []
    assert st.report() == {}
    write_run(st, "fam-pc-s1", "pc", 1, [50, 50, 50], [40, 40, 40],
              [(0.125, 0.125), (0.25, 0.5), (0.5, 0.5), (0.25, 0.75)])  # PC only, another seed
    assert st.report() == {}


# ---- store paths -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dirname", ["it's here", "with space", "star*dir", "runs[2024]", "[a-z]*", "{a,b}"])
def test_store_path_with_special_characters(tmp_path, dirname):
    """No path reaches DuckDB as a pattern (issue 18): a store under glob metacharacters works, and a sibling
    store whose path the glob would also have matched is never read."""
    path = tmp_path / dirname / "x.duckdb"
    st = Store(path).init()
    write_run(st, "fam-pc-s0", "pc", 0, [5, 6, 7], [4, 4, 4], [(0.125, 0.125), (0.25, 0.25), (0.5, 0.5), (0.5, 0.5)])
    decoy = Store(tmp_path / "a" / "x.duckdb").init()  # '[a-z]*' would match it as a pattern
    write_run(decoy, "fam-pc-s0", "pc", 0, [100, 100], [4, 4], [(0.125, 0.125), (0.25, 0.25), (0.5, 0.5)])
    assert st.query("SELECT count(*) AS n, sum(sampled_rollouts) AS s FROM steps") == [{"n": 3, "s": 18}]
    assert st.compact("fam-pc-s0") == 3
    assert st.query("SELECT count(*) AS n, sum(sampled_rollouts) AS s FROM steps") == [{"n": 3, "s": 18}]


@pytest.mark.parametrize("dirname", ["what?", "back\\slash"])
def test_store_path_duckdb_cannot_open_is_refused_with_a_fix(tmp_path, dirname):
    with pytest.raises(StoreError, match="Fix: choose a store path without"):
        Store(tmp_path / dirname / "x.duckdb")
