"""The fitted simulator in the paper's regime (issue 44 point 2, second half): a one-Normal prompt mix calibrated to
the paper's published statistics for the 1.5B DeepMath run (n = 128 as 32 + 96, b_t 128, b_g = 3 b_t; section
"Impact of the Eviction Strategy": a second sampling round on 35.8% of steps without eviction and 4.5% with, 33,379
and 25,676 rollouts a step), then its Table 2 (GRPO / PC and DAPO / PC rollouts to target, 1.5x and 4.0x) predicted
with the learning law fitted on the benchmark (``pilot-commit sim-fit``), beside the paper's.

    .venv/bin/python research/sim_paper_regime.py --fit research/sim_fit_tuning.json --write docs/STUDIES.md
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._report import STUDIES_HEADER, machine, write_section
from pc_pipelines.config import resolve
from pc_pipelines.simulator import Simulation
from pc_pipelines.store.rollouts_to_target import first_reaching, target_accuracy

PRESET = "paper-1.5b-n128"
PAPER = {"second_noevict": 0.358, "second_evict": 0.045, "rollouts_noevict": 33_379, "rollouts_evict": 25_676}
PAPER_TABLE2 = {"GRPO / PC": 1.5, "DAPO / PC": 4.0}
MEANS = (-1.0, 0.0, 1.0, 2.0)
SPREADS = (2.0, 4.0, 6.0)
EVAL_EVERY, SMOOTH = 10, 3


def law_fields(fit: dict) -> dict:
    """The fitted law and noise of ``fit`` (the mix and the pool size are the paper's, not the benchmark's)."""
    keep = ("law", "law_rate", "law_skill_cap", "law_noise_floor", "law_noise_scale", "law_noise_power",
            "law_step_noise", "law_cap_pc", "law_cap_prior", "law_gain_max", "eval_difficulty_mean",
            "eval_difficulty_spread", "eval_noise")
    return {k: fit["sim"][k] for k in keep if k in fit["sim"]}


def simulation(method: str, law: dict, mean: float, spread: float, seed: int, **allocator) -> Simulation:
    over = {f"sim.{k}": v for k, v in law.items()}
    over.update({"sim.difficulty_mean": mean, "sim.difficulty_spread": spread})
    over.update({f"allocator.{k}": v for k, v in allocator.items()})
    cfg = resolve(PRESET, overrides=over, method=method, seed=seed)
    return Simulation(cfg.allocator, cfg.sim)


def pc_stats(law: dict, mean: float, spread: float, evict: bool, steps: int, seed: int) -> tuple[float, float]:
    """(share of steps with a second round, sampled rollouts a step) of the paper's PC."""
    sim = simulation("pc", law, mean, spread, seed, evict=evict)
    rounds = [st.outcome.ledger.rounds for st in sim.run(steps)]
    return float(np.mean(np.array(rounds) > 1)), sim.cumulative_sampled / steps


def calibrate(law: dict, steps: int, seed: int) -> list[dict]:
    rows = []
    for mean, spread in itertools.product(MEANS, SPREADS):
        s_no, r_no = pc_stats(law, mean, spread, False, steps, seed)
        s_ev, r_ev = pc_stats(law, mean, spread, True, steps, seed)
        loss = ((s_no - PAPER["second_noevict"]) ** 2 + (s_ev - PAPER["second_evict"]) ** 2
                + ((r_no - PAPER["rollouts_noevict"]) / PAPER["rollouts_noevict"]) ** 2
                + ((r_ev - PAPER["rollouts_evict"]) / PAPER["rollouts_evict"]) ** 2)
        rows.append({"difficulty_mean": mean, "difficulty_spread": spread, "second_noevict": s_no,
                     "second_evict": s_ev, "rollouts_noevict": r_no, "rollouts_evict": r_ev, "loss": loss})
    return sorted(rows, key=lambda r: r["loss"])


def curve(method: str, law: dict, mean: float, spread: float, seed: int, steps: int) -> dict:
    sim = simulation(method, law, mean, spread, seed)
    ev = [(0, sim.population.accuracy())]
    cap_step = None
    cap = law.get("law_skill_cap")
    for st in sim.run(steps):
        if cap_step is None and cap is not None and sim.population.skill >= 0.95 * cap:
            cap_step = st.outcome.step
        if (st.outcome.step + 1) % EVAL_EVERY == 0:
            ev.append((st.cumulative_sampled, st.accuracy))
    acc = [float(np.mean([a for _, a in ev[max(0, i - SMOOTH + 1):i + 1]])) for i in range(len(ev))]
    return {"rollouts": [r for r, _ in ev], "accuracy": acc, "cap_step": cap_step}


def table2(law: dict, mean: float, spread: float, seeds: list[int], steps: int) -> tuple[dict, dict]:
    ratios: dict[str, list] = {k: [] for k in PAPER_TABLE2}
    caps: dict[str, list] = {}
    for seed in seeds:
        c = {m: curve(m, law, mean, spread, seed, steps) for m in ("grpo", "dapo", "pc")}
        for m in c:
            caps.setdefault(m, []).append(c[m]["cap_step"])
        for key, base in (("GRPO / PC", "grpo"), ("DAPO / PC", "dapo")):
            target = target_accuracy(max(c[base]["accuracy"]), max(c["pc"]["accuracy"]))
            b = first_reaching(c[base]["rollouts"], c[base]["accuracy"], target)
            p = first_reaching(c["pc"]["rollouts"], c["pc"]["accuracy"], target)
            ratios[key].append(None if b is None or not p else b / p)
    med = {k: (statistics.median([v for v in vals if v is not None]) if any(v is not None for v in vals) else None)
           for k, vals in ratios.items()}
    return med, caps


def section(fit_path: Path, rows: list[dict], med: dict, caps: dict, steps: int, seeds: list[int],
            wall: float, calibrate_steps: int | None = None) -> str:
    best = rows[0]
    lines = [
        "## The fitted simulator in the paper's regime (`research/sim_paper_regime.py`, issue 44)", "",
        f"Command: `.venv/bin/python research/sim_paper_regime.py --fit {fit_path} --write docs/STUDIES.md`. "
        f"Machine: {machine()}. Wall time: {wall:.0f} s.", "",
        f"Preset `{PRESET}` (85K prompts, b_t 128, n = 128 as 32 + 96, b_g 384, the paper's PC strategies), the law "
        f"fitted on the benchmark's tuning seeds (`{fit_path}`), a one-Normal prompt mix chosen on a grid "
        f"(difficulty mean {', '.join(map(str, MEANS))} x spread {', '.join(map(str, SPREADS))}, "
        f"{calibrate_steps or steps} steps, seed "
        f"{seeds[0]}) to match the paper's eviction statistics (least squares of the two second-round shares and the "
        "two rollouts a step, relative).", "",
        "| mix (mean, spread) | second rounds, no eviction | with eviction | rollouts / step, no eviction | with "
        "eviction |", "|---|---:|---:|---:|---:|",
        f"| paper | {PAPER['second_noevict']:.1%} | {PAPER['second_evict']:.1%} | {PAPER['rollouts_noevict']:,} | "
        f"{PAPER['rollouts_evict']:,} |",
    ]
    for r in rows[:5]:
        lines.append(f"| {r['difficulty_mean']}, {r['difficulty_spread']} | {r['second_noevict']:.1%} | "
                     f"{r['second_evict']:.1%} | {r['rollouts_noevict']:,.0f} | {r['rollouts_evict']:,.0f} |")
    lines += ["", f"Table 2 (1.5B DeepMath, n = 128) with the best mix ({best['difficulty_mean']}, "
              f"{best['difficulty_spread']}), {steps} steps, seeds {', '.join(map(str, seeds))}, median:", "",
              "| ratio | predicted | paper | error |", "|---|---:|---:|---:|"]
    for k, paper in PAPER_TABLE2.items():
        v = med[k]
        lines.append(f"| {k} | {'-' if v is None else f'{v:.2f}x'} | {paper:.1f}x | "
                     f"{'-' if v is None else f'{(v - paper) / paper:+.0%}'} |")
    lines += ["", "Step at which shared skill reached 95% of the fitted cap, per seed: " + "; ".join(
        f"{m} {', '.join('never' if s is None else str(s) for s in v)}" for m, v in caps.items()) + "."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fit", type=Path, required=True, help="the JSON `pilot-commit sim-fit --out` wrote")
    ap.add_argument("--calibrate-steps", type=int, default=1000,
                    help="steps per calibration run (default 1000, the paper's: eviction acts from the second epoch)")
    ap.add_argument("--steps", type=int, default=1000, help="steps per Table 2 run (default 1000, the paper's)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3], help="Table 2 seeds (default 1 2 3)")
    ap.add_argument("--write", type=Path, help="write the section into this Markdown file (docs/STUDIES.md)")
    args = ap.parse_args(argv)
    law = law_fields(json.loads(args.fit.read_text()))
    t0 = time.perf_counter()
    rows = calibrate(law, args.calibrate_steps, args.seeds[0])
    med, caps = table2(law, rows[0]["difficulty_mean"], rows[0]["difficulty_spread"], args.seeds, args.steps)
    body = section(args.fit, rows, med, caps, args.steps, args.seeds, time.perf_counter() - t0, args.calibrate_steps)
    print(body)
    if args.write:
        write_section(args.write, "sim-paper-regime", body, header=STUDIES_HEADER)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
