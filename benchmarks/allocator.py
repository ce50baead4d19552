"""Allocator benchmarks (issue: foundation). Run: ``make bench`` or

    .venv/bin/python benchmarks/allocator.py --write docs/BENCHMARKS.md

1. Bookkeeping per step at paper scale (b_t 128, b_g 384, n 128; PC as 32+96): wall time of ``allocator_step`` minus
   the time spent inside the engine callback (a Bernoulli reward draw), so the number is the allocator alone.
   Target: under 2 ms per step. With the history prior on (``screen_strategy: posterior``) the prior's own time
   (its screens of the drawn prompts, its first-wave calls and its update from the step's observations) is measured
   beside it: target under 2 ms per step added.
2. A 1000-step simulated run over 85K prompts per method (allocator + simulator, everything included).
   Target: under 30 s.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import machine, write_section

from pc_pipelines.allocation import METHODS, Allocator, AllocatorConfig
from pc_pipelines.config import SimConfig
from pc_pipelines.run.step_loop import allocator_step
from pc_pipelines.simulator import Simulation


def bookkeeping(method: str, steps: int, warmup: int = 20, screen: str = "none", label: str = "", **extra) -> dict:
    cfg = AllocatorConfig(method=method, train_batch=128, n=128, n_pilot=32 if method == "pc" else None, seed=0,
                          screen_strategy=screen, **extra)
    alloc = Allocator(cfg, 85_000)
    prior_time = 0.0

    def timed(fn):
        def wrapper(*args):
            nonlocal prior_time
            t0 = time.perf_counter()
            out = fn(*args)
            prior_time += time.perf_counter() - t0
            return out
        return wrapper

    if screen != "none":  # the prior's own share: its screens and its update, timed inside the step
        alloc.screen.screen = timed(alloc.screen.screen)
        alloc.screen.observe = timed(alloc.screen.observe)
        alloc.screen.continue_useful = timed(alloc.screen.continue_useful)
    rng = np.random.default_rng(0)
    p = rng.beta(0.6, 0.6, 85_000)
    engine_time = 0.0

    def engine(call):
        nonlocal engine_time
        t0 = time.perf_counter()
        out = (rng.random(call.total_rollouts) < np.repeat(p[call.prompt_ids], call.n)).astype(np.float64)
        engine_time += time.perf_counter() - t0
        return out

    per_step, prior = [], []
    skipped = 0
    for i in range(warmup + steps):
        engine_time = prior_time = 0.0
        t0 = time.perf_counter()
        out = allocator_step(alloc, engine)
        if i >= warmup:
            per_step.append(time.perf_counter() - t0 - engine_time)
            prior.append(prior_time)
            skipped += out.ledger.screened_by_prior
    a = np.asarray(per_step) * 1e3
    b = np.asarray(prior) * 1e3
    return {"method": method if screen == "none" else f"{method} + {screen} prior{label}", "median_ms": float(np.median(a)),
            "p95_ms": float(np.percentile(a, 95)), "prior_median_ms": float(np.median(b)) if screen != "none" else None,
            "prior_p95_ms": float(np.percentile(b, 95)) if screen != "none" else None, "skipped": skipped}


def simulated_run(method: str, steps: int) -> dict:
    cfg = AllocatorConfig(method=method, train_batch=128, n=128, n_pilot=32 if method == "pc" else None, seed=0)
    t0 = time.perf_counter()
    sim = Simulation(cfg, SimConfig(num_prompts=85_000, seed=0))
    for st in sim.run(steps):  # noqa: B007 - drains the run; its last step is read below
        pass
    return {
        "method": method,
        "seconds": time.perf_counter() - t0,
        "sampled": st.cumulative_sampled,
        "accuracy": st.accuracy,
        "evicted": sim.allocator.stream.evicted_count,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=200, help="timed steps for the bookkeeping benchmark")
    ap.add_argument("--repeats", type=int, default=3,
                    help="bookkeeping runs per row; the row keeps the run with the lowest median (a shared host only "
                         "ever adds time)")
    ap.add_argument("--sim-steps", type=int, default=1000)
    ap.add_argument("--write", type=Path, default=None, help="update this BENCHMARKS.md section")
    args = ap.parse_args()

    def best(*a, **kw) -> dict:
        return min((bookkeeping(*a, **kw) for _ in range(args.repeats)), key=lambda r: r["median_ms"])

    book = [best(m, args.steps) for m in ("grpo", "dapo", "pc")]
    book += [best(m, args.steps, screen="posterior") for m in ("grpo", "pc")]
    # worst case: no evidence needed, so the prior computes its usefulness for every drawn prompt of every round
    book += [best(m, args.steps, screen="posterior", label=", min evidence 0", screen_min_evidence=0.0)
             for m in ("grpo", "pc")]
    # the rules measured on the real benchmark (research/prior_study.py): time floor, a draw that reads the pool as
    # needed, PC's first waves decided with the posterior
    floor = dict(screen_max_skips=0, screen_max_unseen=8, screen_draw_cap=0, screen_explore=0.0,
                 screen_prior_strength=0.3, screen_min_evidence=0.0)
    book += [best("grpo", args.steps, screen="posterior", label=", time floor, draw cap 0, min evidence 0",
                  **floor),
             best("pc", args.steps, screen="posterior", label=", time floor, draw cap 0, early wave, min "
                  "evidence 0", pilot_strategy="sequential", pilot_wave=8, screen_early_wave=True, **floor)]
    sims = [simulated_run(m, args.sim_steps) for m in METHODS]  # grpo, dapo, pc and the oracle bound
    lines = [
        "## Allocator",
        "",
        f"Command: `.venv/bin/python benchmarks/allocator.py --steps {args.steps} --repeats {args.repeats} "
        f"--sim-steps {args.sim_steps} "
        "--write docs/BENCHMARKS.md` (or `make bench`)",
        f"Machine: {machine()}",
        f"Measured: {time.strftime('%Y-%m-%d')}",
        "",
        f"Bookkeeping per step at paper scale (b_t 128, b_g 384, n 128, PC 32+96, 85K prompts; engine time "
        f"excluded; {args.steps} steps after 20 warm-up; each row the fastest of {args.repeats} runs by median, as "
        "`timeit` advises: on a shared host the same code measured 2.0 and 3.6 ms a step minutes apart). Target: < 2 ms.",
        "",
        "Rows with the history prior (`screen_strategy: posterior`, defaults) also give the prior's own time inside",
        "the step (its screens and its update; target < 2 ms added) and the prompts it skipped in the timed steps. At",
        "85K prompts a prompt is rarely drawn twice in 220 steps, so with the default evidence floor the prior mostly",
        "reads and updates its arrays; the `min evidence 0` rows make it score every drawn prompt (its worst case).",
        "",
        "| method | median ms/step | p95 ms/step | prior median ms/step | prior p95 ms/step | skipped | target met |",
        "|---|---|---|---|---|---|---|",
    ]
    for b in book:
        prior = ("- | - | -" if b["prior_median_ms"] is None
                 else f"{b['prior_median_ms']:.3f} | {b['prior_p95_ms']:.3f} | {b['skipped']:,}")
        met = b["median_ms"] < 2 and (b["prior_median_ms"] is None or b["prior_median_ms"] < 2)
        lines.append(f"| {b['method']} | {b['median_ms']:.3f} | {b['p95_ms']:.3f} | {prior} | {'yes' if met else 'NO'} |")
    lines += [
        "",
        f"{args.sim_steps}-step simulated run over 85K prompts (allocator + simulator, wall time). Target: < 30 s.",
        "",
        "| method | seconds | sampled rollouts | final sim accuracy | evicted | target met |",
        "|---|---|---|---|---|---|",
    ]
    for s in sims:
        lines.append(
            f"| {s['method']} | {s['seconds']:.2f} | {s['sampled']:,} | {s['accuracy']:.3f} | {s['evicted']:,} | "
            f"{'yes' if s['seconds'] < 30 else 'NO'} |"
        )
    text = "\n".join(lines)
    print(text)
    if args.write:
        write_section(args.write, "allocator", text)
        print(f"\nwritten to {args.write}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
