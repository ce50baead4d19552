"""The history prior (issue 42) in the scale simulator, at the bench preset's allocator settings: per method and
screen strategy, sampled rollouts a step, the share of piloted prompts whose pilot lands in the keep band, the share
of informative trained groups, the longest run of consecutive prior skips of one prompt, rollouts to a target
accuracy, and the allocator's time a step.

The simulator's population (``SimConfig``: latent pass rates rising as prompts are trained on) is not the bench's
arithmetic task, so these numbers check the mechanism, not the benchmark's claim. Seeds default to the tuning seeds
(100, 101), never the study's report seeds.

    .venv/bin/python research/prior_simulated.py --steps 120 --seeds 100 101
"""

from __future__ import annotations

import argparse
import time

from pc_pipelines.allocation import AllocatorConfig, Decision, Stage
from pc_pipelines.config import SimConfig
from pc_pipelines.simulator import Simulation

BENCH = dict(train_batch=16, n=64, n_pilot=16, oversample=3.0, band_strategy="adaptive",
             sampling_strategy="survival", pilot_strategy="sequential", pilot_wave=4, commit_strategy="variance",
             commit_mean=16)


def run(method: str, screen: dict, sim: SimConfig, steps: int, seed: int) -> dict:
    cfg = AllocatorConfig(method=method, seed=seed, **(BENCH if method == "pc" else
                                                       dict(train_batch=16, n=64)), **screen)
    s = Simulation(cfg, sim)
    sampled = kept = piloted = informative = groups = drawn = screened_n = 0
    skips: dict[int, int] = {}
    longest = 0
    t_alloc = 0.0
    curve = []
    for _ in range(steps):
        t0 = time.perf_counter()
        st = s.step()
        t_alloc += time.perf_counter() - t0
        led, o = st.outcome.ledger, st.outcome.observations
        sampled += led.sampled_rollouts
        curve.append((st.cumulative_sampled, st.accuracy))
        groups += led.trained_prompts
        drawn += led.prompts_consumed
        screened_n += led.screened_by_prior
        informative += round(led.informative_share * led.trained_prompts)
        if method == "pc":
            kept += led.kept
            piloted += led.kept + led.skipped_easy + led.deferred_hard
        else:
            first = (o.stage == Stage.FULL) & (o.n > 0)
            piloted += int(first.sum())
            kept += int((first & (o.n_correct > 0) & (o.n_correct < o.n)).sum())
        # consecutive prior skips per prompt, a step at a time (a prompt sampled in a step restarts its run)
        screened = o.prompt_id[o.decision == Decision.SCREENED_BY_PRIOR]
        sampled_ids = set(o.prompt_id[o.n > 0].tolist())
        for p in screened.tolist():
            skips[p] = 0 if p in sampled_ids else skips.get(p, 0) + 1
            longest = max(longest, skips[p])
        for p in sampled_ids:
            skips[p] = 0
    return {"sampled_per_step": sampled / steps, "drawn": drawn / steps, "skipped": screened_n / steps, "in_band": kept / max(piloted, 1),
            "informative": informative / max(groups, 1), "longest_skip_run": longest,
            "accuracy": curve[-1][1], "curve": curve, "ms_per_step": 1e3 * t_alloc / steps}


def rollouts_to(curve: list[tuple[int, float]], target: float) -> int | None:
    return next((c for c, a in curve if a >= target - 1e-12), None)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--seeds", type=int, nargs="+", default=[100, 101])
    ap.add_argument("--prompts", type=int, default=500, help="the bench's RL pool")
    ap.add_argument("--spread", type=float, default=2.5, help="SimConfig.difficulty_spread")
    ap.add_argument("--mean", type=float, default=-0.5, help="SimConfig.difficulty_mean (negative: mostly easy)")
    args = ap.parse_args(argv)
    arms = [("grpo", "none", {}), ("grpo", "posterior", {"screen_strategy": "posterior"}),
            ("pc", "none", {}), ("pc", "posterior", {"screen_strategy": "posterior"}),
            ("grpo", "posterior g0.98", {"screen_strategy": "posterior", "screen_discount": 0.98}),
            ("pc", "posterior g0.98", {"screen_strategy": "posterior", "screen_discount": 0.98}),
            ("pc", "posterior g0.98 k0.5", {"screen_strategy": "posterior", "screen_prior_strength": 0.5,
                                            "screen_discount": 0.98}),
            ("pc", "posterior g1 k0.5 t0.2", {"screen_strategy": "posterior", "screen_prior_strength": 0.5,
                                              "screen_discount": 1.0, "screen_threshold": 0.2})]
    print(f"pool {args.prompts}, difficulty mean {args.mean} spread {args.spread}, {args.steps} steps, "
          f"seeds {args.seeds}; PC at the bench preset's allocator settings, GRPO b_t 16 x n 64")
    print("| method | screen | rollouts/step | drawn/step | skipped by prior/step | piloted in band | informative groups | longest skip run | "
          "final acc | rollouts to GRPO's final acc | allocator+sim ms/step |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    results = {}
    for method, name, screen in arms:
        rs = [run(method, screen, SimConfig(num_prompts=args.prompts, seed=seed, difficulty_mean=args.mean,
                                            difficulty_spread=args.spread), args.steps, seed)
              for seed in args.seeds]
        results[(method, name)] = rs
    for (method, name), rs in results.items():
        target = [r["accuracy"] for r in results[("grpo", "none")]]
        hits = [rollouts_to(r["curve"], t) for r, t in zip(rs, target)]

        def col(key: str, spec: str, rs=rs) -> str:
            return " / ".join(format(r[key], spec) for r in rs)

        hit = " / ".join("-" if h is None else f"{h:,}" for h in hits)
        print(f"| {method} | {name} | {col('sampled_per_step', '.0f')} | {col('drawn', '.0f')} | "
              f"{col('skipped', '.0f')} | {col('in_band', '.3f')} | "
              f"{col('informative', '.3f')} | {col('longest_skip_run', 'd')} | {col('accuracy', '.4f')} | {hit} | "
              f"{col('ms_per_step', '.1f')} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
