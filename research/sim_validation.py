"""The simulator's fitted law against the measured benchmark (issue 44 point 2): with the parameters
``pilot-commit sim-fit`` fitted on the tuning seeds' runs (100, 101), simulate the tuned study's methods on the
reported seeds 11-13 by the study's own protocol (120 steps, an evaluation every 10 steps and before training,
curves smoothed by a trailing mean over 3 evaluations, target = min of the two smoothed peaks, cost = sampled
rollouts at the first smoothed evaluation at or above it, median over seeds) and write predicted beside measured,
with each error, into docs/STUDIES.md. It reads only the fit's JSON and the measured medians
(``pc_pipelines/reports/bench_study_results.json``, and the tuning seeds' GRPO sizes, given below).

    .venv/bin/pilot-commit sim-fit --store /work/bench42/b42.duckdb --out benchmarks/out/sim_fit.json
    .venv/bin/python research/sim_validation.py --fit benchmarks/out/sim_fit.json --write docs/STUDIES.md
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._report import STUDIES_HEADER, machine, write_section
from pc_pipelines.config import parse_overrides, resolve
from pc_pipelines.simulator import Simulation
from pc_pipelines.store.rollouts_to_target import first_reaching, target_accuracy

RESULTS = Path(__file__).resolve().parent.parent / "pc_pipelines" / "reports" / "bench_study_results.json"
SEEDS = (11, 12, 13)
STEPS = 120
EVAL_EVERY = 10
SMOOTH = 3
PAPER_PC = ("allocator.band_strategy=static", "allocator.sampling_strategy=fixed", "allocator.pilot_strategy=single",
            "allocator.commit_strategy=uniform")
BEST = ("allocator.n_pilot=8", "allocator.pilot_wave=2", "allocator.commit_mean=8")
METHODS: dict[str, tuple[str, tuple[str, ...], int]] = {  # name -> (method, overrides, steps)
    "GRPO64": ("grpo", (), STEPS),
    "GRPO16": ("grpo", ("allocator.n=16",), STEPS),
    "DAPO": ("dapo", (), STEPS),
    "our PC": ("pc", (), STEPS),
    "our PC best": ("pc", BEST, STEPS),
    "paper PC easy_pool": ("pc", (*PAPER_PC, "allocator.eviction_strategy=easy_pool"), STEPS),
    "GRPO4": ("grpo", ("allocator.n=4",), 480),
}
RATIOS = ("GRPO64 / our PC", "GRPO16 / our PC", "GRPO64 / our PC best", "GRPO16 / our PC best",
          "DAPO / our PC", "DAPO / our PC best", "GRPO64 / paper PC easy_pool", "GRPO16 / paper PC easy_pool",
          "DAPO / paper PC easy_pool")
MAIN = ("GRPO64 / our PC", "GRPO16 / our PC best", "GRPO64 / our PC best", "DAPO / our PC")
"""The four main ratios (issue 44's goal: within 25%): our PC against GRPO-64 (the study's goal b), our PC best
against GRPO at its best n (goal a) and against GRPO-64, and DAPO against our PC."""
# Measured on the tuning seeds (docs/STUDIES.md, "The history prior and GRPO's size"): GRPO-16 / GRPO-4 rollouts to
# the sizes' common target per seed (28,160 / 19,840 and 25,600 / 10,240); the fit saw these runs' steps and evals
# but not this ratio.
TUNING_N4_VS_N16 = {100: 28_160 / 19_840, 101: 25_600 / 10_240}
# Per step, measured on seeds 11-13 (docs/STUDIES.md "Where the rollouts went"): sampled, trained, screened out
# (early screen + screened out) per step.
MEASURED_PER_STEP = {"GRPO64": (1024, 1024, 0), "GRPO16": (256, 256, 0), "DAPO": (3977, 1024, 2523),
                     "our PC": (1067, 512, 554), "our PC best": (779, 255, 524),
                     "paper PC easy_pool": (2530, 1024, 1496)}


def simulate(name: str, seed: int, sim_fields: dict) -> dict:
    method, overrides, steps = METHODS[name]
    over = parse_overrides(list(overrides))
    over.update({f"sim.{k}": v for k, v in sim_fields.items()})
    cfg = resolve("bench", overrides=over, method=method, seed=seed)
    sim = Simulation(cfg.allocator, cfg.sim)
    evals = [(0, sim.population.accuracy())]
    sampled = trained = screened = 0
    for st in sim.run(steps):
        led = st.outcome.ledger
        sampled += led.sampled_rollouts
        trained += led.trained_rollouts
        if (st.outcome.step + 1) % EVAL_EVERY == 0:
            evals.append((st.cumulative_sampled, st.accuracy))
    screened = sampled - trained
    rollouts = [e[0] for e in evals]
    acc = [float(np.mean([a for _, a in evals[max(0, i - SMOOTH + 1):i + 1]])) for i in range(len(evals))]
    return {"rollouts": rollouts, "accuracy": acc, "sampled": sampled / steps, "trained": trained / steps,
            "screened": screened / steps}


def ratio(base: dict, pc: dict) -> float | None:
    target = target_accuracy(max(base["accuracy"]), max(pc["accuracy"]))
    b = first_reaching(base["rollouts"], base["accuracy"], target)
    p = first_reaching(pc["rollouts"], pc["accuracy"], target)
    return None if b is None or not p else b / p


def per_seed_ratios(sim_fields: dict, seed: int) -> tuple[dict[str, float | None], dict[str, dict]]:
    """Every ratio of :data:`RATIOS` on one seed, and each method's rollouts a step."""
    runs = {m: simulate(m, seed, sim_fields) for m in METHODS if m != "GRPO4"}
    ratios = {}
    for key in RATIOS:
        base, pc = key.split(" / ")
        ratios[key] = ratio(runs[base], runs[pc])
    return ratios, {m: {k: runs[m][k] for k in ("sampled", "trained", "screened")} for m in runs}


def _median(vals: Sequence[float | None]) -> float | None:
    present = [v for v in vals if v is not None]
    return statistics.median(present) if present else None


def predict(sim_fields: dict, seeds: Sequence[int], expect_seeds: Sequence[int]) -> dict:
    """The study's medians on ``seeds``; the expected median of three seeds (the median over ``expect_seeds``) with
    the 10-90% range of the medians of their consecutive triples; the per-step rollouts; GRPO-16 / GRPO-4."""
    study = [per_seed_ratios(sim_fields, s) for s in seeds]
    medians = {k: _median([r[k] for r, _ in study]) for k in RATIOS}
    per_step = {m: {k: float(np.mean([p[m][k] for _, p in study])) for k in ("sampled", "trained", "screened")}
                for m in study[0][1]}
    more = [per_seed_ratios(sim_fields, s)[0] for s in expect_seeds]
    expected, spread = {}, {}
    for k in RATIOS:
        expected[k] = _median([r[k] for r in more])
        triples = [_median([r[k] for r in more[i:i + 3]]) for i in range(0, len(more) - 2, 3)]
        triples = [t for t in triples if t is not None]
        spread[k] = (float(np.percentile(triples, 10)), float(np.percentile(triples, 90))) if triples else None
    tune = {}
    for s in TUNING_N4_VS_N16:
        n4, n16 = simulate("GRPO4", s, sim_fields), simulate("GRPO16", s, sim_fields)
        tune[s] = ratio(n16, n4)  # the tuning rule's metric: sampled rollouts to the sizes' common target
    return {"medians": medians, "expected": expected, "spread": spread, "per_step": per_step, "tune": tune}


def _err(pred: float | None, meas: float | None) -> str:
    if pred is None or meas is None:
        return "-"
    return f"{(pred - meas) / meas:+.0%}"


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def section(fit_path: Path, fit: dict, pred: dict, expect_seeds: Sequence[int], wall: float) -> str:
    medians, expected, spread = pred["medians"], pred["expected"], pred["spread"]
    per_step, tune = pred["per_step"], pred["tune"]
    measured = json.loads(RESULTS.read_text())["regimes"]["bench-tuned"]["medians"]
    sim = fit["sim"]
    lines = [
        "## The simulator's fitted law against the measured benchmark (`research/sim_validation.py`, issue 44)",
        "",
        f"Command: `.venv/bin/pilot-commit sim-fit --store /work/bench42/b42.duckdb --out {fit_path}` then "
        f"`.venv/bin/python research/sim_validation.py --fit {fit_path} --write docs/STUDIES.md`. "
        f"Machine: {machine()}. Wall time: {wall:.0f} s (the simulations).",
        "",
        "Fitted on the tuning seeds' runs only (" + ", ".join(f"`{r}`" for r in fit["runs"]) + "); the simulator "
        f"then runs the tuned study's methods on seeds {', '.join(map(str, SEEDS))} by the study's protocol (120 "
        "steps, evaluations every 10 steps, smoothed over 3, target = min of the two smoothed peaks, median over "
        "seeds). Measured: `pc_pipelines/reports/bench_study_results.json` (section \"The benchmark with both sides "
        "tuned, on fresh seeds\"). Error = (predicted - measured) / measured.",
        "",
        f"Fitted law: `{fit['chosen_form']}`; " + ", ".join(f"{k} = {_fmt(v)}" for k, v in sim.items()) + ".",
        "",
        "### Law forms compared (the fit's residuals: held-out accuracy, measured - predicted, every evaluation)",
        "",
        "| form | parameters | weighted SSE | AIC | rmse per run (min / median / max) | bias per run (min / max) |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for form, law in fit["laws"].items():
        rm = [r["rmse"] for r in law["per_run"]]
        bias = [r["bias"] for r in law["per_run"]]
        params = ", ".join(f"{k} {_fmt(v)}" for k, v in law["params"].items())
        lines.append(f"| {form}{' (chosen)' if form == fit['chosen_form'] else ''} | {params} | {law['sse']:.4f} | "
                     f"{law['aic']:.1f} | {min(rm):.4f} / {statistics.median(rm):.4f} / {max(rm):.4f} | "
                     f"{min(bias):+.4f} / {max(bias):+.4f} |")
    chosen = fit["laws"][fit["chosen_form"]]
    lines += ["", "Per run (chosen form):", "", "| run | evaluations | rmse | bias |", "|---|---:|---:|---:|"]
    lines += [f"| `{r['run_id']}` | {r['evaluations']} | {r['rmse']:.4f} | {r['bias']:+.4f} |"
              for r in chosen["per_run"]]
    mix = fit["mix"]
    lines += ["", f"Pass-rate mix from {mix['observations']} first visits (first 20 steps of each run): "
              f"AIC {mix['aic']:.1f} against {mix['aic_one_normal']:.1f} for one Normal. Observed vs predicted "
              "share of k correct (n = 2 and n = 16 visits):", "",
              "| n | k | observed | predicted |", "|---:|---:|---:|---:|"]
    lines += [f"| {r['n']} | {r['k']} | {r['observed']:.3f} | {r['predicted']:.3f} |"
              for r in mix["residuals"] if r["n"] in (2, 16)]
    lines += ["", "### Predicted vs measured rollouts-to-target ratios (medians over seeds 11-13)", "",
              f"Predicted on seeds 11-13 (the study's seeds, one draw of the simulator's noise) and expected: the "
              f"median over {len(expect_seeds)} simulated seeds ({expect_seeds[0]}-{expect_seeds[-1]}), with the "
              "10-90% range of the median of three seeds (what a three-seed study of the simulator would report).",
              "", "| ratio | main | predicted (11-13) | expected | 3-seed range | measured | error (11-13) | "
              "error (expected) | measured in range |", "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    within = 0
    for key in RATIOS:
        meas = measured.get(key)
        main = key in MAIN
        ex = expected[key]
        if main and ex is not None and meas and abs(ex - meas) / meas <= 0.25:
            within += 1
        rng = spread[key]
        inside = "-" if rng is None or meas is None else ("yes" if rng[0] <= meas <= rng[1] else "no")
        rng_text = "-" if rng is None else f"{rng[0]:.2f}-{rng[1]:.2f}x"
        lines.append(f"| {key} | {'yes' if main else ''} | {_x(medians[key])} | {_x(ex)} | {rng_text} | {_x(meas)} | "
                     f"{_err(medians[key], meas)} | {_err(ex, meas)} | {inside} |")
    lines += ["", f"Expected within 25% of the measured on {within} of the {len(MAIN)} main ratios.", "",
              "GRPO at n = 16 against n = 4 on the tuning seeds (the tuning rule's metric, sampled rollouts to the "
              "sizes' common target; n = 4 run to n = 16's rollout budget, 480 steps):", "",
              "| seed | predicted GRPO16 / GRPO4 | measured | error |", "|---:|---:|---:|---:|"]
    lines += [f"| {s} | {_x(tune[s])} | {_x(TUNING_N4_VS_N16[s])} | {_err(tune[s], TUNING_N4_VS_N16[s])} |"
              for s in TUNING_N4_VS_N16]
    lines += ["", "### Per step: sampled / trained / screened rollouts (mean over seeds 11-13)", "",
              "| method | predicted sampled | measured | error | predicted trained | measured | predicted screened "
              "| measured | error |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for m, (ms, mt, mscr) in MEASURED_PER_STEP.items():
        p = per_step[m]
        lines.append(f"| {m} | {p['sampled']:.0f} | {ms} | {_err(p['sampled'], ms)} | {p['trained']:.0f} | {mt} | "
                     f"{p['screened']:.0f} | {mscr} | {_err(p['screened'], mscr) if mscr else '-'} |")
    return "\n".join(lines) + "\n"


def _fmt(v: object) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fit", type=Path, required=True, help="the JSON `pilot-commit sim-fit --out` wrote")
    ap.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS), help="simulated seeds (default 11 12 13)")
    ap.add_argument("--expect-seeds", type=int, default=30,
                    help="simulated seeds (1000 on) for the expected ratios and their 3-seed range (default 30)")
    ap.add_argument("--write", type=Path, help="write the section into this Markdown file (docs/STUDIES.md)")
    args = ap.parse_args(argv)
    fit = json.loads(args.fit.read_text())
    t0 = time.perf_counter()
    expect = list(range(1000, 1000 + args.expect_seeds))
    pred = predict(fit["sim"], args.seeds, expect)
    body = section(args.fit, fit, pred, expect, time.perf_counter() - t0)
    print(body)
    if args.write:
        write_section(args.write, "sim-validation", body, header=STUDIES_HEADER)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
