"""The store's ``decision_reasons`` view says, row for row, what ``Observations.reason`` says in Python: both are
rendered from pc_pipelines/allocation/reasons.py, and this checks the SQL rendering against DuckDB's printf."""

from __future__ import annotations

from pc_pipelines.allocation import Decision, Rule, Stage
from pc_pipelines.allocation.reasons import REASONS, render, template_for
from pc_pipelines.config import resolve
from pc_pipelines.sim_runs import record_simulation
from pc_pipelines.store import Store

SMALL = {"allocator.train_batch": 16, "sim.num_prompts": 1500, "sim.difficulty_spread": 3.0}
ALL_ON = {"allocator.band_strategy": "adaptive", "allocator.sampling_strategy": "survival",
          "allocator.pilot_strategy": "sequential", "allocator.pilot_wave": 4,
          "allocator.commit_strategy": "variance", "allocator.commit_mean": 16}
LABEL = {e.label: e for enum in (Decision, Stage, Rule) for e in enum}


def test_every_reason_in_the_view_is_the_python_rendering(tmp_path):
    st = Store(tmp_path / "s.duckdb")
    # compact_every 5 of 12 steps: reasons are read from catalog rows and from step files alike
    for run_id, method, extra in [("pc-all", "pc", ALL_ON), ("pc-paper", "pc", {}), ("dapo", "dapo", {}),
                                  ("grpo", "grpo", {})]:
        cfg = resolve("simulator", {**SMALL, **extra}, method=method, seed=5)
        assert len(list(record_simulation(cfg, st, 12, run_id=run_id, compact_every=5))) == 12
    rows = st.query("""SELECT o.*, p.lag, s.band_lower, s.band_upper
                       FROM decision_reasons o
                       JOIN prompt_observations p USING (run_id, step, round, prompt_id, stage, decision)
                       JOIN steps s USING (run_id, step)""")
    assert len(rows) == st.query("SELECT count(*) AS n FROM prompt_observations")[0]["n"] > 1000
    used, evicted = set(), 0
    for r in rows:
        key = (Decision(LABEL[r["decision"]]), Stage(LABEL[r["stage"]]), Rule(LABEL[r["rule"]]))
        expected = render(*key, p_hat=r["p_hat"], n=r["n"], lag=r["lag"], band_lower=r["band_lower"],
                          band_upper=r["band_upper"], evicted=r["evicted"])
        assert r["reason"] == expected, (r, expected)
        used.add(template_for(*key))
        evicted += r["evicted"]
    assert used == set(REASONS)  # the runs reach every template, so every SQL branch was compared
    assert evicted > 0
