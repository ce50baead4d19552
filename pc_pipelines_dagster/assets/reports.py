"""The report assets (group ``reports``), all built by :mod:`pc_pipelines.reports` from the store:

* ``rollouts_report``: paper Table 2 (rollouts to the target accuracy) as Markdown and as a table the UI shows
  without a click, the per-method summary as a table, and the plots people would rather look at than read (accuracy
  vs cumulative rollouts, vs steps, mean reward std and informative share per step; one curve per method);
* ``pass_rate_timeline``: per run, each prompt's pass rate by step with the allocator's decision at that step
  (trained, kept, skipped, deferred, surplus, evicted, returned) and the decisions of all prompts per step
  (:mod:`pc_pipelines.reports.timeline`), inline in the metadata;
* ``budget_plan`` (not in the report job: materialized on demand): which budget to train next, from the simulator
  fitted on the first steps of the store's runs (:mod:`pc_pipelines.simulator.plan`, ``pilot-commit plan``);
* ``run_comparison``: per family (or the runs named), the runs overlaid by step and by cumulative rollouts (held-out
  accuracy, mean reward), one labelled line per run (:mod:`pc_pipelines.reports.compare`), with the SQL behind the
  plot and the TensorBoard command that overlays the same runs.
"""


import base64
import re
from pathlib import Path

from dagster import (
    AssetExecutionContext,
    Config,
    Failure,
    MaterializeResult,
    MetadataValue,
    TableColumn,
    TableRecord,
    TableSchema,
    asset,
)
from pydantic import Field

from pc_pipelines.durable import OutputRefused, check_user_output
from pc_pipelines.errors import ConfigError, installed_command, shell_command
from pc_pipelines.reports import ReportError, build_report, method_label
from pc_pipelines.reports.compare import CompareError, compare_runs
from pc_pipelines.reports.tables import family_smoke_test, significant, target_rows
from pc_pipelines.reports.timeline import DEFAULT_TOP, RECENT_RUNS, TimelineError, recent_runs, write_timeline
from pc_pipelines.simulator.plan import RESAMPLES as PLAN_RESAMPLES
from pc_pipelines.simulator.plan import SEEDS as PLAN_SEEDS
from pc_pipelines.simulator.plan import TRUST, plan_store_runs, plannable_runs, write_plan_plot
from pc_pipelines.store import StoreError
from pc_pipelines.store.schema import COMPARED_RUN_RULE
from pc_pipelines_dagster.resources import StoreResource

from .commands import sql_command
from .evaluation import segment_eval


class ReportConfig(Config):
    family: str | None = Field(default=None, description="Report one run family only (default: every family).")
    out_dir: str = Field(default="runs/reports", description="Where the PNG plots are written.")


def _out_dir(store, out_dir: str | Path) -> Path:
    """A report's ``out_dir``, refused (a :class:`Failure` with the fix, before anything is computed or written) when
    it is, or lies inside, what the asset reads: the store's catalog, its step logs, a run's checkpoints."""
    try:
        check_user_output(out_dir, store.own_paths(), folder=True)
    except OutputRefused as exc:
        raise Failure(f"out_dir {exc}.") from exc
    return Path(out_dir)


def _embedded(path) -> str:
    """A plot inlined as a data URI, so the asset's Markdown metadata shows it in the UI."""
    return f"![{path.stem}](data:image/png;base64,{base64.b64encode(path.read_bytes()).decode()})"


TARGET_SCHEMA = TableSchema(columns=[
    TableColumn("family"),
    TableColumn("seed", description="a seed, or 'median' (the family's median ratios)"),
    TableColumn("target", "float", "min(GRPO peak, PC peak) mean eval accuracy (4 significant digits)"),
    TableColumn("grpo", "string", "GRPO's cumulative sampled rollouts at its first eval >= target ('never': not "
                "reached; 'no run': no GRPO run)"),
    TableColumn("dapo", "string", "DAPO's, likewise"),
    TableColumn("pc", "string", "PC's, likewise"),
    TableColumn("grpo_over_pc", "float", "GRPO's rollouts over PC's (4 significant digits)"),
    TableColumn("dapo_over_pc", "float", "DAPO's rollouts over PC's (4 significant digits)"),
    TableColumn("runs_compared", "string", f"the run of each method and its steps ({COMPARED_RUN_RULE})"),
    TableColumn("note", "string", "a smoke test (fewer seeds or steps than the study), or compared runs that differ "
                "in length"),
    TableColumn("missing_steps", "int", "> 0: a compared run lacks steps, its counts are lower bounds"),
])
SUMMARY_SCHEMA = TableSchema(columns=[
    TableColumn("family"),
    TableColumn("method"),
    TableColumn("seeds"),
    TableColumn("steps", "int", "mean over the seeds' runs (rounded)"),
    TableColumn("sampled_rollouts", "int", "mean total sampled rollouts (rounded)"),
    TableColumn("trained_rollouts", "int", "mean total trained rollouts (rounded)"),
    TableColumn("final_accuracy", "float", "the last eval's mean accuracy (mean over seeds; 4 significant digits)"),
    TableColumn("peak_accuracy", "float", "the best eval's mean accuracy (mean over seeds; 4 significant digits)"),
    TableColumn("run_ids"),
])


def target_records(report: dict) -> list[TableRecord]:
    """``Store.report()``'s rows (family, seed; :func:`~pc_pipelines.reports.tables.target_rows`) as table records,
    each family closed by its median row."""
    return [TableRecord({**row, "seed": str(row["seed"]), "target": significant(row["target"]),
                         "grpo_over_pc": significant(row["grpo_over_pc"]),
                         "dapo_over_pc": significant(row["dapo_over_pc"])}) for row in target_rows(report)]


def summary_records(rows: list[dict]) -> list[TableRecord]:
    """The per-method summary (``Report.summary_rows()``) as table records."""
    return [TableRecord({
        "family": r["family"], "method": method_label(r["method"]), "seeds": ", ".join(map(str, r["seeds"])),
        **{k: v for k, v in readable_summary(r).items() if k in SUMMARY_COLUMNS}, "run_ids": ", ".join(r["run_ids"]),
    }) for r in rows]


def readable_summary(r: dict) -> dict:
    """A summary row's numbers rounded for reading (whole steps and rollouts, 4 significant digits of accuracy:
    no ``17538.8`` rollouts, no ``0.6900000000000001``); SQL over the store keeps them exact."""
    def whole(v):
        return None if v is None else round(v)

    out = {**r, "steps": whole(r["steps"]), "total_sampled_rollouts": whole(r["total_sampled_rollouts"]),
           "total_trained_rollouts": whole(r["total_trained_rollouts"]),
           "final_accuracy": significant(r["final_accuracy"]), "peak_accuracy": significant(r["peak_accuracy"])}
    out["sampled_rollouts"], out["trained_rollouts"] = out["total_sampled_rollouts"], out["total_trained_rollouts"]
    return out


SUMMARY_COLUMNS = ("steps", "sampled_rollouts", "trained_rollouts", "final_accuracy", "peak_accuracy")


@asset(group_name="reports", deps=[segment_eval], kinds={"duckdb"})
def rollouts_report(context: AssetExecutionContext, config: ReportConfig, store: StoreResource) -> MaterializeResult:
    """Rollouts to target per family and seed (GRPO/PC and DAPO/PC ratios), a summary per method, and the plots."""
    st = store.get(vacuum=False)
    _out_dir(st, config.out_dir)
    try:
        rep = build_report(st, config.out_dir, config.family)
    except ReportError as exc:
        raise Failure(str(exc)) from exc
    context.log.info("report: %d runs, plots in %s", len(rep.curves), config.out_dir)
    summary = rep.summary_rows()
    return MaterializeResult(
        metadata={
            "rollouts_to_target": MetadataValue.md(rep.markdown),
            "rollouts_to_target_table": MetadataValue.table(target_records(rep.report), TARGET_SCHEMA),
            "plots": MetadataValue.md("\n\n".join(_embedded(p) for p in rep.plots)),
            "plot_dir": MetadataValue.path(str(rep.plots[0].parent.resolve()) if rep.plots else config.out_dir),
            "runs": len(rep.curves),
            # the summary as a table the UI shows; the same rows as JSON under summary_json (was: summary)
            "summary": MetadataValue.table(summary_records(summary), SUMMARY_SCHEMA),
            "summary_json": MetadataValue.json([{k: v for k, v in readable_summary(r).items() if k in r}
                                                for r in summary]),
            # each family's median ratios, and beside them whether they come from a smoke test (None: they do not)
            "ratios": MetadataValue.json({fam: {**{k: significant(v) for k, v in d.items() if k.startswith("median_")},
                                                "smoke_test": family_smoke_test(d)}
                                          for fam, d in rep.report.items()}),
        }
    )


class TimelineConfig(Config):
    run_id: str | None = Field(
        default=None, description=f"The run to draw (default: the {RECENT_RUNS} most recently registered runs that "
                                  "have observations, one PNG each).")
    prompts: list[int] | None = Field(
        default=None, description="The prompt ids to show, in this order (default: the `top` most-visited).")
    top: int = Field(default=DEFAULT_TOP, description="Without `prompts`: how many of the most-visited prompts "
                                                      "(steps sampled; ties: lower id first) get a row.")
    out_dir: str = Field(default="runs/reports", description="Where the PNGs are written (timeline_<run_id>.png).")


TIMELINE_SCHEMA = TableSchema(columns=[
    TableColumn("run_id"),
    TableColumn("method"),
    TableColumn("prompts", "string", "the heatmap's rows of the prompts the run sampled (which ones: the heading "
                                     "above its plot in `timelines`)"),
    TableColumn("steps", "int", "the columns (training steps first..last)"),
])
"""Four short columns, one row per run: with seven (the rows' description and the PNG's path among them) the UI
squeezed each to a word's width ("40 mo vi of pr"); the description heads each plot, the PNGs are in ``plot_dir``."""


@asset(group_name="reports", deps=[segment_eval], kinds={"duckdb"})
def pass_rate_timeline(context: AssetExecutionContext, config: TimelineConfig,
                       store: StoreResource) -> MaterializeResult:
    """Per run, each prompt's pass rate by step (pilot / commit / full group, pooled per step) with the allocator's
    decision on it (trained, kept, skipped easy, deferred hard, surplus; evicted and returned frames), and below it
    the decisions of all the run's prompts per step; PNGs inline in the metadata."""
    st = store.get(vacuum=False)
    try:
        runs = [config.run_id] if config.run_id else recent_runs(st)
        if not runs:
            raise TimelineError(
                f"no run in {st.path} has prompt observations yet, so there is no pass rate to draw. Fix: record or "
                "train a run first "
                f"(`{shell_command('pilot-commit', 'simulate', '--store', st.path, '--method', 'pc')}`, or the "
                "start_run job), then materialize again.")
        out_dir = _out_dir(st, config.out_dir)
        results = [write_timeline(st, rid, out_dir / f"timeline_{rid}.png", config.prompts, config.top)
                   for rid in runs]
    except TimelineError as exc:
        raise Failure(str(exc)) from exc
    for r in results:
        context.log.info("timeline: %s", r.summary())
    md = "\n\n".join(f"### `{r.run_id}` ({method_label(r.method)}): {r.description}, {r.steps} steps\n\n"
                     f"{_embedded(r.path)}" for r in results)
    return MaterializeResult(
        metadata={
            "timelines": MetadataValue.md(md),
            "run_ids": MetadataValue.json([r.run_id for r in results]),
            "runs": len(results),
            "table": MetadataValue.table([TableRecord({
                "run_id": r.run_id, "method": method_label(r.method),
                "prompts": f"{len(r.prompts):,} of {r.total_prompts:,}", "steps": r.steps}) for r in results],
                TIMELINE_SCHEMA),
            # one line per run in the UI (a JSON list would take a line per prompt)
            "prompts_shown": MetadataValue.json({r.run_id: ", ".join(map(str, r.prompts)) for r in results}),
            "total_prompts": MetadataValue.json({r.run_id: r.total_prompts for r in results}),
            "steps": MetadataValue.json({r.run_id: r.steps for r in results}),
            "plot_dir": MetadataValue.path(str(Path(config.out_dir).resolve())),
        }
    )


class ComparisonConfig(Config):
    family: str | None = Field(default=None, description="Compare this family's runs only (default: one figure per "
                                                          "family).")
    run_ids: list[str] | None = Field(default=None, description="Compare these runs, whatever their family (one "
                                                                "figure; overrides `family`).")
    out_dir: str = Field(default="runs/reports", description="Where the PNGs are written (compare_<family>.png).")


@asset(group_name="reports", deps=[segment_eval], kinds={"duckdb"})
def run_comparison(context: AssetExecutionContext, config: ComparisonConfig, store: StoreResource) -> MaterializeResult:
    """The runs of each family (or the runs named) compared by step and by cumulative rollouts: held-out accuracy and
    mean reward, one line per run labelled with its id and method, training step 1 first. The metadata holds the one
    SQL query behind each figure (as a `pilot-commit sql` command) and the `tensorboard --logdir_spec` command that
    overlays the same runs in TensorBoard."""
    st = store.get(vacuum=False)
    if config.run_ids:
        groups = {"selected": (None, list(config.run_ids))}
    else:
        families = [config.family] if config.family is not None else [
            r["family"] for r in st.query("SELECT DISTINCT family FROM runs ORDER BY family")]
        groups = {f: (f, None) for f in families}
    if not groups:
        raise Failure(f"the store {st.path} has no run to compare. Fix: train or simulate runs first "
                      f"(`{shell_command('pilot-commit', 'simulate', '--store', st.path, '--method', 'pc')}`, or the "
                      "start_run job), then materialize again.")
    out_dir = _out_dir(st, config.out_dir)
    sections, sql, labels, commands = [], {}, {}, {}
    for name, (family, run_ids) in groups.items():
        try:
            drawn = compare_runs(st, out_dir / f"compare_{re.sub(r'[^A-Za-z0-9._-]', '_', name)}.png", family, run_ids,
                                 which=name, tensorboard=installed_command("tensorboard", from_cwd=False))
        except CompareError as exc:
            if config.family is None and not config.run_ids:  # a family of registered runs with no step yet
                context.log.info("run_comparison: %s", exc)
                continue
            raise Failure(str(exc)) from exc
        # pasted into any terminal: the scripts by their absolute path unless PATH finds them
        sql[name] = sql_command(st.path, drawn.query)
        labels[name] = [ln.label for ln in drawn.lines]
        commands[name] = drawn.tensorboard or "no run here has TensorBoard logs (simulated runs write none)"
        context.log.info("run_comparison: %s: %s -> %s", name, ", ".join(labels[name]), drawn.path)
        sections.append(f"### {name}: {', '.join(f'`{lb}`' for lb in labels[name])}\n\n{_embedded(drawn.path)}")
    if not sections:
        raise Failure(f"no run in {st.path} has a recorded step yet, so there is nothing to compare. Fix: train or "
                      "simulate runs first, then materialize again.")
    return MaterializeResult(
        metadata={
            "comparison": MetadataValue.md("\n\n".join(sections)),
            "runs": MetadataValue.json(labels),
            "sql": MetadataValue.md("\n\n".join(f"{n}:\n```\n{q}\n```" for n, q in sql.items())),
            "tensorboard_command": MetadataValue.md(
                "\n\n".join(f"{n}:\n```\n{c}\n```" for n, c in commands.items())),
            "plot_dir": MetadataValue.path(str(out_dir.resolve())),
        }
    )


class PlanConfig(Config):
    run_ids: list[str] | None = Field(
        default=None, description="The runs whose first steps are fitted (default: every run, or every run of "
                                  "`family`, with `fit_steps` steps and an evaluation before training and within them).")
    family: str | None = Field(default=None, description="Without `run_ids`: fit this family's runs only.")
    fit_steps: int = Field(default=20, ge=1, description="Fit on each run's first this many steps.")
    horizon: int = Field(default=120, ge=1, description="Simulated steps per candidate budget.")
    seeds: list[int] = Field(default=list(PLAN_SEEDS), min_length=1,
                             description="Simulated seeds of the point predictions (plan's default: 16).")
    resamples: int = Field(default=PLAN_RESAMPLES, ge=0, description="Refits on resampled steps for each budget's 10-90% "
                                                        "interval and 'first in k' (0: none).")
    preset: str | None = Field(default=None, description="The preset the candidates train with (default: the first "
                                                         "run's).")
    out_dir: str = Field(default="runs/reports", description="Where the plot is written (budget_plan.png).")


PLAN_SCHEMA = TableSchema(columns=[
    TableColumn("rank", "int"),
    TableColumn("budget", "string", "GRPO at group size n, or PC as p<first wave>+<rest>/c<mean commit>"),
    TableColumn("sampled_per_step", "float", "predicted sampled rollouts a step (mean over the seeds)"),
    TableColumn("rollouts_to_target", "float", "predicted sampled rollouts to the common target (median over seeds; "
                                               "empty: not reached on most seeds)"),
    TableColumn("low", "float", "10th percentile over the refits on resampled steps"),
    TableColumn("high", "float", "90th percentile over the refits"),
    TableColumn("first", "int", "refits that ranked this budget first (of `resamples`)"),
    TableColumn("reached", "int", "seeds on which it reached the target"),
    TableColumn("vs_best", "string", "best; indistinguishable (its 10-90% interval overlaps the best's: the data do "
                                     "not rank them); worse; never (not reached); - (no interval)"),
])
PLAN_SCHEMA_NAMES = {c.name for c in PLAN_SCHEMA.columns}


@asset(group_name="reports", deps=[segment_eval], kinds={"duckdb"})
def budget_plan(context: AssetExecutionContext, config: PlanConfig, store: StoreResource) -> MaterializeResult:
    """Which budget to train next: the simulator fitted on the first steps of the store's runs ranks GRPO group
    sizes and PC pilot / commit budgets by predicted rollouts to a common target, with an interval from refits on
    resampled steps (`pilot-commit plan`, :mod:`pc_pipelines.simulator.plan`); the table, the plot and the exact
    `pilot-commit train` command of the best. Not in the report job: materialize it when a run has its first steps."""
    st = store.get(vacuum=False)
    png = _out_dir(st, config.out_dir) / "budget_plan.png"
    try:
        run_ids = list(config.run_ids) if config.run_ids else plannable_runs(st, config.fit_steps, config.family)
        result = plan_store_runs(st, run_ids, config.preset, config.fit_steps, config.horizon, config.seeds,
                                 resamples=config.resamples,
                                 progress=lambda msg: context.log.info("budget_plan: %s", msg))
    except (ConfigError, StoreError) as exc:
        raise Failure(str(exc)) from exc
    try:
        write_plan_plot(result, png, st)
    except OutputRefused as exc:
        raise Failure(f"out_dir: {exc}.") from exc
    best = shell_command(installed_command("pilot-commit", from_cwd=False), *result.train_args())
    context.log.info("budget_plan: best %s: %s", result.best.name, best)
    return MaterializeResult(
        metadata={
            "plan": MetadataValue.md(f"{result.header()}\n\n```\n{result.table()}\n```\n\n{result.verdict_line()}"
                                     f"\n\n{_embedded(png)}"),
            "ranking": result.verdict_line(),
            "table": MetadataValue.table([TableRecord({k: v for k, v in r.items() if k in PLAN_SCHEMA_NAMES})
                                          for r in result.records()], PLAN_SCHEMA),
            "best": result.best.name,
            "best_command": MetadataValue.md(f"```\n{best}\n```"),
            "runs": MetadataValue.json(list(result.runs)),
            "fit": MetadataValue.json(result.fit["sim"]),
            "trust": MetadataValue.md(f"{TRUST}."),
            "plot_path": MetadataValue.path(str(png.resolve())),
        }
    )
