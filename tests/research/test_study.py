"""The efficiency study's library (research/study.py): rollouts-to-target pairs, per-run statistics from a real
store written by the simulator, the tables, and the job runner's failure path."""

import json
import math
import sys

import pytest

from pc_pipelines.reports import RunCurves
from pc_pipelines.store import Store
from research import study


def curve(run_id, method, evals, seed=0):
    return RunCurves(
        run_id=run_id, family="f", method=method, seed=seed,
        eval_step=tuple(range(-1, len(evals) - 1)), eval_rollouts=tuple(r for r, _ in evals),
        eval_accuracy=tuple(a for _, a in evals), step=(), cumulative_sampled=(), cumulative_trained=(),
        reward_std=(), informative_share=(),
    )


def test_versus_worked_example_of_the_module_docstring():
    grpo = curve("g", "grpo", [(0, 0.70), (10240, 0.80), (20480, 0.84), (30720, 0.83)])
    pc = curve("p", "pc", [(0, 0.70), (15360, 0.82), (30720, 0.86)])
    dapo = curve("d", "dapo", [(0, 0.70), (30720, 0.81), (61440, 0.85)])
    v = study.versus(pc, grpo, dapo)
    assert v.target == pytest.approx(0.84)
    assert (v.rollouts, v.grpo, v.dapo) == (30720, 20480, 61440)
    assert v.grpo_over == pytest.approx(20480 / 30720)
    assert v.dapo_over == pytest.approx(2.0)


def test_versus_when_a_method_never_reaches_the_target():
    grpo = curve("g", "grpo", [(0, 0.5), (100, 0.9)])
    pc = curve("p", "pc", [(0, 0.5), (50, 0.95)])
    dapo = curve("d", "dapo", [(0, 0.5), (300, 0.6)])
    v = study.versus(pc, grpo, dapo)
    assert v.target == pytest.approx(0.9)
    assert (v.rollouts, v.grpo, v.dapo) == (50, 100, None)
    assert v.grpo_over == pytest.approx(2.0) and v.dapo_over is None
    assert study.first_at_or_above(dapo, 0.61) is None
    empty = study.versus(curve("e", "pc", []), grpo)
    assert empty.target is None and empty.grpo_over is None


def test_smoothed_is_the_trailing_mean_of_the_docstring_example():
    c = curve("g", "grpo", [(0, 0.70), (10, 0.80), (20, 0.84), (30, 0.83)])
    s = study.smoothed(c, 3)
    assert s.eval_accuracy == pytest.approx((0.70, 0.75, 0.78, (0.80 + 0.84 + 0.83) / 3))
    assert s.eval_rollouts == c.eval_rollouts and s.eval_step == c.eval_step
    assert study.smoothed(c, 1) == c
    with pytest.raises(ValueError, match="window"):
        study.smoothed(c, 0)


def test_versus_on_smoothed_curves_ignores_a_single_lucky_eval():
    # GRPO spikes once to .80 at 20 then sits at .74; PC climbs to .80 at 30. Raw: target = min(.80, .80), GRPO
    # "reaches" it at its spike (20), PC at 30: 0.67x. Smoothed over 3: GRPO .70 .72 .747 .76 .76, PC .70 .715 .73
    # .763 .777: target .76, both first at 30: 1.0x.
    grpo = curve("g", "grpo", [(0, 0.70), (10, 0.74), (20, 0.80), (30, 0.74), (40, 0.74)])
    pc = curve("p", "pc", [(0, 0.70), (10, 0.73), (20, 0.76), (30, 0.80), (40, 0.77)])
    raw, smooth = study.versus(pc, grpo), study.versus(pc, grpo, window=3)
    assert (raw.rollouts, raw.grpo) == (30, 20)
    assert smooth.target == pytest.approx(0.76)
    assert (smooth.rollouts, smooth.grpo) == (30, 30)
    assert smooth.grpo_over == pytest.approx(1.0)


def test_median_and_versus_markdown_rows():
    assert study.median([3.0, None, 1.0, 2.0]) == 2.0
    assert study.median([1.0, 4.0]) == 2.5
    assert study.median([None]) is None
    grpo = curve("g", "grpo", [(0, 0.5), (100, 0.9)])
    rows = {"wide": [study.versus(curve("p0", "pc", [(0, 0.5), (50, 0.9)]), grpo),
                     study.versus(curve("p1", "pc", [(0, 0.5), (25, 0.9)], seed=1), grpo),
                     study.versus(curve("p2", "pc", [(0, 0.5), (200, 0.9)], seed=2), grpo)]}
    md = study.versus_markdown(rows)
    assert "| wide | 0 | 0.9000 | 50 | 100 | never | 2.00x | - |" in md
    assert "| **wide** median | | | | | | 2.00x | - |" in md  # median of 2.0, 4.0, 0.5


@pytest.fixture(scope="module")
def sim_store(tmp_path_factory):
    store = Store(tmp_path_factory.mktemp("study") / "s.duckdb")
    common = ("sim.num_prompts=2000", "allocator.train_batch=8", "training.eval_every=5")
    jobs = [study.StudyJob(f"sim-{m}", m, 0, 20, "simulator", "fam", common) for m in ("grpo", "dapo", "pc")]
    study.simulate_jobs(jobs, store, show_progress=False)
    return store, jobs


def test_run_stats_agree_with_the_ledger(sim_store):
    store, jobs = sim_store
    stats = study.run_stats(store, [j.run_id for j in jobs])
    g, d, p = stats["sim-grpo"], stats["sim-dapo"], stats["sim-pc"]
    # GRPO: one round, b_t fresh prompts, n rollouts each, every step full.
    assert (g.steps, g.train_batch, g.fill_rate, g.full_share, g.multi_round_share) == (20, 8, 1.0, 1.0, 0.0)
    assert g.prompts_consumed == 20 * 8 and g.sampled_rollouts == g.trained_rollouts == 20 * 8 * 64
    assert g.evicted == 0 and g.mean_rounds == 1.0
    # The aggregates are the steps table's sums, whatever the method.
    for s in (d, p):
        row = store.query(
            "SELECT sum(sampled_rollouts) AS s, sum(trained_rollouts) AS t, sum(prompts_consumed) AS c, "
            "sum(evicted) AS e, avg((rounds > 1)::INT) AS m, avg(least(trained_prompts / 8.0, 1.0)) AS f "
            "FROM steps WHERE run_id = ?", [s.run_id])[0]
        assert (s.sampled_rollouts, s.trained_rollouts, s.prompts_consumed, s.evicted) == (row["s"], row["t"], row["c"], row["e"])
        assert s.multi_round_share == pytest.approx(row["m"]) and s.fill_rate == pytest.approx(row["f"])
        assert len(s.fill_per_step) == len(s.rounds_per_step) == 20
    # PC pilots more prompts than it trains and draws 3 b_t fresh prompts per round.
    assert p.prompts_consumed >= 20 * 24 and p.sampled_rollouts > p.trained_rollouts
    md = study.stats_markdown([g, d, p])
    assert "| `sim-grpo` | GRPO | 0 | 20 | 10,240 | 10,240 | 1.000 | 100% | 0% | 0 | 160 |" in md


def test_rollout_breakdown_accounts_for_every_sampled_rollout(sim_store):
    store, jobs = sim_store
    strategies = ("allocator.band_strategy=adaptive", "allocator.sampling_strategy=survival",
                  "allocator.pilot_strategy=sequential", "allocator.pilot_wave=4",
                  "allocator.commit_strategy=variance", "allocator.commit_mean=16")
    four = study.StudyJob("sim-pc-four", "pc", 0, 20, "simulator", "fam", jobs[0].overrides + strategies)
    study.simulate_jobs([four], store, show_progress=False)
    b = study.rollout_breakdown(store, [j.run_id for j in jobs] + [four.run_id, "no-such-run"])
    assert set(b) == {"sim-grpo", "sim-dapo", "sim-pc", "sim-pc-four"}
    for x in b.values():
        assert min(x.early_screen, x.screened_out, x.surplus, x.kept_unused) >= 0
        assert x.trained + x.early_screen + x.screened_out + x.surplus + x.kept_unused == x.sampled
    g, d, p, f = b["sim-grpo"], b["sim-dapo"], b["sim-pc"], b["sim-pc-four"]
    assert (g.sampled, g.trained, g.headroom) == (20 * 8 * 64, 20 * 8 * 64, 1.0)
    # DAPO: b_g = 3 b_t groups a round, b_t trained; the rest were zero-variance or past a full batch.
    assert d.surplus > 0 and d.early_screen == d.kept_unused == 0
    # Paper PC: one pilot wave, so nothing is decided early; its pilots outside the band are screened out.
    assert p.early_screen == 0 and p.screened_out > 0 and p.headroom > 1.0
    # Sequential 4 + 12: each early decision cost its 4-rollout wave and saved the 12 the ledger counts.
    saved = store.query("SELECT sum(pilot_rollouts_saved) AS s FROM steps WHERE run_id = 'sim-pc-four'")[0]["s"]
    assert f.early_screen > 0 and f.early_screen * 12 == saved * 4
    # The same numbers in SQL, from the store's view
    row = store.query("SELECT sampled, trained, early_screen, headroom FROM rollout_breakdown WHERE run_id = 'sim-pc-four'")
    assert row == [{"sampled": f.sampled, "trained": f.trained, "early_screen": f.early_screen,
                    "headroom": pytest.approx(f.headroom)}]
    md = study.breakdown_markdown({"GRPO": g, "all four": f})
    assert "| GRPO | 512 | 512 | 0 | 0 | 0 | 0 | 1.00x |" in md
    assert f"| {f.headroom:.2f}x |" in md


def test_versus_on_raw_evals_is_the_stores_rollouts_to_target_view(sim_store):
    """The study and the store share one rule (pc_pipelines/store/rollouts_to_target.py): PC's latest run against
    GRPO and DAPO of its seed, unsmoothed, gives the view's target, rollouts and ratios."""
    store, _ = sim_store
    base = study.baselines(store, "fam")  # the latest run of each (method, seed), the runs the view compares
    v = study.versus(base[("pc", 0)], base[("grpo", 0)], base[("dapo", 0)])
    row = store.query("SELECT * FROM rollouts_to_target WHERE family = 'fam' AND seed = 0")[0]
    assert (v.target, v.rollouts, v.grpo, v.dapo) == (row["target"], row["pc"], row["grpo"], row["dapo"])
    assert (v.grpo_over, v.dapo_over) == (row["grpo_over_pc"], row["dapo_over_pc"])


def test_simulate_jobs_reuses_finished_runs(sim_store):
    store, jobs = sim_store
    before = store.query("SELECT run_id, created_at FROM runs ORDER BY run_id")
    n_steps = store.query("SELECT count(*) AS n FROM steps")[0]["n"]
    study.simulate_jobs(jobs, store, show_progress=False)
    assert store.query("SELECT run_id, created_at FROM runs ORDER BY run_id") == before
    assert store.query("SELECT count(*) AS n FROM steps")[0]["n"] == n_steps


def test_plots_are_written(sim_store, tmp_path):
    store, jobs = sim_store
    stats = list(study.run_stats(store, [j.run_id for j in jobs]).values())
    fill = study.plot_per_step(stats, tmp_path / "fill.png", "fill")
    rounds = study.plot_per_step(stats, tmp_path / "rounds.png", "rounds")
    curves = study.curves_by_run(store, [j.run_id for j in jobs])
    var = study.plot_variants({"GRPO": [curves["sim-grpo"]], "PC wide": [curves["sim-pc"]]}, tmp_path / "v.png", "t")
    for p in (fill, rounds, var):
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 5000


def test_job_argv_carries_the_study_settings(tmp_path):
    job = study.StudyJob("r", "pc", 3, 50, "efficiency", "fam", ("allocator.p_upper=0.9375",))
    argv = job.argv(tmp_path / "s.duckdb", tmp_path / "runs", tmp_path / "cache")
    assert argv[:3] == [sys.executable, "-m", "pc_pipelines.cli"]
    pairs = dict(zip(argv[3:], argv[4:]))
    assert (pairs["--preset"], pairs["--method"], pairs["--seed"], pairs["--steps"], pairs["--run-name"]) == (
        "efficiency", "pc", "3", "50", "r")
    assert pairs["--set"] == "allocator.p_upper=0.9375" and "--resume" in argv and "--json" in argv
    assert "--no-final-eval" in argv  # a study keeps its evaluation schedule (no extra evaluation at its last step)
    assert study.primary_jobs([0, 1], 10, "efficiency", "fam")[4].run_id == "fam-dapo-s1"


def test_run_jobs_fails_with_the_log_tail_and_keeps_nothing_running(tmp_path):
    store = Store(tmp_path / "s.duckdb")
    bad = study.StudyJob("bad", "grpo", 0, 2, "no-such-preset", "fam")
    with pytest.raises(study.StudyError, match=r"(?s)study job bad exited with 2.*unknown preset 'no-such-preset'.*re-run"):
        study.run_jobs([bad], store, tmp_path / "runs", workers=1, show_progress=False)
    assert (tmp_path / "runs" / "logs" / "bad.log").exists()
    with pytest.raises(study.StudyError, match="workers=0"):
        study.run_jobs([bad], store, tmp_path / "runs", workers=0, show_progress=False)


def test_presets_efficiency_is_the_embedded_task_at_b_t_16():
    from pc_pipelines.config import resolve

    eff, emb = resolve("efficiency", method="pc"), resolve("embedded", method="pc")
    assert eff.allocator.train_batch == 16 and eff.allocator.sampling_batch == 48
    assert (eff.allocator.pilot_n, eff.allocator.commit_n) == (16, 48)
    assert (eff.allocator.p_lower, eff.allocator.p_upper, eff.allocator.p_solve) == (0.125, 0.75, 1.0)
    # Same task and policy as the embedded default, so the same cached warm start.
    assert json.dumps(eff.task.__dict__, sort_keys=True, default=str) == json.dumps(emb.task.__dict__, sort_keys=True, default=str)
    assert eff.policy == emb.policy and eff.training == emb.training


def test_per_step_plot_colours_by_variant_when_labelled(sim_store, tmp_path, monkeypatch):
    """Two variants of one method (the paper's PC with strict and with easy_pool eviction) read apart: with
    ``labels`` each variant gets its own colour and legend entry; without, runs are coloured by method."""
    store, jobs = sim_store
    stats = list(study.run_stats(store, [j.run_id for j in jobs]).values())
    seen = {}
    save = study.save_figure

    def capture(fig, out):
        ax = fig.axes[0]
        seen[out.name] = ([t.get_text() for t in ax.get_legend().get_texts()],
                          {line.get_gid(): line.get_color() for line in ax.get_lines()})
        return save(fig, out)

    monkeypatch.setattr(study, "save_figure", capture)
    ids = [s.run_id for s in stats]
    study.plot_per_step(stats, tmp_path / "by_method.png", "fill")
    labels = {ids[0]: "strict", **{r: "easy_pool" for r in ids[1:]}}
    study.plot_per_step(stats, tmp_path / "by_variant.png", "fill", labels=labels)
    legend, colors = seen["by_variant.png"]
    assert legend == ["strict", "easy_pool"]
    assert colors[f"run:{ids[0]}"] != colors[f"run:{ids[1]}"]
    assert len({colors[f"run:{r}"] for r in ids[1:]}) == 1  # one colour per variant
    assert "strict" not in seen["by_method.png"][0]


def test_next_steps_reaches_the_budget_and_always_grows():
    assert study.next_steps(0, 0, 1000, first_guess=10) == 10
    assert study.next_steps(10, 500, 1000) == 20
    assert study.next_steps(10, 999, 1000) == 11
    # a run whose steps got dearer: the recent rate (100 a step, mean 50) plans fewer steps, never more
    assert study.next_steps(10, 500, 1000, rate=100.0) == 15
    assert study.next_steps(10, 500, 1000, rate=10.0) == 20
    assert study.next_steps(10, 1000, 1000) is None


def test_recent_rate_is_the_mean_of_the_last_steps_in_the_store(tmp_path):
    from pc_pipelines.config import resolve
    from pc_pipelines.simulator import record_simulation

    st = Store(tmp_path / "s.duckdb").init()
    cfg = resolve("simulator", {"allocator.train_batch": 16, "sim.num_prompts": 600}, method="pc", seed=3)
    assert len(list(record_simulation(cfg, st, 12, run_id="pc", compact_every=None))) == 12
    per_step = [r["sampled_rollouts"] for r in st.query("SELECT sampled_rollouts FROM steps ORDER BY step")]
    assert study.recent_rate(st, "pc", last=4) == pytest.approx(sum(per_step[-4:]) / 4)
    assert study.recent_rate(st, "other") is None


def test_ratio_counts_a_run_that_never_reaches_the_target_as_infinitely_costly():
    assert study.ratio(20_000, 10_000) == 2.0
    assert study.ratio(20_000, None) == 0.0 and study.ratio(None, 10_000) == math.inf and study.ratio(None, None) is None


def test_a_ratio_cell_says_inf_when_only_the_base_never_reached_the_target():
    assert study.ratio_cell(math.inf) == "inf"
    assert study.ratio_cell(study.ratio(30_000, 20_000)) == "1.50x"
    assert study.ratio_cell(None) == "-"
