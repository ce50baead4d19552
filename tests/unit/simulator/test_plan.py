"""The budget planner (:mod:`pc_pipelines.simulator.plan`): a run cut to its first steps, and candidates ranked by
the fitted simulator's rollouts to the common target, the way the law says."""

import numpy as np

from pc_pipelines.simulator.fit import RunObservations
from pc_pipelines.simulator.plan import Candidate, default_candidates, first_steps, rank, resample_steps


def test_first_steps_keeps_only_what_the_run_had_measured():
    run = RunObservations(run_id="r", method="grpo", seed=0, steps=30, group_step=np.array([0, 5, 25]),
                          group_sigma=np.array([0.1, 0.2, 0.3]), group_size=np.array([4.0, 4, 4]),
                          eval_step=np.array([-1, 9, 19, 29]), eval_accuracy=np.array([0.5, 0.6, 0.7, 0.8]),
                          first_step=np.array([0, 12, 22]), first_n=np.array([4, 4, 4]),
                          first_correct=np.array([1, 2, 3]))
    cut = first_steps(run, 20)
    assert cut.steps == 20 and cut.group_step.tolist() == [0, 5] and cut.group_sigma.tolist() == [0.1, 0.2]
    assert cut.eval_step.tolist() == [-1, 9, 19] and cut.first_correct.tolist() == [1, 2]


def test_default_candidates_cover_grpo_sizes_and_pc_budgets():
    names = [c.name for c in default_candidates()]
    assert names[:4] == ["GRPO n=8", "GRPO n=16", "GRPO n=32", "GRPO n=64"]
    assert "PC p2+6/c8" in names and names[-2:] == ["GRPO n=8 + prior", "PC p2+6/c8 + prior"] and len(names) == 10
    best = next(c for c in default_candidates() if c.name == "PC p2+6/c8")
    assert best.set_flags() == ["--set", "allocator.pilot_strategy=sequential", "--set", "allocator.n_pilot=8",
                                "--set", "allocator.pilot_wave=2",
                                "--set", "allocator.commit_mean=8"]


SIM = {"num_prompts": 500, "difficulty_mean": 0.0, "difficulty_spread": 1.5, "law": "fitted", "law_rate": 0.05,
       "law_noise_scale": 1e6}
GRPO = [Candidate(f"GRPO n={n}", "grpo", (("allocator.n", n),)) for n in (8, 64)]


def test_rank_follows_the_law():
    # group size does not matter (gamma 0): the cheaper small groups reach the target with fewer rollouts
    rows = rank("bench", {**SIM, "law_noise_power": 0.0}, GRPO, seeds=[1], steps=40, eval_every=1)
    assert [r.candidate.name for r in rows] == ["GRPO n=8", "GRPO n=64"]
    assert rows[0].sampled_per_step == 128 and rows[1].sampled_per_step == 1024
    # a group's noise falls as n^-4 (and dominates at n = 8): groups 8x larger gain ~50x more per step and win
    rows = rank("bench", {**SIM, "law_noise_scale": 1e8, "law_noise_power": 4.0}, GRPO, seeds=[1], steps=40, eval_every=1)
    assert [r.candidate.name for r in rows] == ["GRPO n=64", "GRPO n=8"]
    assert all(r.reached == 1 for r in rows)


def test_plan_refuses_runs_shorter_than_the_fit_steps():
    import pytest

    from pc_pipelines.errors import ConfigError
    from pc_pipelines.simulator.plan import plan

    run = RunObservations(run_id="short-run", method="grpo", seed=0, steps=6, group_step=np.array([0, 5]),
                          group_sigma=np.array([0.1, 0.2]), group_size=np.array([4.0, 4]),
                          eval_step=np.array([-1, 5]), eval_accuracy=np.array([0.5, 0.6]),
                          first_step=np.array([0, 1]), first_n=np.array([4, 4]), first_correct=np.array([1, 2]))
    with pytest.raises(ConfigError) as e:
        plan([run], "bench", fit_steps=20, horizon=10, seeds=[0])
    msg = str(e.value)
    assert "\n" not in msg and "short-run" in msg and "only 6 steps" in msg and "Fix: fit on 6 steps or fewer" in msg
    assert "--fit-steps" in msg and "fit_steps" in msg  # the command's flag and the asset's field


def test_resample_steps_draws_whole_steps_and_keeps_the_evaluations():
    # step 0 trained two groups, step 1 one, step 2 none; first visits at steps 0 and 2
    run = RunObservations(run_id="r", method="grpo", seed=0, steps=3, group_step=np.array([1, 0, 0]),
                          group_sigma=np.array([0.3, 0.1, 0.2]), group_size=np.array([8.0, 4, 4]),
                          eval_step=np.array([-1, 2]), eval_accuracy=np.array([0.5, 0.6]),
                          first_step=np.array([0, 2]), first_n=np.array([4, 8]), first_correct=np.array([1, 5]))
    seen = set()
    for seed in range(20):
        rep = resample_steps(run, np.random.default_rng(seed))
        draw = np.random.default_rng(seed).integers(0, 3, 3).tolist()  # the steps it drew, in order
        by_step = {0: [0.1, 0.2], 1: [0.3], 2: []}
        assert rep.group_sigma.tolist() == [x for d in draw for x in by_step[d]]
        assert rep.group_step.tolist() == [j for j, d in enumerate(draw) for _ in by_step[d]]
        assert rep.group_size.tolist() == [{0.1: 4, 0.2: 4, 0.3: 8}[x] for x in rep.group_sigma.tolist()]
        firsts = {0: [(4, 1)], 1: [], 2: [(8, 5)]}
        assert list(zip(rep.first_n.tolist(), rep.first_correct.tolist())) == [v for d in draw for v in firsts[d]]
        assert rep.eval_step.tolist() == [-1, 2] and rep.eval_accuracy.tolist() == [0.5, 0.6] and rep.steps == 3
        seen.add(tuple(draw))
    assert len(seen) > 5  # the draws vary with the generator


def _plan(rows, resamples=20):
    from pc_pipelines.simulator.plan import Plan

    return Plan(runs=("r",), preset="bench", fit_steps=20, horizon=100, seeds=(1,), resamples=resamples, fit={},
                rows=rows)


def _row(name, cost, low, high):
    from pc_pipelines.simulator.plan import PlanRow

    return PlanRow(Candidate(name, "grpo", (("allocator.n", 8),)), 100.0, cost, 1 if cost else 0, low, high, 0)


def test_budgets_whose_intervals_overlap_the_best_are_not_ranked_against_it():
    p = _plan([_row("A", 1000, 800, 1200), _row("B", 1100, 1150, 1500), _row("C", 1300, 1201, 1400),
               _row("D", 1400, None, None), _row("E", None, None, None)])
    assert [p.verdict(r) for r in p.rows] == ["best", "indistinguishable", "worse", "-", "never"]
    assert [c.name for c in p.indistinguishable()] == ["B"]
    line = p.verdict_line()
    assert line.startswith("ranking: indistinguishable from A (their 10-90% intervals overlap its): B. The data do "
                           "not rank these") and "C" not in line.split(".")[0]
    table = p.table().splitlines()
    assert table[0].endswith("vs best") and [row.split()[-1] for row in table[1:]] == [
        "best", "indistinguishable", "worse", "-", "never"]
    assert [r["vs_best"] for r in p.records()] == ["best", "indistinguishable", "worse", "-", "never"]


def test_the_ranking_line_when_the_best_stands_apart_or_there_is_no_interval():
    apart = _plan([_row("A", 1000, 800, 1200), _row("C", 1300, 1201, 1400)])
    assert apart.verdict_line() == "ranking: A is ahead of every other budget beyond the 10-90% intervals of 20 refits."
    none = _plan([_row("A", 1000, None, None), _row("C", 1300, None, None)], resamples=0)
    assert [none.verdict(r) for r in none.rows] == ["best", "-"]
    assert "no interval (no refits (--resamples 0))" in none.verdict_line()
    assert none.verdict_line().endswith("Fix: run with --resamples 20 (the budget_plan asset's resamples) for the "
                                        "10-90% intervals.")
    rare = _plan([_row("A", 1000, None, None), _row("C", 1300, 1000, 1400)])
    assert "the best reached the target in under half the refits" in rare.verdict_line()


def test_trust_line_says_how_far_the_plan_was_validated():
    from pc_pipelines.simulator.plan import TRUST, VALIDATIONS, Validation, trust_line

    line = trust_line(Validation(study="study X", held_out_regret=1.1, fresh_regret=1.304, covered=7, intervals=10))
    assert line.startswith("validated (regret: measured rollouts to target of the planner's pick / of the best) on "
                           "study X: median regret 1.10x on held-out configurations and 1.30x on fresh seeds, 10-90% "
                           "intervals covered 7 of 10 measured medians (docs/STUDIES.md, planner-validation)")
    with_caveat = trust_line(Validation("X", 1.0, 1.0, 1, 2, caveat="one interval never closes"))
    assert "covered 1 of 2 measured medians; one interval never closes (docs/STUDIES.md" in with_caveat
    assert "Where intervals overlap, the candidates are indistinguishable" in line
    # the shipped numbers are measured ones, not placeholders
    assert TRUST == trust_line() and all(v.intervals > 0 and v.held_out_regret >= 1.0 for v in VALIDATIONS)
    counted = trust_line(Validation("X", 1.0, 1.16, 1, 2, fresh_seeds=8))
    assert "1.00x on held-out configurations and 1.16x on 8 fresh seeds, 10-90%" in counted
    both = trust_line([Validation("A", 1.0, 1.0, 1, 2), Validation("B", 1.2, 1.1, 3, 4)])
    assert "on A: median regret 1.00x" in both and "; and on B: median regret 1.20x" in both


def test_plan_defaults_are_one_copy_in_the_cli():
    """`pilot-commit plan`'s seeds and refits are plan.SEEDS and plan.RESAMPLES (16 seeds: a 3-seed median's Monte
    Carlo error was as large as the gaps it ranked)."""
    from pc_pipelines.cli import build_parser
    from pc_pipelines.simulator import plan as plan_module
    args = build_parser().parse_args(["plan", "--store", "s.duckdb", "--runs", "r"])
    assert args.seeds == list(plan_module.SEEDS) and len(set(args.seeds)) == 16
    assert args.resamples == plan_module.RESAMPLES == 8


def test_plan_header_names_a_run_of_seeds_by_its_ends():
    from pc_pipelines.simulator.plan import SEEDS, _seed_list
    assert _seed_list(SEEDS) == "seeds 1000-1015 (16)"
    assert _seed_list([1]) == "seed 1" and _seed_list([3, 1, 2]) == "seeds 3 1 2" and _seed_list([4, 5]) == "seeds 4 5"
