"""The commands that read a store: ``sql`` (one read-only query), ``runs``, ``check`` (every damaged or missing step,
with how to repair it; exit 1 when there is any), ``report`` (the rollouts-to-target table, paper Table 2, and
its plots), ``timeline`` (one run's pass rate per prompt and step, with the allocator's decisions, as a PNG) and
``compare`` (runs overlaid by step and by rollouts, one labelled line per run, as a PNG). All are read-only and work while runs write."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

from ..durable import OutputRefused, check_user_output
from ..errors import installed_command, shell_command
from ..reports.timeline import DEFAULT_TOP
from ..store import Store
from ..store.names import shown_path
from ..store.runlock import damaged_reason, with_live_status
from .args import int_arg
from .exits import OK, PROBLEMS_FOUND, QUERY_FAILED, USER_ERROR, output_status


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

        w = csv.writer(out, lineterminator="\n")  # csv's default is \r\n, which `$(...)` in a shell keeps
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
    "segments, pass_rate_history, decision_reasons, step_costs, rollout_breakdown, eval_curve, compared_runs, "
    "rollouts_to_target, damaged_steps."
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
        return QUERY_FAILED
    _print_rows(cols, rows, "json" if args.json else "csv" if args.csv else "table")
    _warn_problems(store, args.store)
    return OK


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
            f"and were left out; cumulative figures of those runs are lower bounds. See "
            f"`{shell_command('pilot-commit', 'check', '--store', path)}`.\n"
        )


def cmd_runs(args: argparse.Namespace) -> int:
    store = Store(args.store)
    # a run whose writer is gone shows as stopped; a Dagster run between its segments as waiting
    runs = with_live_status(store, store.list_runs())
    cols = ["run_id", "family", "method", "seed", "steps", "cumulative_sampled", "cumulative_trained", "status"]
    if args.json:  # the reason a run is stopped, failed, paused or waiting comes with it; damaged or missing steps too
        cols[5:5] = ["planned_steps"]
        cols += ["status_reason", "missing_steps", "damaged_steps", "problems"]
        _print_rows(cols, [tuple(r[c] for c in cols) for r in runs], "json")
        _warn_problems(store, args.store)
        return OK
    if any(r["missing_steps"] for r in runs):
        cols += ["problems"]
    shown = [{**r, "steps": steps_done_of_planned(r)} for r in runs]
    _print_rows(cols, [tuple(r[c] for c in cols) for r in shown], "table")
    if any(r["planned_steps"] is not None for r in runs):
        sys.stdout.write("steps: done/planned (a Dagster run's segment plan, or train's --steps)\n")
    for r in runs:  # below the table: one line per run that did not end well or waits, with its reason and fix
        if r["status"] in ("stopped", "failed", "paused", "waiting", "damaged") and r["status_reason"]:
            sys.stdout.write(f"{r['run_id']} {r['status']}: {r['status_reason']}\n")
    _warn_problems(store, args.store)
    return OK


def steps_done_of_planned(run: dict) -> str:
    """``17/200`` for a run planned to 200 steps (its segment plan, or ``train --steps 200``), else the steps done."""
    planned = run.get("planned_steps")
    return f"{run['steps']}/{planned}" if planned is not None else str(run["steps"])


def cmd_check(args: argparse.Namespace) -> int:
    """Every damaged or missing step, with how to repair it; exit 1 when there is any, 0 when the store is whole.
    Runs recorded as running whose writer is gone are listed as stopped (their steps are not damaged by it), or as
    waiting when they are Dagster runs between two segments."""
    store = Store(args.store)
    scan, running = store.check(with_running=True)
    live = with_live_status(store, running)
    stale = [r for r in live if r["status"] == "stopped"]
    # a run recorded finished that lacks steps is damaged, never finished (issue 54)
    lacking: dict[str, list[str]] = {}
    for p in scan.problems:
        lacking.setdefault(p.run_id, []).append(f"step {p.step} {p.kind}")
    damaged = [{"run_id": rid, "status": "damaged",
                "status_reason": damaged_reason(store, {"problems": ", ".join(what)})}
               for rid, what in lacking.items() if (store.get_run(rid) or {}).get("status") == "finished"]
    if args.json:
        sys.stdout.write(json.dumps({"store": args.store, "runs": scan.runs, "steps_checked": scan.steps_checked,
                                     "problems": [p.to_dict() for p in scan.problems],
                                     "stopped_runs": [{k: r[k] for k in ("run_id", "status", "status_reason")}
                                                      for r in stale],
                                     "waiting_runs": [{k: r[k] for k in ("run_id", "status", "status_reason")}
                                                      for r in live if r["status"] == "waiting"],
                                     "damaged_runs": damaged},
                                    indent=1) + "\n")
        return PROBLEMS_FOUND if scan.problems else OK
    for r in stale:
        sys.stdout.write(f"run {r['run_id']}: stopped: {r['status_reason']}\n")
    for r in damaged:
        sys.stdout.write(f"run {r['run_id']}: damaged: {r['status_reason']}\n")
    for r in live:
        if r["status"] == "waiting":  # a Dagster run between segments: not crashed, nothing to repair
            sys.stdout.write(f"run {r['run_id']}: waiting: {r['status_reason']}\n")
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
    return PROBLEMS_FOUND if scan.problems else OK


def cmd_report(args: argparse.Namespace) -> int:
    from ..reports import ReportError, write_plots

    store = Store(args.store)
    families = [r["family"] for r in store.query("SELECT DISTINCT family FROM runs ORDER BY family")]
    if args.family is not None and args.family not in families:  # a typo: an empty report would read as "no result"
        import difflib

        close = difflib.get_close_matches(args.family, families, n=1)
        fix = (f"`{shell_command('pilot-commit', 'report', '--store', args.store, '--family', close[0])}`"
               if close else "give --family one of them, or drop it to report every family")
        sys.stderr.write(f"pilot-commit report: no family {args.family!r} in {args.store} (its families: "
                         f"{', '.join(families) or 'none, it holds no run'}). Fix: {fix}.\n")
        return USER_ERROR
    report = store.report(args.family)
    _warn_problems(store, args.store)
    if args.json:
        sys.stdout.write(json.dumps(report, indent=1) + "\n")
    elif not report:
        # the advice records runs into a store of their own: simulated runs never go into the store named here
        sys.stdout.write(
            "no family has both a GRPO and a PC run with eval results yet (the target is min(GRPO peak, PC peak)). "
            "Fix: train a GRPO and a PC run of one family into it "
            f"(`{shell_command('pilot-commit', 'train', '--store', args.store, '--method', 'grpo')}`, then "
            f"`--method pc`); `{shell_command('pilot-commit', 'simulate-demo')}` shows such a table on simulated "
            "runs without writing any store.\n"
        )
    else:
        _print_report(report)
    if args.plots:
        try:
            check_user_output(args.plots, store.own_paths(), folder=True)  # never into the store it reads
            paths = write_plots(store, args.plots, args.family)
        except ReportError as exc:
            sys.stderr.write(f"pilot-commit report: {exc}\n")
            return USER_ERROR
        except OutputRefused as exc:  # a plot's name inside --plots is a folder, a disk, a socket
            sys.stderr.write(f"pilot-commit report: --plots: {exc}.\n")
            return USER_ERROR
        except (FileExistsError, NotADirectoryError):  # mkdir of --plots or of a folder above it
            sys.stderr.write(f"pilot-commit report: --plots {args.plots} is not a folder (a file is there or above "
                             "it); nothing was written. Fix: give --plots a folder, new or existing.\n")
            return USER_ERROR
        except OSError as exc:  # a read-only disk, a full one, ...
            sys.stderr.write(f"pilot-commit report: could not write the plots into {args.plots}: "
                             f"{exc.strerror or exc}. Fix: give --plots a folder you can write to.\n")
            return output_status(exc)
        # with --json, stdout stays one JSON document: where the plots went goes to stderr
        out = sys.stderr if args.json else sys.stdout
        out.write(f"\n{len(paths)} plots in {Path(args.plots).resolve()}:\n" + "".join(f"  {p.name}\n" for p in paths))
    return OK


def prompt_ids_arg(value: str) -> list[int]:
    """argparse ``type`` of ``--prompts``: comma-separated prompt ids (``3,7,11``)."""
    parts = [p.strip() for p in value.split(",")]
    if not any(parts):
        raise argparse.ArgumentTypeError("no prompt id given; e.g. --prompts 3,7,11")
    ids = []
    for p in parts:
        if p:  # a trailing comma is harmless
            try:
                ids.append(int_arg(p))
            except argparse.ArgumentTypeError as exc:
                raise argparse.ArgumentTypeError(f"{exc} (prompt ids are integers, comma-separated: 3,7,11)") from None
    return ids


def cmd_timeline(args: argparse.Namespace) -> int:
    """One run's pass-rate timeline as a PNG (pc_pipelines/reports/timeline.py): the rows, the steps, the file."""
    from ..reports.timeline import TimelineError, write_timeline

    if args.prompts is None and args.top < 1:
        sys.stderr.write(f"pilot-commit timeline: --top {args.top}: the heatmap needs at least one row. Fix: give "
                         f"--top 1 or more (default {DEFAULT_TOP}), or --prompts.\n")
        return USER_ERROR
    store = Store(args.store)
    onto_stdout = _is_stdout(args.out)  # --out /dev/stdout: the PNG is stdout, what was written goes to stderr
    sys.stdout.flush()
    try:
        check_user_output(args.out, store.own_paths())  # never over the store it reads
        result = write_timeline(store, args.run, args.out, prompts=args.prompts, top=args.top)
    except TimelineError as exc:
        sys.stderr.write(f"pilot-commit timeline: {exc}\n")
        return USER_ERROR
    except OutputRefused as exc:  # a folder, a disk, a socket
        sys.stderr.write(f"pilot-commit timeline: --out {exc}.\n")
        return USER_ERROR
    except BrokenPipeError:
        sys.stderr.write(f"pilot-commit timeline: the reader of {shown_path(args.out)} closed it before the PNG was whole. Fix: "
                         "let the reader take the whole PNG (no `head`), or give --out a PNG file path.\n")
        return USER_ERROR
    except OSError as exc:  # a read-only disk, a full one, ...
        sys.stderr.write(f"pilot-commit timeline: could not write {shown_path(args.out)}: {exc.strerror or exc}. Fix: give --out "
                         "a PNG file path in a folder you can write to.\n")
        return output_status(exc)
    _warn_problems(store, args.store)
    shown = result.path.resolve() if result.path.is_file() and not onto_stdout else result.path.absolute()
    (sys.stderr if onto_stdout else sys.stdout).write(f"wrote {shown}: {result.shows()}\n")
    return OK


def cmd_compare(args: argparse.Namespace) -> int:
    """Runs compared by step and by cumulative rollouts as a PNG (:func:`~pc_pipelines.reports.compare.compare_runs`):
    the runs drawn, the SQL behind the plot and the TensorBoard command overlaying the same runs."""
    from ..reports.compare import CompareError, compare_runs, runs_drawn

    store = Store(args.store)
    try:
        drawn = compare_runs(store, args.out, args.family, args.runs, tensorboard=installed_command("tensorboard"))
    except CompareError as exc:
        sys.stderr.write(f"pilot-commit compare: {exc}\n")
        return USER_ERROR
    except OutputRefused as exc:
        sys.stderr.write(f"pilot-commit compare: --out {exc}.\n")
        return USER_ERROR
    except OSError as exc:
        sys.stderr.write(f"pilot-commit compare: could not write {shown_path(args.out)}: {exc.strerror or exc}. Fix: "
                         "give --out a PNG file path in a folder you can write to.\n")
        return output_status(exc)
    _warn_problems(store, args.store)
    out = sys.stdout
    out.write(f"wrote {Path(drawn.path).resolve()}: {runs_drawn(len(drawn.lines))}\n")
    for ln in drawn.lines:
        out.write(f"  {ln.label}: {max(ln.step)} steps, {max(ln.cumulative_rollouts):,} rollouts\n")
    exe = installed_command("pilot-commit")  # commands a person pastes: as this shell reaches the scripts
    out.write(f"the plot's rows: {shell_command(exe, 'sql', '--store', args.store, drawn.query)}\n")
    out.write(f"in TensorBoard: {drawn.tensorboard}\n" if drawn.tensorboard else "in TensorBoard: none of these runs "
              "has TensorBoard logs (simulated runs write none)\n")
    return OK


def _is_stdout(path: str) -> bool:
    """Whether ``path`` is (after symlinks) the file this process's stdout writes to."""
    try:
        return os.path.samestat(os.stat(path), os.fstat(sys.stdout.fileno()))
    except (OSError, ValueError, AttributeError):  # no such path yet; stdout closed or not a real file
        return False


def _print_report(report: dict) -> None:
    """Table 2 per family, as the CLI's readable table, with the runs it compares."""
    from ..reports.tables import compared_runs_lines, family_smoke_test, target_rows, target_table_cells
    from ..store.schema import COMPARED_RUN_RULE

    for family, fam in report.items():
        sys.stdout.write(f"\nfamily {family}: cumulative sampled rollouts to reach the target accuracy\n")
        caveat = family_smoke_test(fam)  # the same rule and words as the report asset and the demo
        if caveat:
            sys.stdout.write(f"{caveat}.\n")
        cols = ["seed", "target", "grpo", "dapo", "pc", "grpo/pc", "dapo/pc"]
        _print_rows(cols, [target_table_cells(row) for row in target_rows({family: fam})], "table")
        sys.stdout.write(f"runs compared ({COMPARED_RUN_RULE}):\n"
                         + "".join(f"  {ln}\n" for ln in compared_runs_lines(fam)))
        short = [f"seed {s['seed']}: {s['missing_steps']}" for s in fam["seeds"] if s.get("missing_steps")]
        if short:
            sys.stdout.write(
                f"warning: runs behind this table lack steps ({', '.join(short)} missing); their rollout counts are "
                "lower bounds. Fix: see `pilot-commit check --store <this store>`.\n"
            )
    sys.stdout.write("\nnever: the run did not reach the target; no run: the family has no run of that method for "
                     "the seed.\n")


def add_parsers(sub) -> None:
    """``sql``, ``runs``, ``check``, ``report``, ``timeline`` and ``compare``."""
    p = sub.add_parser("sql", help="run a read-only SQL query against a store (works while runs write)")
    p.add_argument("--store", required=True, help="the store's DuckDB file")
    p.add_argument("query", help='e.g. "SELECT * FROM pass_rate_history WHERE prompt_id = 7"')
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--csv", action="store_true", help="CSV on stdout")
    fmt.add_argument("--json", action="store_true", help="a JSON array of row objects on stdout")
    p.set_defaults(func=cmd_sql)

    p = sub.add_parser("runs", help="list a store's runs with steps, cumulative rollouts, status and damaged steps")
    p.add_argument("--store", required=True, help="the store's DuckDB file (`runs/pc.duckdb` after `make demo`)")
    p.add_argument("--json", action="store_true", help="a JSON array of runs on stdout, with each run's status "
                   "reason and damaged or missing steps")
    p.set_defaults(func=cmd_runs)

    p = sub.add_parser("check", help="verify every step against its manifest; list damaged or missing steps with "
                       "how to repair them (exit 1 when there is any)")
    p.add_argument("--store", required=True, help="the store's DuckDB file (`runs/pc.duckdb` after `make demo`)")
    p.add_argument("--json", action="store_true", help="a JSON object: runs, steps_checked, problems")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("report", help="rollouts-to-target table per family and seed (paper Table 2)")
    p.add_argument("--store", required=True, help="the store's DuckDB file (`runs/pc.duckdb` after `make demo`)")
    p.add_argument("--family", help="only this family")
    p.add_argument("--json", action="store_true", help="per family and seed: target, rollouts per method, ratios")
    p.add_argument("--plots", metavar="DIR", help="also write PNG plots per family into DIR (accuracy vs rollouts and "
                   "vs steps, reward std and informative share per step)")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("timeline", help="one run's pass rate per prompt and step, with the allocator's decision "
                       "(trained, kept, skipped, deferred, surplus, evicted, returned), as a PNG; below it, the "
                       "decisions of all the run's prompts per step")
    p.add_argument("--store", required=True, help="the store's DuckDB file (`runs/pc.duckdb` after `make demo`)")
    p.add_argument("--run", required=True, metavar="RUN", help="the run's id (`pilot-commit runs --store ...`)")
    p.add_argument("--out", required=True, metavar="FILE.png", help="the PNG to write (its folder is created)")
    rows = p.add_mutually_exclusive_group()
    rows.add_argument("--prompts", type=prompt_ids_arg, metavar="ID,ID,...",
                      help="the prompts to show, in this order (e.g. 3,7,11)")
    rows.add_argument("--top", type=int_arg, default=DEFAULT_TOP, metavar="N",
                      help="show the N most-visited prompts (steps sampled; ties: lower id first); default "
                      f"{DEFAULT_TOP}")
    p.set_defaults(func=cmd_timeline)

    p = sub.add_parser("compare", help="runs overlaid by step and by cumulative rollouts (held-out accuracy, mean "
                       "reward), one labelled line per run, as a PNG; prints the SQL behind it and the TensorBoard "
                       "command overlaying the same runs")
    p.add_argument("--store", required=True, help="the store's DuckDB file (`runs/pc.duckdb` after `make demo`)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--runs", nargs="+", metavar="RUN", help="the runs to compare (default: every run)")
    which.add_argument("--family", help="compare this family's runs")
    p.add_argument("--out", required=True, metavar="FILE.png", help="the PNG to write (its folder is created)")
    p.set_defaults(func=cmd_compare)
