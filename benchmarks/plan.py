"""`pilot-commit plan`'s time on the demo's store (issue 44: under a minute on 2 cores). Run after `make demo`:

    .venv/bin/python benchmarks/plan.py --store runs/pc.duckdb --write docs/BENCHMARKS.md

Times the plan's parts in process, with the command's defaults (the first 20 steps of every run with them, 10 budgets,
120 simulated steps on plan's seeds, its refits on resampled steps): reading the runs, the fit, the ranking on the
full fit, and the refits (each a fit of the chosen law and a ranking on one seed); then the whole command as a user
runs it (a process of the installed script, its start-up included). Target: the command under 60 s.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import machine, write_section

from pc_pipelines.errors import shell_command
from pc_pipelines.simulator.fit import fit_simulator, read_runs
from pc_pipelines.simulator.plan import RESAMPLES, SEEDS, default_candidates, first_steps, plan, plannable_runs, rank
from pc_pipelines.store import Store


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--store", default="runs/pc.duckdb", help="the demo's store (default runs/pc.duckdb)")
    ap.add_argument("--fit-steps", type=int, default=20)
    ap.add_argument("--write", type=Path, default=None, help="update this BENCHMARKS.md section")
    args = ap.parse_args()
    start_machine = machine()

    t0 = time.perf_counter()
    store = Store(args.store)
    run_ids = plannable_runs(store, args.fit_steps)
    runs = read_runs(store, run_ids)
    t_read = time.perf_counter() - t0
    preset = runs[0].preset or "bench"
    t0 = time.perf_counter()
    fit = fit_simulator([first_steps(r, args.fit_steps) for r in runs], mix_steps=args.fit_steps)
    t_fit = time.perf_counter() - t0
    t0 = time.perf_counter()
    rank(preset, fit.sim, default_candidates(), SEEDS, 120)
    t_rank = time.perf_counter() - t0
    t0 = time.perf_counter()
    result = plan(runs, preset, args.fit_steps, 120, SEEDS, resamples=RESAMPLES)
    t_plan = time.perf_counter() - t0
    t_refits = t_plan - t_fit - t_rank  # the plan's fit and ranking as timed above, the rest is its refits

    exe = str(Path(sys.executable).parent / "pilot-commit")
    cmd = [exe, "plan", "--store", args.store, "--runs", *run_ids]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    t_cmd = time.perf_counter() - t0
    if out.returncode != 0:
        sys.stderr.write(out.stderr)
        return out.returncode
    shown = shell_command(".venv/bin/pilot-commit", "plan", "--store", args.store, "--runs", *run_ids)
    lines = [
        "## Budget planner",
        "",
        f"Command: `.venv/bin/python benchmarks/plan.py --store {args.store} --write docs/BENCHMARKS.md` (after "
        "`make demo`)",
        f"Machine: {start_machine}",
        f"Measured: {time.strftime('%Y-%m-%d')}",
        "",
        f"`pilot-commit plan` with its defaults on the demo's store: {len(runs)} runs ({', '.join(run_ids)}), their "
        f"first {args.fit_steps} steps, 10 budgets x 120 simulated steps x {len(SEEDS)} seeds, {RESAMPLES} refits on "
        "resampled steps. "
        "Target: the command under 60 s on 2 cores.",
        "",
        "| part | seconds |",
        "|---|---:|",
        f"| read the runs from the store | {t_read:.1f} |",
        f"| fit (mix, held-out mix, 3 law forms; chose {fit.chosen}) | {t_fit:.1f} |",
        f"| rank 10 budgets on {len(SEEDS)} seeds | {t_rank:.1f} |",
        f"| {RESAMPLES} refits (chosen law) + rankings on one seed each | {t_refits:.1f} |",
        f"| the command, as a process (`{shown}`) | {t_cmd:.1f} |",
        "",
        f"Target met: {'yes' if t_cmd < 60 else 'NO'}. Its pick: {result.best.name} "
        f"(first in {result.rows[0].first}/{result.resamples} refits).",
    ]
    text = "\n".join(lines)
    print(text)
    if args.write:
        write_section(args.write, "plan", text)
        print(f"\nwritten to {args.write}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
