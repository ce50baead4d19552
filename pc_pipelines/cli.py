"""``pilot-commit``: the command line for everything the pipeline does without the UI.

Subcommands so far:

* ``simulate``: drive the real allocator against the scale simulator; one JSON object per step with ``--json``,
  otherwise a progress bar and a readable table.
* ``simulate-demo``: GRPO, DAPO, PC (and the oracle bound) side by side in the simulator, in seconds (``make demo``
  is the other demo: the whole Dagster graph on a real model, :mod:`pc_pipelines.demo`).
* ``train`` / ``base-policy``: real training on the embedded default (:mod:`.cli_train`).
* ``sql`` / ``runs`` / ``report``: read a store (read-only; works while runs write), ``presets``: list or show.
* ``check``: every damaged or missing step of a store, with how to repair it (exit 1 when there is any).

Output a user asked for goes to stdout; progress bars and logs go to stderr, so ``--json`` output pipes cleanly.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import re
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from .allocation import METHODS
from .cli_args import add_config_args, int_arg, progress_bar, run_config, run_id_of, run_name_arg
from .config import RunConfig, available_presets, load_preset, parse_overrides, resolve
from .errors import ConfigError
from .simulate import SimStep, Simulation
from .stopping import StopFlag, StopRequested, run_outcome, stop_on_signals
from .store import RunBusyError, Store, StoreError
from .store.names import RunIdError
from .store.runlock import with_live_status

log = logging.getLogger("pc_pipelines.cli")

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


def _add_sim_args(p: argparse.ArgumentParser, steps: int) -> None:
    p.add_argument("--steps", type=int_arg, default=steps, help=f"training steps (default {steps})")


# ---- simulate ---------------------------------------------------------------------------------------------------
def _sim_steps(cfg: RunConfig, steps: int, store: str | None, run_id: str | None = None, overwrite: bool = False,
               stop: StopFlag | None = None) -> Iterator[SimStep]:
    """Simulated steps of ``cfg``, recorded in ``store`` when one is given (as a training run would be). With a
    store, the run is opened (locked, checked against an existing run of that name) before this returns: a refusal
    comes before any output."""
    if not store:
        return _stoppable(Simulation(cfg.allocator, cfg.sim).run(steps), stop)
    from .sim_runs import record_simulation

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
            return exc.exit_code
        except OSError as exc:
            if isinstance(exc, BrokenPipeError):
                raise
            _, reason = run_outcome(exc, where=args.store, then="record it again with --overwrite")
            sys.stderr.write(f"pilot-commit simulate: run {run_id} failed: {reason}\n")
            return 1


def _simulate(args: argparse.Namespace, cfg: RunConfig, run_id: str, stop: StopFlag) -> int:
    ac = cfg.allocator
    out = sys.stdout
    every = max(1, args.steps // 20)
    steps_iter = _sim_steps(cfg, args.steps, args.store, run_id, overwrite=args.overwrite, stop=stop)
    if not args.json:
        out.write(
            f"simulate {ac.method}: b_t={ac.train_batch} b_g={ac.sampling_batch} n={ac.n}"
            + (f" ({ac.pilot_n}+{ac.commit_n})" if ac.method == "pc" else "")
            + f" prompts={cfg.sim.num_prompts} steps={args.steps} seed={cfg.seed} preset={cfg.preset}"
            + (f" store={args.store} run={run_id}" if args.store else "")
            + "\n"
        )
        out.write(" ".join(f"{h:>{w}}" for _, h, w, _ in TABLE_FIELDS) + "\n")
    last: SimStep | None = None
    with progress_bar(args.steps, f"simulate {ac.method}", enabled=not args.json) as bar:
        for st in steps_iter:
            last = st
            rec = st.record()
            if args.json:
                out.write(json.dumps(rec) + "\n")
            elif rec["step"] % every == 0 or rec["step"] == args.steps - 1:
                bar.clear()
                out.write(" ".join(f"{rec[k]:>{w}{spec}}" for k, _, w, spec in TABLE_FIELDS) + "\n")
                out.flush()
            bar.update(1)
    if not args.json and last is not None:
        out.write(
            f"done: {last.cumulative_sampled:,} rollouts sampled, {last.cumulative_trained:,} trained, "
            f"accuracy {last.accuracy:.3f}\n"
        )
    return 0


# ---- simulate-demo ------------------------------------------------------------------------------------------------
def _first_reaching(acc: np.ndarray, cum: np.ndarray, target: float) -> int | None:
    hit = np.flatnonzero(acc >= target - 1e-12)
    return int(cum[hit[0]]) if hit.shape[0] else None


def cmd_simulate_demo(args: argparse.Namespace) -> int:
    """GRPO, DAPO and PC (and the oracle bound) in the simulator, summarized side by side."""
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
    target = float(min(curves["grpo"][0].max(), curves["pc"][0].max()))
    for r in rows:
        acc, cum = curves[r["method"]]
        r["to_target"] = _first_reaching(acc, cum, target)
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
        out.write(
            f"\nThe runs are recorded in {args.store}. Ask it, e.g.:\n"
            f"  pilot-commit runs --store {args.store}\n"
            f"  pilot-commit report --store {args.store}\n"
            f'  pilot-commit sql --store {args.store} "SELECT decision, count(*) FROM prompt_observations '
            "WHERE stage = 'pilot' GROUP BY ALL\"\n"
        )
    return 0


def cmd_demo_deprecated(args: argparse.Namespace) -> int:
    """``pilot-commit demo``, the old name of ``simulate-demo``: the same command, after a one-line warning."""
    sys.stderr.write("pilot-commit: `demo` is deprecated; use `pilot-commit simulate-demo` (the same simulator "
                     "comparison). `make demo` runs the Dagster graph.\n")
    return cmd_simulate_demo(args)


# ---- store commands -----------------------------------------------------------------------------------------------
def _format_value(v) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def _print_rows(cols: list[str], rows: list[tuple], fmt: str, out=None) -> None:
    out = out or sys.stdout
    if fmt == "json":
        out.write(json.dumps([dict(zip(cols, r)) for r in rows], default=str, indent=1) + "\n")
    elif fmt == "csv":
        import csv

        w = csv.writer(out)
        w.writerow(cols)
        w.writerows([["" if v is None else v for v in r] for r in rows])
    else:
        cells = [[_format_value(v) for v in r] for r in rows]
        widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(cols)]
        out.write("  ".join(c.ljust(w) for c, w in zip(cols, widths)).rstrip() + "\n")
        out.write("  ".join("-" * w for w in widths) + "\n")
        for r in cells:
            out.write("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() + "\n")
        out.write(f"({len(rows)} row{'s' if len(rows) != 1 else ''})\n")


SQL_TABLES = (
    "Tables and views: runs, steps, prompt_observations, buffer_state, evictions, eval_results, checkpoints, "
    "segments, pass_rate_history, decision_reasons, step_costs, rollout_breakdown, eval_curve, rollouts_to_target, "
    "damaged_steps."
)


def cmd_sql(args: argparse.Namespace) -> int:
    """One read-only query. The session cannot write anything: the catalog is opened read-only and DuckDB's
    external access is off with its configuration locked (see Store.connect), so COPY, EXPORT, ATTACH, INSTALL
    and file readers fail with DuckDB's permission error; nothing here ever opens the catalog for writing."""
    import duckdb

    store = Store(args.store)
    try:
        cols, rows = store.query_table(args.query)
    except duckdb.Error as exc:  # a SQL error is the user's to fix: show DuckDB's message, not a traceback
        hint = SQL_TABLES
        text = str(exc)
        if isinstance(exc, duckdb.PermissionException) or "read-only" in text or "locked" in text or writing_statement(args.query):
            hint = ("`pilot-commit sql` is read-only: SELECT (and WITH, DESCRIBE, SUMMARIZE, EXPLAIN, temporary views) "
                    "over the store's tables and views; it cannot write, read other files, attach databases or "
                    "change settings. To export, use --csv or --json and redirect stdout.\n" + SQL_TABLES)
        sys.stderr.write(f"pilot-commit sql: {text}\n{hint}\n")
        return 1
    _print_rows(cols, rows, "json" if args.json else "csv" if args.csv else "table")
    _warn_problems(store, args.store)
    return 0


# Statements `pilot-commit sql` refuses, by their first keyword (DuckDB's error for some of them names neither
# read-only nor a permission: DuckDB 2.0.1 says "Cannot COPY to <the catalog>: the file belongs to an attached
# database"). The hint that says what sql allows is shown for these whatever DuckDB's words.
WRITING_KEYWORDS = frozenset({"COPY", "EXPORT", "IMPORT", "ATTACH", "DETACH", "INSTALL", "LOAD", "SET", "RESET",
                              "INSERT", "UPDATE", "DELETE", "CREATE", "DROP", "ALTER", "CHECKPOINT", "VACUUM",
                              "TRUNCATE", "PRAGMA", "USE", "CALL"})


def writing_statement(query: str) -> bool:
    """Whether any statement of ``query`` starts with a keyword of WRITING_KEYWORDS (comments and blank statements
    skipped; a `CREATE TEMP VIEW` is allowed by the store, so an error there is a plain SQL error)."""
    text = re.sub(r"--[^\n]*|/\*.*?\*/", " ", query, flags=re.S)
    for statement in text.split(";"):
        words = statement.split()
        if not words:
            continue
        head = words[0].upper()
        if head == "CREATE" and len(words) > 2 and words[1].upper() in ("TEMP", "TEMPORARY") and words[2].upper() == "VIEW":
            continue
        if head in WRITING_KEYWORDS:
            return True
    return False


def _warn_problems(store: Store, path: str) -> None:
    scan = store.last_scan
    if scan is not None and scan.problems:
        runs = sorted({p.run_id for p in scan.problems})
        sys.stderr.write(
            f"pilot-commit: warning: {len(scan.problems)} step(s) of run(s) {', '.join(runs)} are damaged or missing "
            f"and were left out; cumulative figures of those runs are lower bounds. See `pilot-commit check --store "
            f"{path}`.\n"
        )


def cmd_runs(args: argparse.Namespace) -> int:
    store = Store(args.store)
    runs = with_live_status(store, store.list_runs())  # a run whose writer is gone shows as stopped
    cols = ["run_id", "family", "method", "seed", "steps", "cumulative_sampled", "cumulative_trained", "status"]
    if args.json:  # the reason a run is stopped, failed or paused comes with it; damaged or missing steps too
        cols += ["status_reason", "missing_steps", "damaged_steps", "problems"]
        _print_rows(cols, [tuple(r[c] for c in cols) for r in runs], "json")
        _warn_problems(store, args.store)
        return 0
    if any(r["missing_steps"] for r in runs):
        cols += ["problems"]
    _print_rows(cols, [tuple(r[c] for c in cols) for r in runs], "table")
    for r in runs:  # below the table: one line per run that did not end well, with its reason and fix
        if r["status"] in ("stopped", "failed", "paused") and r["status_reason"]:
            sys.stdout.write(f"{r['run_id']} {r['status']}: {r['status_reason']}\n")
    _warn_problems(store, args.store)
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    """Every damaged or missing step, with how to repair it; exit 1 when there is any, 0 when the store is whole.
    Runs recorded as running whose writer is gone are listed as stopped (their steps are not damaged by it)."""
    store = Store(args.store)
    scan, running = store.check(with_running=True)
    stale = [r for r in with_live_status(store, running) if r["status"] == "stopped"]
    if args.json:
        sys.stdout.write(json.dumps({"store": args.store, "runs": scan.runs, "steps_checked": scan.steps_checked,
                                     "problems": [p.to_dict() for p in scan.problems],
                                     "stopped_runs": [{k: r[k] for k in ("run_id", "status", "status_reason")}
                                                      for r in stale]}, indent=1) + "\n")
        return 1 if scan.problems else 0
    for r in stale:
        sys.stdout.write(f"run {r['run_id']}: stopped: {r['status_reason']}\n")
    if not scan.problems:
        sys.stdout.write(f"{args.store}: {scan.runs} run(s), {scan.steps_checked} uncompacted step director(ies) "
                         "checked against their manifests (compacted steps live in the catalog), no damaged or "
                         "missing step.\n")
    else:
        sys.stdout.write(f"{args.store}: {len(scan.problems)} damaged or missing step(s) "
                         f"({scan.steps_checked} uncompacted step director(ies) checked):\n")
        for p in scan.problems:
            sys.stdout.write(f"\nrun {p.run_id} step {p.step}: {p.kind}: {p.detail}\n")
            if p.path:
                sys.stdout.write(f"  path: {p.path}\n")
            sys.stdout.write(f"  fix:  {p.fix}\n")
    return 1 if scan.problems else 0


def cmd_report(args: argparse.Namespace) -> int:
    from .reports import ReportError, write_plots

    store = Store(args.store)
    report = store.report(args.family)
    _warn_problems(store, args.store)
    if args.json:
        sys.stdout.write(json.dumps(report, indent=1) + "\n")
    elif not report:
        sys.stdout.write(
            "no family has both a GRPO and a PC run with eval results yet (the target is min(GRPO peak, PC peak)). "
            f"Record them first, e.g. `pilot-commit simulate-demo --store {args.store}`.\n"
        )
    else:
        _print_report(report)
    if args.plots:
        try:
            paths = write_plots(store, args.plots, args.family)
        except ReportError as exc:
            sys.stderr.write(f"pilot-commit report: {exc}\n")
            return 2
        # with --json, stdout stays one JSON document: where the plots went goes to stderr
        out = sys.stderr if args.json else sys.stdout
        out.write(f"\n{len(paths)} plots in {Path(args.plots).resolve()}:\n" + "".join(f"  {p.name}\n" for p in paths))
    return 0


def _print_report(report: dict) -> None:
    """Table 2 per family, as the CLI's readable table."""
    from .reports import format_count, format_ratio

    for family, fam in report.items():
        sys.stdout.write(f"\nfamily {family}: cumulative sampled rollouts to reach the target accuracy\n")
        cols = ["seed", "target", "grpo", "dapo", "pc", "grpo/pc", "dapo/pc"]
        rows = [
            (s["seed"], f"{s['target']:.4f}", *[format_count(s["rollouts"][m]) for m in ("grpo", "dapo", "pc")],
             format_ratio(s["grpo_over_pc"]), format_ratio(s["dapo_over_pc"]))
            for s in fam["seeds"]
        ]
        rows.append(("median", "", "", "", "", format_ratio(fam["median_grpo_over_pc"]),
                     format_ratio(fam["median_dapo_over_pc"])))
        _print_rows(cols, rows, "table")
        short = [f"seed {s['seed']}: {s['missing_steps']}" for s in fam["seeds"] if s.get("missing_steps")]
        if short:
            sys.stdout.write(
                f"warning: runs behind this table lack steps ({', '.join(short)} missing); their rollout counts are "
                "lower bounds. Fix: see `pilot-commit check --store <this store>`.\n"
            )


def cmd_presets(args: argparse.Namespace) -> int:
    if args.show:
        cfg = resolve(args.show, parse_overrides(args.set))
        sys.stdout.write(json.dumps({**cfg.to_dict(), "config_hash": cfg.config_hash}, indent=1) + "\n")
        return 0
    for name in available_presets():
        sys.stdout.write(f"{name:<18} {load_preset(name).get('description', '')}\n")
    return 0


# ---- entry point -------------------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pilot-commit", description=__doc__.split("\n")[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr")
    sub = parser.add_subparsers(dest="command", required=True)

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

    p = sub.add_parser("sql", help="run a read-only SQL query against a store (works while runs write)")
    p.add_argument("--store", required=True, help="the store's DuckDB file")
    p.add_argument("query", help='e.g. "SELECT * FROM pass_rate_history WHERE prompt_id = 7"')
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--csv", action="store_true", help="CSV on stdout")
    fmt.add_argument("--json", action="store_true", help="a JSON array of row objects on stdout")
    p.set_defaults(func=cmd_sql)

    p = sub.add_parser("runs", help="list a store's runs with steps, cumulative rollouts, status and damaged steps")
    p.add_argument("--store", required=True)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_runs)

    p = sub.add_parser("check", help="verify every step against its manifest; list damaged or missing steps with "
                       "how to repair them (exit 1 when there is any)")
    p.add_argument("--store", required=True)
    p.add_argument("--json", action="store_true", help="a JSON object: runs, steps_checked, problems")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("report", help="rollouts-to-target table per family and seed (paper Table 2)")
    p.add_argument("--store", required=True)
    p.add_argument("--family", help="only this family")
    p.add_argument("--json", action="store_true", help="per family and seed: target, rollouts per method, ratios")
    p.add_argument("--plots", metavar="DIR", help="also write PNG plots per family into DIR (accuracy vs rollouts and "
                   "vs steps, reward std and informative share per step)")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("presets", help="list presets, or --show NAME to print one resolved with its hash")
    p.add_argument("--show", metavar="NAME")
    p.add_argument("--set", action="append", metavar="KEY=VALUE")
    p.set_defaults(func=cmd_presets)

    from .cli_train import add_parsers  # the training commands import torch only when they run

    add_parsers(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        return int(args.func(args) or 0)
    except ConfigError as exc:
        sys.stderr.write(f"pilot-commit: configuration error: {exc}\n")
        return 2
    except RunBusyError as exc:  # another process writes the run: the message names it and the fix
        sys.stderr.write(f"pilot-commit: {exc}\n")
        return 2
    except (StoreError, RunIdError) as exc:
        sys.stderr.write(f"pilot-commit: store error: {exc}\n")
        return 2
    except StopRequested as exc:  # a stop before any run was opened (still deciding what to do)
        sys.stderr.write(f"pilot-commit: {exc.reason}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("pilot-commit: interrupted (Ctrl-C)\n")
        return 130
    except BrokenPipeError:  # `pilot-commit simulate --json | head`
        return 0
    except FileNotFoundError as exc:  # e.g. --policy pointing at no model directory; the message says the fix
        sys.stderr.write(f"pilot-commit: {exc}\n")
        return 2


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
