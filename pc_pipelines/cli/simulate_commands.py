"""``pilot-commit simulate`` and ``simulate-demo`` (and ``demo``, its deprecated name): the real allocator against the
scale simulator, one method with a readable table (or one JSON object per step with ``--json``), or GRPO, DAPO, PC
and the oracle bound side by side; both may record their runs in a store as a training run would be. ``sim-fit``
fits the simulator's pass-rate mix and its ``fitted`` learning law to runs in a store (:mod:`pc_pipelines.simulator.fit`);
``plan`` ranks budgets by that simulator fitted on the first steps of runs (:mod:`pc_pipelines.simulator.plan`)."""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ..allocation import METHODS
from ..config import RunConfig, parse_overrides
from ..errors import ConfigError, brief, installed_command, shell_command
from ..run.stopping import StopFlag, StopRequested, failed_write, run_outcome, stop_on_signals
from ..simulator import SimStep, Simulation, record_simulation
from ..store import Store
from ..store.names import shown_path
from ..store.rollouts_to_target import first_reaching, target_accuracy
from .args import add_config_args, check_steps, int_arg, progress_bar, run_config, run_id_of, run_name_arg
from .exits import OK, WRITE_FAILED, exit_status, output_status

# (ledger key, column header, width, format spec) of the readable `simulate` table.
TABLE_FIELDS = (
    ("step", "step", 5, "d"),
    ("rounds", "rnd", 3, "d"),
    ("sampled_rollouts", "sampled", 8, "d"),
    ("trained_rollouts", "trained", 8, "d"),
    ("pilot_rollouts", "pilot", 7, "d"),
    ("commit_rollouts", "commit", 7, "d"),
    ("trained_prompts", "groups", 6, "d"),
    ("buffer_size", "buffer", 6, "d"),
    ("skipped_easy", "easy", 5, "d"),
    ("deferred_hard", "hard", 5, "d"),
    ("evicted", "evict", 5, "d"),
    ("mean_reward_std", "r_std", 6, ".3f"),
    ("accuracy", "acc", 6, ".3f"),
    ("cumulative_sampled", "cum_sampled", 12, ",d"),
)
PRIOR_FIELD = ("screened_by_prior", "prior", 5, "d")
"""With the history prior on: the prompts it skipped, after ``hard``."""


def table_fields(screen_strategy: str) -> tuple[tuple[str, str, int, str], ...]:
    """The columns of the readable table: :data:`TABLE_FIELDS`, with :data:`PRIOR_FIELD` when the prior is on."""
    if screen_strategy == "none":
        return TABLE_FIELDS
    i = [k for k, *_ in TABLE_FIELDS].index("deferred_hard") + 1
    return (*TABLE_FIELDS[:i], PRIOR_FIELD, *TABLE_FIELDS[i:])


def _add_sim_args(p: argparse.ArgumentParser, steps: int) -> None:
    p.add_argument("--steps", type=int_arg, default=steps, help=f"training steps, at least 1 (default {steps})")
    p.set_defaults(default_steps=steps)


# ---- simulate ---------------------------------------------------------------------------------------------------
def _sim_steps(cfg: RunConfig, steps: int, store: str | None, run_id: str | None = None, overwrite: bool = False,
               stop: StopFlag | None = None) -> Iterator[SimStep]:
    """Simulated steps of ``cfg``, recorded in ``store`` when one is given (as a training run would be). With a
    store, the run is opened (locked, checked against an existing run of that name) before this returns: a refusal
    comes before any output."""
    if not store:
        return _stoppable(Simulation(cfg.allocator, cfg.sim).run(steps), stop)
    target = Store(store)
    target.check_path(read_only=False)  # /dev/null, a directory, a name too long: refused before anything is made
    recorded = record_simulation(cfg, target, steps, run_id=run_id, overwrite=overwrite, stop=stop)
    first = next(recorded, None)
    return (r.sim_step for r in itertools.chain([] if first is None else [first], recorded))


def _stoppable(steps: Iterator[SimStep], stop: StopFlag | None) -> Iterator[SimStep]:
    for st in steps:
        yield st
        if stop is not None:
            stop.check()


def cmd_simulate(args: argparse.Namespace) -> int:
    check_steps(args.steps, args.default_steps)
    cfg = run_config(args)
    # with a store, the run id is checked before it is opened (a family the id cannot carry)
    run_id = run_id_of(cfg, args.run_name) if args.store else args.run_name or cfg.default_run_id()
    with stop_on_signals() as stop:
        try:
            return _simulate(args, cfg, run_id, stop)
        except StopRequested as exc:
            where = (f"; run {run_id} is `stopped` in {args.store} with the steps written so far (a simulation does "
                     "not resume: record it again with --overwrite)") if args.store else ""
            sys.stderr.write(f"pilot-commit simulate: {exc.reason}{where}\n")
            return exit_status(exc)
        except Exception as exc:  # an I/O error, or a full disk a library wrapped
            if isinstance(exc, BrokenPipeError) or not failed_write(exc):
                raise
            _, reason = run_outcome(exc, where=args.store, then="record it again with --overwrite")
            sys.stderr.write(f"pilot-commit simulate: run {run_id} failed: {reason}\n")
            return WRITE_FAILED


def _simulate(args: argparse.Namespace, cfg: RunConfig, run_id: str, stop: StopFlag) -> int:
    ac = cfg.allocator
    out = sys.stdout
    every = max(1, args.steps // 20)
    steps_iter = _sim_steps(cfg, args.steps, args.store, run_id, overwrite=args.overwrite, stop=stop)
    fields = table_fields(ac.screen_strategy)
    if not args.json:
        out.write(
            f"simulate {ac.method}: b_t={ac.train_batch} b_g={ac.sampling_batch} n={ac.n}"
            + (f" ({ac.pilot_n}+{ac.commit_n})" if ac.method == "pc" else "")
            + f" prompts={cfg.sim.num_prompts} steps={args.steps} seed={cfg.seed} preset={cfg.preset}"
            + (f" store={args.store} run={run_id}" if args.store else "")
            + "\n"
        )
        out.write(" ".join(f"{h:>{w}}" for _, h, w, _ in fields) + "\n")
    last: SimStep | None = None
    with progress_bar(args.steps, f"simulate {ac.method}", enabled=not args.json) as bar:
        for st in steps_iter:
            last = st
            rec = st.record()
            if args.json:
                out.write(json.dumps(rec) + "\n")
            elif rec["step"] % every == 0 or rec["step"] in (1, args.steps):
                bar.clear()
                out.write(" ".join(f"{rec[k]:>{w}{spec}}" for k, _, w, spec in fields) + "\n")
                out.flush()
            bar.update(1)
    if not args.json and last is not None:
        out.write(
            f"done: {last.cumulative_sampled:,} rollouts sampled, {last.cumulative_trained:,} trained, "
            f"accuracy {last.accuracy:.3f}\n"
        )
    return OK


# ---- simulate-demo ------------------------------------------------------------------------------------------------
def cmd_simulate_demo(args: argparse.Namespace) -> int:
    """GRPO, DAPO and PC (and the oracle bound) in the simulator, summarized side by side."""
    check_steps(args.steps, args.default_steps)
    methods = list(METHODS)
    if "allocator.method" in parse_overrides(args.set):
        raise ConfigError(
            f"--set allocator.method: simulate-demo runs every method ({', '.join(methods)}) side by side, so a method "
            "setting would be ignored. Fix: drop it, or run one method with `pilot-commit simulate --method ...`."
        )
    rows = []
    curves: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for m in methods:
        rc = run_config(args, method=m, pc_only_to_pc=True)
        if args.store:
            run_id_of(rc, None)  # a family the run ids cannot carry: refused before the store is opened
        steps_iter = _sim_steps(rc, args.steps, args.store, overwrite=args.overwrite)
        acc, cum, std, multi, evicted = [], [], [], 0, 0
        with progress_bar(args.steps, f"simulate {m:>6}", enabled=True) as bar:
            for st in steps_iter:
                led = st.outcome.ledger
                acc.append(st.accuracy)
                cum.append(st.cumulative_sampled)
                std.append(led.mean_reward_std)
                multi += led.rounds > 1
                evicted += led.evicted
                bar.update(1)
        curves[m] = (np.asarray(acc), np.asarray(cum))
        rows.append(
            {
                "method": m,
                "sampled": cum[-1],
                "trained": st.cumulative_trained,
                "reward_std": float(np.mean(std)),
                "evicted": evicted,
                "multi_round": multi / args.steps,
                "accuracy": acc[-1],
            }
        )
    target = float(target_accuracy(curves["grpo"][0].max(), curves["pc"][0].max()))
    for r in rows:
        acc, cum = curves[r["method"]]
        r["to_target"] = first_reaching(cum, acc, target)
    pc_cost = next(r["to_target"] for r in rows if r["method"] == "pc")
    rc = run_config(args, method="pc", pc_only_to_pc=True)
    cfg = rc.allocator
    out = sys.stdout
    out.write(
        f"\nPilot-Commit allocation in the scale simulator: {rc.sim.num_prompts:,} prompts, {args.steps} steps, "
        f"b_t={cfg.train_batch}, b_g={cfg.sampling_batch}, n={cfg.n} (PC {cfg.pilot_n}+{cfg.commit_n}), seed {rc.seed}\n"
        f"target accuracy = min(GRPO peak, PC peak) = {target:.3f}\n\n"
    )
    header = (
        f"{'method':<8} {'sampled':>12} {'trained':>12} {'mean r_std':>10} {'evicted':>8} {'rounds>1':>8} "
        f"{'final acc':>9} {'to target':>12} {'x vs PC':>8}"
    )
    out.write(header + "\n" + "-" * len(header) + "\n")
    for r in rows:
        to = r["to_target"]
        ratio = "-" if to is None or not pc_cost else f"{to / pc_cost:.2f}"
        out.write(
            f"{r['method']:<8} {r['sampled']:>12,} {r['trained']:>12,} {r['reward_std']:>10.3f} {r['evicted']:>8,} "
            f"{r['multi_round']:>8.1%} {r['accuracy']:>9.3f} {('never' if to is None else f'{to:,}'):>12} {ratio:>8}\n"
        )
    out.write(
        "\n'to target' = cumulative sampled rollouts at the first step at or above the target; 'x vs PC' = that "
        "cost over PC's (GRPO/PC and DAPO/PC as in the paper's Table 2). The simulator is a harness for the "
        "allocator, not a claim about model accuracy: see `pilot-commit simulate --help`.\n"
    )
    if args.store:
        query = "SELECT decision, count(*) FROM prompt_observations WHERE stage = 'pilot' GROUP BY ALL"
        exe = installed_command("pilot-commit")
        out.write(
            f"\nThe runs are recorded in {args.store}. Ask it, e.g.:\n"
            f"  {shell_command(exe, 'runs', '--store', args.store)}\n"
            f"  {shell_command(exe, 'report', '--store', args.store)}\n"
            f"  {shell_command(exe, 'sql', '--store', args.store, query)}\n"
        )
    return OK


# ---- sim-fit ------------------------------------------------------------------------------------------------------
def cmd_sim_fit(args: argparse.Namespace) -> int:
    """Fit the simulator's mix and learning law to runs in a store (read-only); write the fit as JSON."""
    from ..durable import OutputRefused, check_user_output, write_user_output
    from ..simulator.fit import fit_simulator, read_runs

    if args.mix_steps < 1:
        raise ConfigError(f"--mix-steps {args.mix_steps}: must be >= 1. Fix: pass the number of first steps whose "
                          "first visits fit the pass-rate mix (default 20).")
    if args.out and not Path(args.out).resolve().parent.is_dir():
        raise ConfigError(f"--out {brief(args.out)}: its folder does not exist. Fix: create the folder, or write the "
                          "fit elsewhere.")
    store = Store(args.store)  # a path that is no store is refused when read_runs opens it
    if args.out:  # refused before the fit: never over the store it reads, never a folder, a disk or a socket
        try:
            check_user_output(args.out, store.own_paths())
        except OutputRefused as exc:
            raise ConfigError(f"--out {exc}.") from exc
    fit = fit_simulator(read_runs(store, args.runs), mix_steps=args.mix_steps)
    out = sys.stdout
    law = fit.law or fit.laws[fit.chosen]
    out.write(f"sim-fit: {len(fit.runs)} runs from {shown_path(args.store)}; law form {fit.chosen} (AIC "
              + ", ".join(f"{k} {v.aic:.1f}" for k, v in fit.laws.items()) + ")"
              + (f"; at a search bound: {', '.join(law.at_bound)}" if law.at_bound else "") + "\n")
    out.write(fit.terms_line() + "\n")
    out.write("fitted SimConfig fields (--set sim.<field>=<value>):\n")
    for k, v in fit.sim.items():
        out.write(f"  {k} = {v:.6g}\n" if isinstance(v, float) else f"  {k} = {v}\n")
    out.write(f"{'run':<40} {'evals':>5} {'rmse':>7} {'bias':>8}\n")
    for r in law.per_run:
        out.write(f"{r['run_id']:<40} {r['evaluations']:>5} {r['rmse']:>7.4f} {r['bias']:>+8.4f}\n")
    if args.out:
        try:
            write_user_output(args.out, (json.dumps(fit.to_dict(), indent=1) + "\n").encode(), store.own_paths())
        except OutputRefused as exc:
            raise ConfigError(f"--out {exc}.") from exc
        except OSError as exc:  # a read-only folder, a full disk, ...: a failed write (cli/exits.py)
            sys.stderr.write(f"pilot-commit sim-fit: could not write {shown_path(args.out)}: {exc.strerror or exc}; "
                             "the fit above is not saved. Fix: give --out a JSON file path in a folder you can write "
                             "to.\n")
            return output_status(exc)
        out.write(f"fit and residuals written to {args.out}\n")
    return OK


# ---- plan ---------------------------------------------------------------------------------------------------------
def cmd_plan(args: argparse.Namespace) -> int:
    """Rank candidate budgets by the simulator fitted on the first steps of runs in a store."""
    from ..durable import OutputRefused, check_user_output
    from ..simulator.plan import TRUST, plan_store_runs, write_plan_plot

    for flag, value in (("--fit-steps", args.fit_steps), ("--horizon", args.horizon)):
        if value < 1:
            raise ConfigError(f"{flag} {value}: must be >= 1. Fix: pass a positive number of steps.")
    if args.resamples < 0:
        raise ConfigError(f"--resamples {args.resamples}: must be >= 0. Fix: pass 0 (no interval) or more.")
    if args.plot and Path(args.plot).is_dir():  # refused before a minute of fitting, not after
        raise ConfigError(f"--plot {brief(args.plot)} is a folder. Fix: name a PNG file, e.g. "
                          f"{shell_command(str(Path(args.plot) / 'plan.png'))}.")
    store = Store(args.store)  # a path that is no store is refused when read_runs opens it
    if args.plot:  # refused before the fit: never over the store it reads, never a disk or a socket
        try:
            check_user_output(args.plot, store.own_paths())
        except OutputRefused as exc:
            raise ConfigError(f"--plot {exc}.") from exc
    err = sys.stderr
    result = plan_store_runs(store, args.runs, args.preset, args.fit_steps, args.horizon, args.seeds,
                             resamples=args.resamples, progress=lambda msg: err.write(f"plan: {msg}\n"))
    out = sys.stdout
    out.write(result.header() + "\n" + result.table() + "\n" + result.verdict_line() + "\n")
    out.write("best: " + shell_command(installed_command("pilot-commit"), *result.train_args()) + "\n")
    out.write(f"{TRUST}.\n")
    if args.plot:
        try:
            write_plan_plot(result, args.plot, store)
        except OutputRefused as exc:
            raise ConfigError(f"--plot {exc}.") from exc
        except OSError as exc:  # a failed write (cli/exits.py)
            sys.stderr.write(f"pilot-commit plan: could not write {shown_path(args.plot)}: {exc.strerror or exc}. Fix: "
                             "give --plot a PNG file path in a folder you can write to.\n")
            return output_status(exc)
        out.write(f"plot: {args.plot}\n")
    return OK


def cmd_demo_deprecated(args: argparse.Namespace) -> int:
    """``pilot-commit demo``, the old name of ``simulate-demo``: the same command, after a one-line warning."""
    sys.stderr.write("pilot-commit: `demo` is deprecated; use `pilot-commit simulate-demo` (the same simulator "
                     "comparison). `make demo` runs the Dagster graph.\n")
    return cmd_simulate_demo(args)


def add_parsers(sub) -> None:
    """``simulate``, ``sim-fit``, ``plan``, ``simulate-demo`` and ``demo``."""
    from ..simulator import plan as plan_module

    p = sub.add_parser("simulate", help="run one allocation method against the scale simulator")
    add_config_args(p)
    _add_sim_args(p, steps=200)
    p.add_argument("--json", action="store_true", help="one JSON object per step on stdout")
    p.add_argument("--store", help="record the run in this store (a DuckDB file; step logs go beside it)")
    p.add_argument("--run-name", type=run_name_arg,
                   help="run id in the store (default: family-method-seed-confighash); letters, digits, '.', '_', "
                   "'-', starting with a letter or digit, at most 128 characters")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing run of this name in the store (its rows and step files are deleted first)")
    p.set_defaults(func=cmd_simulate)

    p = sub.add_parser("sim-fit", help="fit the simulator's pass-rate mix and learning law to runs in a store")
    p.add_argument("--store", required=True, help="the store (a DuckDB file) holding the runs; opened read-only")
    p.add_argument("--runs", nargs="+", required=True, metavar="RUN_ID", help="the run ids to fit on")
    p.add_argument("--mix-steps", type=int_arg, default=20,
                   help="first visits within this many first steps fit the pass-rate mix (default 20)")
    p.add_argument("--out", help="write the fit (SimConfig fields, every law form's residuals, the mix's) as JSON here")
    p.set_defaults(func=cmd_sim_fit)

    p = sub.add_parser("plan", help="rank budgets by the simulator fitted on the first steps of runs in a store")
    p.add_argument("--store", required=True, help="the store (a DuckDB file) holding the runs; opened read-only")
    p.add_argument("--runs", nargs="+", required=True, metavar="RUN_ID", help="the run ids whose first steps are fitted")
    p.add_argument("--fit-steps", type=int_arg, default=20, help="fit on each run's first this many steps (default 20)")
    p.add_argument("--horizon", type=int_arg, default=120, help="simulated steps per candidate (default 120)")
    p.add_argument("--seeds", type=int_arg, nargs="+", default=list(plan_module.SEEDS),
                   help=f"simulated seeds of the point predictions (default the {len(plan_module.SEEDS)} seeds "
                        f"{plan_module.SEEDS[0]}-{plan_module.SEEDS[-1]})")
    p.add_argument("--preset", default=None, help="the preset the candidates train with (default: the first run's)")
    p.add_argument("--resamples", type=int_arg, default=plan_module.RESAMPLES,
                   help="refits on resampled steps for each budget's 10-90%% interval and 'first in k' (default "
                        f"{plan_module.RESAMPLES}; 0: none)")
    p.add_argument("--plot", metavar="FILE.png", help="also draw the ranked budgets with their intervals as a PNG")
    p.set_defaults(func=cmd_plan)

    for name, func, help_ in (
        ("simulate-demo", cmd_simulate_demo, "GRPO vs DAPO vs PC (vs oracle) in the simulator, side by side"),
        ("demo", cmd_demo_deprecated, "deprecated name of simulate-demo"),
    ):
        p = sub.add_parser(name, help=help_)
        add_config_args(p, with_method=False)
        _add_sim_args(p, steps=300)
        p.add_argument("--store", help="also record the runs in this store (a DuckDB file)")
        p.add_argument("--overwrite", action="store_true", help="replace runs of the same names already in the store")
        p.set_defaults(func=func)
