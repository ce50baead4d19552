"""Calibrate the benchmark's regime on GRPO alone, before any PC run (issue 16 point 2).

A comparison of rollout allocators means something only in the regime the paper describes: a sizeable share of
zero-variance groups at the start that grows as prompts saturate, GRPO's held-out accuracy flattening before the
run ends, and enough epochs over the pool that eviction matters. This command runs GRPO at n = 64 from the shipped
warm start on candidates (RL pool: difficulty mix and size; training sampling temperature) and run lengths, on a
tuning seed, and writes the calibration table into docs/STUDIES.md (section ``calibration``): the zero-variance
share per 20 steps (and split into all-wrong and all-right groups), the epochs covered, and GRPO's held-out curve.
The chosen candidate is then frozen in the ``bench`` preset.

    python research/calibrate.py probe                    # the warm start's zero-variance share per length (~1 min)
    python research/calibrate.py probe --temperature 0.5 0.3   # the same at lower training temperatures
    python research/calibrate.py run --workers 1          # every candidate, tuning seed 100, 120 steps (~90 min)
    python research/calibrate.py run --pools d4-6/500@T0.3   # one candidate
    python research/calibrate.py report                   # re-render the section from the store
    python research/calibrate.py report --steps 80        # the same runs read at a shorter length (a prefix)

Epochs for PC are estimated from its stream (b_g fresh prompts per round, at least one round a step), so the
table says before any PC run how many times PC would cycle the pool.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

# research/ is a package imported from the checkout (never by pc_pipelines); benchmarks/_report.py writes the docs
# sections of benchmarks/, research/ and reliability/ alike.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _report import STUDIES_HEADER, machine, write_section

from pc_pipelines.store import Store
from research import study

ROOT = Path(__file__).resolve().parent.parent
PRESET = "bench"
FAMILY = "calibrate"
SEED = 100  # a tuning seed: the study reports seeds 0, 1, 2 and never tunes on them
STEPS = 120  # the frozen run length (BENCH_STEPS); longer runs can be read at any shorter length with `report`
WINDOW = 20
# Candidates: name -> overrides of the bench preset. Held-out evaluation always covers every length 1..max_digits,
# whatever the pool, and always samples at training.eval_temperature (0.7). Lengths are uniform within a pool, so the
# mix is set by min_digits; `probe` measures the warm start's zero-variance share per length (docs/STUDIES.md,
# "Calibration").
# Round 1 (pool only, training temperature 1.0 as the preset): at T 1 only d5-6 (0.38) and d6 (0.59) are predicted at
# >= 0.30, d4-6 0.26, d3-6 0.20, d1-6 0.16. d5-6 at three sizes (epochs), d4-6 and d1-6 (the easier mixes, whose easy
# prompts could saturate) at 500. The first draft's d4-6/1000, d3-6/1000, d3-6/500 and d1-6/1000 were not run: their
# mixes are below 0.30 by the probe (d3-6/1000 measured 0.19 and 0.18 over its first 40 steps), and the same mixes at
# 500 show the trend. Every round-1 candidate's zero-variance share FELL (all wrong groups becoming learnable).
# Round 2: a lower TRAINING sampling temperature (`name@T<t>`: training.temperature=<t>; rollouts and the trainer's
# log-probs both use it, the warm start's recipe does not), so that prompts the policy has learned give all-right
# groups (saturation) and the share can rise. `probe --temperature 0.7 0.5 0.4 0.3` predicted the starts: at T 0.7
# all right stays ~0 from 4 digits up (d4-6 0.29, d5-6 0.42, all wrong), so no T 0.7 candidate was run; at T 0.5
# d3-6 0.45, d4-6 0.40, d5-6 0.46; at T 0.4 d4-6 0.50; at T 0.3 d4-6 0.61. Run: the three T 0.5 mixes (flat or
# falling: the 6-digit all-wrong groups still became learnable as fast as 4-5-digit ones saturated), then d4-6 at
# T 0.3 and T 0.4, the two whose share rose (+0.06 and +0.07 per 100 steps). Frozen: d4-6/500@T0.3, the only one
# that also flattens (T 0.4 still gains +0.036 in its last quarter).
_POOLS: dict[str, tuple[str, ...]] = {
    "d5-6/1000": ("task.min_digits=5", "task.num_prompts=1000"),
    "d5-6/500": ("task.min_digits=5", "task.num_prompts=500"),
    "d5-6/250": ("task.min_digits=5", "task.num_prompts=250"),
    "d4-6/1000": ("task.min_digits=4", "task.num_prompts=1000"),
    "d4-6/500": ("task.min_digits=4", "task.num_prompts=500"),
    "d3-6/500": ("task.min_digits=3", "task.num_prompts=500"),
    "d1-6/500": ("task.min_digits=1", "task.num_prompts=500"),
}
ROUND1 = ["d5-6/1000", "d5-6/500", "d5-6/250", "d4-6/500", "d1-6/500"]
ROUND2 = ["d4-6/500@T0.5", "d5-6/500@T0.5", "d3-6/500@T0.5", "d4-6/500@T0.3", "d4-6/500@T0.4"]
# Round 3 (after the first study, whose paper PC with eviction drained the 500-prompt pool): the frozen mix at twice the
# pool, T 0.3 and T 0.4, to see whether a pool sized for PC's consumption keeps GRPO's criteria. Neither flattens in
# 120 steps (peak = last eval, +0.024 / +0.030 in the last quarter) and T 0.4's share falls: the frozen preset stays.
ROUND3 = ["d4-6/1000@T0.3", "d4-6/1000@T0.4"]


def _candidate(name: str) -> tuple[str, ...]:
    """Overrides of ``name``: its pool, and its training temperature (``@T<t>``; none: 1.0, round 1's). Both are
    always explicit, so a candidate stays the run it was whatever the bench preset has frozen since."""
    pool, _, temp = name.partition("@T")
    return _POOLS[pool] + (f"training.temperature={float(temp) if temp else 1.0}",)


POOLS: dict[str, tuple[str, ...]] = {name: _candidate(name) for name in ROUND1 + ROUND2 + ROUND3}
# What the bench preset froze from the table (pc_pipelines/presets/bench.yaml). Presets have no run-length field:
# the study runs every method for BENCH_STEPS steps (`pilot-commit train --preset bench --steps BENCH_STEPS`).
BENCH_POOL = "d4-6/500@T0.3"  # the RL pool and the training temperature
BENCH_STEPS = STEPS

log = logging.getLogger("calibrate")


def jobs_for(pools: list[str], seed: int, steps: int) -> list[study.StudyJob]:
    return [study.StudyJob(f"{FAMILY}-{name.replace('/', '-p').replace('@', '-')}-grpo-s{seed}", "grpo", seed, steps, PRESET,
                           f"{FAMILY}/{name}", POOLS[name]) for name in pools]


def trend(values: list[float]) -> tuple[float, float]:
    """Least-squares slope of ``values`` against the step, per 100 steps, and its standard error (steps treated as
    independent, so the error is a floor: consecutive steps share a policy)."""
    import numpy as np

    y = np.asarray(values, dtype=float)
    if len(y) < 3:
        return float("nan"), float("nan")
    t = np.arange(len(y), dtype=float)
    slope, icept = np.polyfit(t, y, 1)
    resid = y - (icept + slope * t)
    se = float(np.sqrt(resid.var(ddof=2) / ((t - t.mean()) ** 2).sum()))
    return 100 * float(slope), 100 * se


def windows(values: list[float], width: int) -> list[float]:
    return [sum(values[i:i + width]) / len(values[i:i + width]) for i in range(0, len(values), width)]


def calibration_rows(store: Store, jobs: list[study.StudyJob]) -> list[dict]:
    """Per candidate: zero-variance share per window, epochs (GRPO's and PC's estimate), GRPO's eval curve."""
    ids = [j.run_id for j in jobs]
    curves = study.curves_by_run(store, ids)
    out = []
    for job in jobs:
        # Only the first job.steps steps: a longer run read at a shorter length is that shorter run (constant LR
        # after warmup, nothing depends on the total), so `report --steps N` renders any prefix of the runs.
        steps = store.query("SELECT step, informative_share, prompts_consumed, coalesce(time_generate_s, 0) + "
                            "coalesce(time_reward_s, 0) + coalesce(time_update_s, 0) AS compute_s FROM steps WHERE run_id = ? "
                            "AND step <= ? ORDER BY step", [job.run_id, job.steps])
        if not steps or job.run_id not in curves:
            continue
        cfg = json.loads(store.query("SELECT config_json FROM runs WHERE run_id = ?", [job.run_id])[0]["config_json"])
        pool, b_g = cfg["task"]["num_prompts"], cfg["allocator"]["train_batch"] * cfg["allocator"]["oversample"]
        zero = [1.0 - float(r["informative_share"]) for r in steps]
        # The two kinds of zero variance, from the groups GRPO trained (one full group of n a prompt): all wrong
        # (hard, learnable later) and all right (solved: saturation, the kind that grows in real math RL).
        split = store.query("SELECT step, avg(CASE WHEN n_correct = 0 THEN 1.0 ELSE 0.0 END) AS wrong, "
                            "avg(CASE WHEN n_correct = n THEN 1.0 ELSE 0.0 END) AS solved FROM prompt_observations "
                            "WHERE run_id = ? AND step <= ? AND stage = 'full' GROUP BY step ORDER BY step",
                            [job.run_id, job.steps])
        c = curves[job.run_id]
        acc = {s: a for s, a in zip(c.eval_step, c.eval_accuracy) if s <= job.steps}
        evals = [(s, a) for s, a in sorted(acc.items())]
        lengths = store.query("SELECT step, benchmark, accuracy FROM eval_results WHERE run_id = ? AND step <= ? "
                              "ORDER BY step, benchmark", [job.run_id, job.steps])
        first_eval, last_eval = evals[0][0], evals[-1][0]
        per_length = {r["benchmark"]: [None, None] for r in lengths}
        for r in lengths:
            if r["step"] in (first_eval, last_eval):
                per_length[r["benchmark"]][r["step"] == last_eval] = float(r["accuracy"])
        peak_step, peak = max(evals, key=lambda e: (e[1], -e[0]))
        last_step, last = evals[-1]
        quarter = [a for s, a in evals if s >= last_step - len(steps) // 4]
        out.append({
            "name": job.family.split("/", 1)[1], "run_id": job.run_id, "steps": len(steps),
            "zero_var": windows(zero, WINDOW),
            "zero_trend": trend(zero),
            "all_wrong": windows([float(r["wrong"]) for r in split], WINDOW),
            "all_right": windows([float(r["solved"]) for r in split], WINDOW),
            "epochs_grpo": sum(int(r["prompts_consumed"] or 0) for r in steps) / pool,
            "epochs_pc_min": len(steps) * b_g / pool,
            "s_per_step": sum(float(r["compute_s"]) for r in steps) / len(steps),
            "curve": [(s, a) for s, a in evals if s < 1 or s % WINDOW == 0],
            "start": evals[0][1], "peak": peak, "peak_step": peak_step, "last": last,
            "gain_last_quarter": last - quarter[0] if quarter else float("nan"),
            "per_length": per_length,
        })
    return out


def section(rows: list[dict], cmd: str, wall_s: float | None) -> str:
    wall = f"{wall_s / 60:.0f} min" if wall_s is not None else "re-rendered from the store"
    n_win = max((len(r["zero_var"]) for r in rows), default=0)
    lines = [
        "## Calibration of the benchmark's regime on GRPO alone (`research/calibrate.py`, issue 16)",
        "",
        f"Command: `{cmd}`. Machine: {machine()}. Wall time: {wall}. GRPO at n = 64, b_t 16, from the shipped warm "
        f"start, tuning seed {SEED} (never a reported seed), before any PC run. Candidate = RL pool (digit lengths / "
        "prompts) and training sampling temperature (`@T0.3`: training.temperature 0.3; none: 1.0, the preset default "
        "before round 2); held-out evaluation always samples at T 0.7. Zero-variance share = groups whose 64 rewards "
        "are all equal (no gradient), mean per 20 steps; trend: least-squares slope over the steps, per 100 steps, "
        "+- its standard error (steps taken as independent, so a floor). Epochs: GRPO's (b_t fresh prompts a step) "
        "and PC's least (b_g = 3 b_t fresh prompts a step, one round). s / step: generate + reward + update seconds of "
        "a GRPO step on one core (held-out evaluation, every 10 steps, adds about 0.2 s a step); the other core was "
        "busy with other work, differently in each round (round 2 under a heavier load), so compare within a round.",
        "",
        "| candidate | " + " | ".join(f"zero-var {i * WINDOW}-{(i + 1) * WINDOW - 1}" for i in range(n_win))
        + " | trend / 100 steps | epochs GRPO | epochs PC >= | s / step |",
        "|---|" + "---:|" * (n_win + 4),
    ]
    for r in rows:
        cells = [f"{v:.2f}" for v in r["zero_var"]] + [""] * (n_win - len(r["zero_var"]))
        slope, se = r["zero_trend"]
        lines.append(f"| {r['name']} | " + " | ".join(cells) + f" | {slope:+.2f} +- {se:.2f}"
                     + f" | {r['epochs_grpo']:.1f} | {r['epochs_pc_min']:.1f} | {r['s_per_step']:.1f} |")
    lines += [
        "",
        "The zero-variance share split by kind, all wrong / all right (the groups' 64 rewards all 0 / all 1), per 20 "
        "steps: all wrong is a hard prompt that RL may make learnable, all right a solved prompt (saturation):",
        "",
        "| candidate | " + " | ".join(f"{i * WINDOW}-{(i + 1) * WINDOW - 1}" for i in range(n_win)) + " |",
        "|---|" + "---:|" * n_win,
    ]
    for r in rows:
        cells = [f"{w:.2f} / {a:.2f}" for w, a in zip(r["all_wrong"], r["all_right"])]
        lines.append(f"| {r['name']} | " + " | ".join(cells + [""] * (n_win - len(cells))) + " |")
    lines += [
        "",
        "GRPO's held-out accuracy (mean over digit lengths 1-6, mean@4 at T 0.7), every 20 steps:",
        "",
    ]
    n_ev = max((len(r["curve"]) for r in rows), default=0)
    head = next((r["curve"] for r in rows if len(r["curve"]) == n_ev), [])
    lines += [
        "| candidate | " + " | ".join("start" if s < 1 else str(s) for s, _ in head) + " | peak (step) | gain in the last quarter |",
        "|---|" + "---:|" * (n_ev + 2),
    ]
    for r in rows:
        cells = [f"{a:.3f}" for _, a in r["curve"]] + [""] * (n_ev - len(r["curve"]))
        lines.append(f"| {r['name']} | " + " | ".join(cells)
                     + f" | {r['peak']:.3f} ({r['peak_step']}) | {r['gain_last_quarter']:+.3f} |")
    names = sorted({b for r in rows for b in r["per_length"]})
    if names:
        lines += [
            "",
            "Per digit length (held-out, mean@4 at T 0.7), start -> last eval: the pool's lengths are trained, the "
            "others show transfer or forgetting:",
            "",
            "| candidate | " + " | ".join(n.replace("arith_d", "") + " digits" for n in names) + " |",
            "|---|" + "---:|" * len(names),
        ]
        for r in rows:
            cells = []
            for n in names:
                a, b = r["per_length"].get(n, [None, None])
                cells.append("-" if a is None or b is None else f"{a:.2f} -> {b:.2f}")
            lines.append(f"| {r['name']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def probe(temperatures: tuple[float, ...] = (1.0,), prompts: int = 96, samples: int = 64, seed: int = 1) -> str:
    """Before any run: the warm start's zero-variance share at n = ``samples`` per digit length of the RL pool, split
    into all wrong and all right, at each training sampling temperature in ``temperatures`` (the preset's is 1.0;
    ``training.temperature`` sets a run's), and what it predicts for each candidate pool's first steps (lengths are
    uniform within a pool). About a minute a temperature on one core; it screens out pools that cannot reach a 30%
    start."""
    import numpy as np
    import torch

    from pc_pipelines.config import parse_overrides, resolve
    from pc_pipelines.data.arith import build_splits
    from pc_pipelines.rewards import MathGrader
    from pc_pipelines.rollout import SamplingParams
    from pc_pipelines.rollout.transformers_engine import TransformersEngine
    from pc_pipelines.training.base_policy import ensure_base_policy, load_policy, sampled_pass_rates

    cfg = resolve(PRESET, parse_overrides(["task.min_digits=1"]), method="grpo", seed=SEED, family=FAMILY)
    t, top = cfg.training, cfg.task.max_digits
    torch.set_num_threads(t.torch_threads)  # one core, as a training run
    model, tok = load_policy(ensure_base_policy(cfg.task, cfg.policy, t.prompt_template))
    engine, pool = TransformersEngine(model, tok), build_splits(cfg.task).train
    lines: list[str] = []
    with MathGrader() as grader:
        for temp in temperatures:
            params = SamplingParams(temp, t.top_p, t.max_response_length, seed)
            wrong: dict[int, float] = {}
            right: dict[int, float] = {}
            lines += [f"Warm start, {prompts} RL prompts per digit length x {samples} samples at T {temp}:", "",
                      "| digits | mean pass rate | all wrong | all right | zero-variance |", "|---:|---:|---:|---:|---:|"]
            for d in range(1, top + 1):
                idx = np.flatnonzero(pool.digits == d)[:prompts]
                rates = sampled_pass_rates(engine, grader, pool.subset(idx), t.prompt_template, samples, params)
                wrong[d], right[d] = float(np.mean(rates == 0)), float(np.mean(rates == 1))
                lines.append(f"| {d} | {rates.mean():.2f} | {wrong[d]:.2f} | {right[d]:.2f} | {wrong[d] + right[d]:.2f} |")
            lines += ["", f"| pool lengths (T {temp}) | predicted zero-variance share at the start | all wrong | all right |",
                      "|---|---:|---:|---:|"]
            for lo in range(1, top + 1):
                k = top + 1 - lo
                w, r = sum(wrong[d] for d in range(lo, top + 1)) / k, sum(right[d] for d in range(lo, top + 1)) / k
                lines.append(f"| d{lo}-{top} | {w + r:.2f} | {w:.2f} | {r:.2f} |")
            lines.append("")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cmd", choices=["run", "report", "probe"])
    ap.add_argument("--pools", nargs="+", default=list(POOLS), choices=list(POOLS))
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--steps", type=int, default=STEPS)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--store", default=str(ROOT / "benchmarks/out/calibrate.duckdb"))
    ap.add_argument("--out", default=str(ROOT / "benchmarks/out/calibrate-runs"))
    ap.add_argument("--write", default=str(ROOT / "docs/STUDIES.md"), help="the Markdown file ('' = none)")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--temperature", type=float, nargs="+", default=[1.0],
                    help="probe: training sampling temperature(s) to probe at (the preset's is 1.0)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if args.cmd == "probe":
        print(probe(tuple(args.temperature)))
        return 0
    store = Store(args.store)
    jobs = jobs_for(args.pools, args.seed, args.steps)
    t0 = time.monotonic()
    if args.cmd == "run":
        study.run_jobs(jobs, store, args.out, workers=args.workers, show_progress=not args.quiet)
    cmd = f"python research/calibrate.py run --pools {' '.join(args.pools)} --seed {args.seed} --steps {args.steps}"
    body = section(calibration_rows(store, jobs), cmd, time.monotonic() - t0 if args.cmd == "run" else None)
    print(body)
    if args.write:
        write_section(Path(args.write), "calibration", body, STUDIES_HEADER)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
