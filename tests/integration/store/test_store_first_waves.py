"""Issue 52: every pilot wave is its own observation in the store. A question a user asks SQL ("how often does a
first pilot wave split?") needs every first wave with its true n and n_correct; before store v10 a first wave that
decided nothing was pooled with its later wave into one row, so such a query saw only the first waves that decided
early (all equal), and ``sim-fit`` fitted the pool's difficulty on them."""

from __future__ import annotations

from pc_pipelines.config import resolve
from pc_pipelines.simulator import record_simulation
from pc_pipelines.store import Store

SEQUENTIAL = {"allocator.train_batch": 16, "allocator.n": 16, "allocator.n_pilot": 8, "sim.num_prompts": 1500,
              "sim.difficulty_spread": 3.0, "allocator.pilot_strategy": "sequential", "allocator.pilot_wave": 2,
              "allocator.band_strategy": "adaptive"}


def test_every_first_wave_is_a_row_with_its_own_counts(tmp_path):
    st = Store(tmp_path / "s.duckdb")
    cfg = resolve("simulator", SEQUENTIAL, method="pc", seed=3)
    assert len(list(record_simulation(cfg, st, 10, run_id="pc", compact_every=4))) == 10
    first = st.query("""SELECT count(*) AS waves, count(*) FILTER (WHERE n = 2) AS of_two,
                               count(*) FILTER (WHERE n_correct > 0 AND n_correct < n) AS split,
                               count(*) FILTER (WHERE decision = 'continued') AS went_on
                        FROM pass_rate_history WHERE stage = 'pilot' AND wave = 0""")[0]
    steps = st.query("SELECT sum(prompts_consumed) AS piloted, sum(pilot_rollouts) AS rollouts, "
                     "sum(early_decided) AS early FROM steps")[0]
    assert first["waves"] == first["of_two"] == steps["piloted"]  # every piloted prompt's first wave, n = 2
    assert first["went_on"] == steps["piloted"] - steps["early"] > 0
    assert first["split"] > 0  # a first wave of 2 that split has a row of its own (pooled before v10)
    # each rollout in exactly one row; a decision row's evidence is every wave of its round
    assert st.query("SELECT sum(n) AS n FROM pass_rate_history WHERE stage = 'pilot'")[0]["n"] == steps["rollouts"]
    later = st.query("SELECT DISTINCT n, evidence_n FROM pass_rate_history WHERE stage = 'pilot' AND wave = 1")
    assert later == [{"n": 6, "evidence_n": 8}]
    # one decision per prompt per round in decision_reasons, with the rollouts it read
    decided = st.query("SELECT count(*) AS k, count(*) FILTER (WHERE n = 8) AS full FROM decision_reasons "
                       "WHERE stage = 'pilot'")[0]
    assert decided["k"] == steps["piloted"] and decided["full"] == first["went_on"]
