"""The store's ``decision_reasons`` view says, row for row, what ``Observations.reason`` says in Python: both are
rendered from pc_pipelines/allocation/reasons.py, and this checks the SQL rendering against DuckDB's printf."""

from __future__ import annotations

from pilot_cli import run_cli, sql
from reason_checks import disagreements

from pc_pipelines.allocation import Decision, Rule, Stage
from pc_pipelines.allocation.reasons import REASONS, render, template_for
from pc_pipelines.config import resolve
from pc_pipelines.simulator import record_simulation
from pc_pipelines.store import Store

SMALL = {"allocator.train_batch": 16, "sim.num_prompts": 1500, "sim.difficulty_spread": 3.0}
ALL_ON = {"allocator.band_strategy": "adaptive", "allocator.sampling_strategy": "survival",
          "allocator.pilot_strategy": "sequential", "allocator.pilot_wave": 4,
          "allocator.commit_strategy": "variance", "allocator.commit_mean": 16}
# easy_pool eviction on a small pool of easy prompts: within 12 steps prompts come back from the easy pool, some
# solved again (evicted), some not (back in the stream)
EASY_POOL = {"allocator.train_batch": 16, "allocator.n": 32, "allocator.n_pilot": 8, "sim.num_prompts": 200,
             "sim.difficulty_mean": -2.0, "sim.difficulty_spread": 1.0, "allocator.eviction_strategy": "easy_pool",
             "allocator.return_share": 0.25}
# the history prior on a small pool of spread-out prompts: within 12 steps it skips prompts on both sides
PRIOR = {"allocator.train_batch": 16, "sim.num_prompts": 200, "sim.difficulty_spread": 3.0,
         "allocator.screen_strategy": "posterior", "allocator.screen_discount": 1.0,
         "allocator.screen_min_evidence": 4.0, "allocator.screen_explore": 0.0, "allocator.screen_prior_strength": 0.5}
LABEL = {e.label: e for enum in (Decision, Stage, Rule) for e in enum}


def test_every_reason_in_the_view_is_the_python_rendering(tmp_path):
    st = Store(tmp_path / "s.duckdb")
    # compact_every 5 of 12 steps: reasons are read from catalog rows and from step files alike
    for run_id, method, extra in [("pc-all", "pc", ALL_ON), ("pc-paper", "pc", {}), ("dapo", "dapo", {}),
                                  ("grpo", "grpo", {}), ("pc-easy-pool", "pc", EASY_POOL),
                                  ("pc-prior", "pc", PRIOR), ("grpo-prior", "grpo", {**PRIOR, "sim.num_prompts": 48})]:
        cfg = resolve("simulator", {**SMALL, **extra}, method=method, seed=5)
        assert len(list(record_simulation(cfg, st, 12, run_id=run_id, compact_every=5))) == 12
    # lag is a trained row's only (0 elsewhere); PC trains a prompt at most once a step, GRPO twice only where a
    # small pool's draw holds it twice (a batch straddling an epoch boundary), both times with lag 0: one lag each
    rows = st.query("""SELECT o.*, coalesce(t.lag, 0) AS lag
                       FROM decision_reasons o
                       LEFT JOIN (SELECT run_id, step, prompt_id, max(lag) AS lag FROM prompt_observations
                                  WHERE decision = 'trained' GROUP BY ALL) t
                         ON o.decision = 'trained' AND t.run_id = o.run_id AND t.step = o.step
                            AND t.prompt_id = o.prompt_id""")
    assert st.query("SELECT count(*) AS n FROM prompt_observations WHERE decision <> 'trained' AND lag <> 0") == [
        {"n": 0}]
    # one decision per prompt per round: every row but a first pilot wave that went on to its later wave
    assert len(rows) == st.query("SELECT count(*) AS n FROM prompt_observations WHERE decision <> 'continued'"
                                 )[0]["n"] > 1000
    went_on = st.query("SELECT o.run_id, o.n, d.n AS evidence FROM prompt_observations o JOIN decision_reasons d "
                       "USING (run_id, step, round, prompt_id, stage) WHERE o.decision = 'continued'")
    assert went_on and all(r["n"] < r["evidence"] for r in went_on)  # its decision read more than the first wave
    used, evicted, returned = set(), 0, {True: 0, False: 0}
    sides = {(r["run_id"], r["rule"]) for r in rows if r["decision"] == "screened_by_prior"}
    assert sides == {(run, side) for run in ("pc-prior", "grpo-prior") for side in ("prior_easy", "prior_hard")}
    for r in rows:
        key = (Decision(LABEL[r["decision"]]), Stage(LABEL[r["stage"]]), Rule(LABEL[r["rule"]]))
        expected = render(*key, p_hat=r["p_hat"], n=r["n"], lag=r["lag"], band_lower=r["band_lower"],
                          band_upper=r["band_upper"], evicted=r["evicted"], returned=r["returned"],
                          **({k: r[k] for k in ("prior_useful", "prior_mean", "prior_evidence", "prior_observations")}
                             if r["decision"] == "screened_by_prior" else {}))
        assert r["reason"] == expected, (r, expected)
        assert r["reason"].startswith("returned from the easy pool; ") == r["returned"]
        used.add(template_for(*key))
        evicted += r["evicted"]
        if r["returned"]:
            assert r["run_id"] == "pc-easy-pool" and r["stage"] == "pilot"
            returned[r["evicted"]] += 1
    # the runs reach every template, so every SQL branch was compared; but a continued first wave's, whose row is
    # its decision's evidence and not a decision of its own (rendered in Python: tests/unit/allocation)
    assert used | {template_for(Decision.CONTINUED, Stage.PILOT, Rule.NONE)} == set(REASONS)
    assert evicted > 0 and any(r["lag"] > 0 for r in rows)
    assert returned[True] > 0 and returned[False] > 0  # solved again and not: both suffixes were compared
    # each step counts its returns, and only the easy-pool run has any
    assert st.query("""SELECT run_id, sum(s.returned) AS steps_count,
                              (SELECT count(*) FROM prompt_observations o
                               WHERE o.run_id = s.run_id AND o.returned) AS rows
                       FROM steps s GROUP BY run_id ORDER BY run_id""") == [
        {"run_id": r, "steps_count": n, "rows": n}
        for r, n in [("dapo", 0), ("grpo", 0), ("grpo-prior", 0), ("pc-all", 0),
                     ("pc-easy-pool", sum(returned.values())), ("pc-paper", 0), ("pc-prior", 0)]]
    # and each step counts the prior's skips, and only the prior's runs have any
    assert st.query("""SELECT run_id, sum(s.screened_by_prior) AS steps_count,
                              (SELECT count(*) FROM prompt_observations o
                               WHERE o.run_id = s.run_id AND o.decision = 'screened_by_prior') AS rows
                       FROM steps s GROUP BY run_id HAVING rows > 0 ORDER BY run_id""") == [
        {"run_id": r, "steps_count": n, "rows": n}
        for r, n in [(r, sum(1 for x in rows if x["run_id"] == r and x["decision"] == "screened_by_prior"))
                     for r in ("grpo-prior", "pc-prior")]]


def test_every_reason_agrees_with_its_own_numbers_over_adaptive_band_runs(tmp_path):
    """Issue 55: a whole PC run with the adaptive band, recorded by ``pilot-commit simulate --store`` through the real
    store: each ``decision_reasons`` row's text shows the band in force for that row when it was decided (rounds
    widen the band during a step), its p_hat as the comparison reads true, and agrees with its decision."""
    store = tmp_path / "s.duckdb"
    common = ["simulate", "--store", str(store), "--method", "pc", "--train-batch", "16", "--prompts", "1500",
              "--spread", "3", "--steps", "30", "--set", "allocator.band_strategy=adaptive"]
    run_cli(*common, "--run-name", "adaptive", "--seed", "3", check_rc=0)
    run_cli(*common, "--run-name", "all-on", "--seed", "5",
            *[a for k, v in ALL_ON.items() if k != "allocator.band_strategy" for a in ("--set", f"{k}={v}")],
            check_rc=0)
    rows = sql(store, "SELECT * FROM decision_reasons")
    assert len(rows) > 2000
    assert disagreements(rows) == []
    # the runs hold what the old text got wrong: pilots skipped as easy in a round before the step widened its band
    # past their p_hat (the step's band would have said "p_hat > band upper" of a band that contains it)
    old = sql(store, """SELECT o.run_id, count(*) AS n FROM decision_reasons o JOIN steps s USING (run_id, step)
                        WHERE o.decision = 'skipped_easy' AND o.rule = 'band' AND o.p_hat <= s.band_upper
                        GROUP BY ALL ORDER BY ALL""")
    assert [r["run_id"] for r in old] == ["adaptive", "all-on"] and min(r["n"] for r in old) > 0, old
    # and the same p_hat kept in one round of a step (the band widened: the batch was short) and skipped in another:
    # each text gives the band of its own round
    pairs = sql(store, """SELECT k.run_id, k.step, k.p_hat, s.reason AS skipped, k.reason AS kept
                          FROM decision_reasons k JOIN decision_reasons s
                            ON s.run_id = k.run_id AND s.step = k.step AND s.p_hat = k.p_hat AND s.round <> k.round
                          WHERE k.decision = 'kept' AND k.rule = 'adaptive_band' AND s.decision = 'skipped_easy'
                            AND s.rule = 'band' LIMIT 1""")
    assert pairs, "no step kept a p_hat in one round and skipped it in another"
    p = format(pairs[0]["p_hat"], ".4g")
    assert pairs[0]["skipped"].startswith(f"p_hat={p} > band upper ") and f"p_hat={p} in the widened band [" in \
        pairs[0]["kept"], pairs[0]
