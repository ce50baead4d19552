"""The strategies' decisions reach the store with their reasons (issue 7): ask SQL why a prompt was kept or skipped."""

from __future__ import annotations

from pc_pipelines.config import resolve
from pc_pipelines.simulator import record_simulation
from pc_pipelines.store import Store

ALL_ON = {
    "allocator.band_strategy": "adaptive", "allocator.sampling_strategy": "survival",
    "allocator.pilot_strategy": "sequential", "allocator.pilot_wave": 4,
    "allocator.commit_strategy": "variance", "allocator.commit_mean": 16,
    "allocator.train_batch": 16, "sim.num_prompts": 3000, "sim.difficulty_spread": 3.0,
}


def test_strategy_decisions_and_reasons_are_queryable(tmp_path):
    st = Store(tmp_path / "s.duckdb")
    cfg = resolve("simulator", ALL_ON, method="pc", seed=3)
    steps = list(record_simulation(cfg, st, 12, run_id="plus"))
    assert len(steps) == 12

    row = st.query("""SELECT sum(early_decided) AS early, sum(pilot_rollouts_saved) AS saved, min(survival) AS s_min,
                             max(survival) AS s_max, sum(widened) AS widened, min(band_lower) AS lo, max(band_upper) AS hi,
                             sum(pilot_rollouts) AS pilots, sum(prompts_consumed) AS consumed
                      FROM steps WHERE run_id = 'plus'""")[0]
    assert row["early"] > 0 and row["saved"] == row["early"] * 12  # 16 - 4 per early decision
    assert row["pilots"] + row["saved"] == row["consumed"] * 16
    assert 0 < row["s_min"] <= row["s_max"] <= 1
    assert row["lo"] <= 0.125 and row["hi"] >= 0.75

    rules = {r["rule"]: r["n"] for r in st.query(
        "SELECT rule, count(*) AS n FROM decision_reasons WHERE run_id = 'plus' GROUP BY rule")}
    assert rules.get("early_wave", 0) == row["early"]
    assert rules.get("adaptive_band", 0) == row["widened"]
    early = st.query("""SELECT n, p_hat, decision, reason FROM decision_reasons
                        WHERE run_id = 'plus' AND rule = 'early_wave' ORDER BY step, prompt_id LIMIT 5""")
    for r in early:
        assert r["n"] == 4 and r["p_hat"] in (0.0, 1.0)
        assert r["decision"] == ("skipped_easy" if r["p_hat"] == 1 else "deferred_hard")
        assert r["reason"].startswith("first pilot wave all ") and "decided without the second wave" in r["reason"]
    kept = st.query("""SELECT o.reason, s.band_lower, s.band_upper FROM decision_reasons o JOIN steps s USING (run_id, step)
                       WHERE o.run_id = 'plus' AND o.decision = 'kept' AND o.rule = 'band' AND s.widened = 0
                       ORDER BY o.step, o.prompt_id LIMIT 1""")  # a step whose band never widened: the step's band
    assert kept and f" in band [{kept[0]['band_lower']:.4g}, {kept[0]['band_upper']:.4g}]" in kept[0]["reason"]
    # trained rows count the commit rollouts: variance-proportional, in [commit_min 4, 2 x 16], mean 16 per round
    sizes = st.query("""SELECT min(n) AS lo, max(n) AS hi, avg(n) AS mean FROM prompt_observations
                        WHERE run_id = 'plus' AND decision = 'trained'""")[0]
    assert 4 <= sizes["lo"] < sizes["hi"] <= 32
    assert abs(sizes["mean"] - 16) < 1e-9
