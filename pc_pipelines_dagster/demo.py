"""``make demo``: the whole Dagster graph for the embedded default, headless, in this process.

Synthetic data, the benchmarks (with their checks), the warm start, a GRPO, a DAPO and a PC run of a few segments
driven by the real ``advance_runs`` sensor, their evaluations and the report; then the rollouts-to-target table and
where the plots are. ``python -m pc_pipelines_dagster.demo --help`` lists the knobs. (``pilot-commit simulate-demo``
is the other comparison: the allocation methods in the scale simulator, no model.)
"""

import argparse
import logging
import os
import signal
import sys
import time

from dagster import (
    DagsterExecutionInterruptedError,
    DagsterInstance,
    RunRequest,
    SkipReason,
    build_sensor_context,
    materialize,
)

from pc_pipelines.cli.exits import OK, RUN_FAILED, USER_ERROR
from pc_pipelines.cli.train import transformers_bars_off
from pc_pipelines.config import PC_ONLY_FIELDS, parse_overrides, resolve
from pc_pipelines.errors import ConfigError, installed_command, shell_command
from pc_pipelines.reports import study_headline
from pc_pipelines.run.stopping import StopFlag, StopRequested, stop_on_signals
from pc_pipelines_dagster.assets import arith_task, base_policy
from pc_pipelines_dagster.assets.data import DATA_CHECKS, benchmarks
from pc_pipelines_dagster.automation.jobs import launch_problems, report_job, start_run, train_segment_job
from pc_pipelines_dagster.automation.sensors import (
    REPORT_TAG,
    RUN_KEY_TAG,
    SENSOR_NAME,
    SENSOR_NAME_TAG,
    build_advance_runs_sensor,
)
from pc_pipelines_dagster.definitions import build_definitions
from pc_pipelines_dagster.resources import DataResource, LocalCheckpointResource, StoreResource, local_resources

# Dagster's console logger at INFO: the run's narrative and the per-step lines, not its DEBUG engine events (the UI
# keeps every event; the demo's console is for reading).
QUIET = {"loggers": {"console": {"config": {"log_level": "INFO"}}}}

def sensor_run_tags(request: RunRequest) -> dict[str, str]:
    """The tags of the Dagster run the demo executes for one of the ``advance_runs`` sensor's requests: the request's
    own and those the sensor daemon adds to a run it launches (the sensor's name, which the UI's Runs list reads for
    "Launched by", and the run key), so the demo's runs show, and count, as the sensor's."""
    return {**request.tags, SENSOR_NAME_TAG: SENSOR_NAME, RUN_KEY_TAG: request.run_key}


def demo(argv: list[str] | None = None) -> int:
    """Materialize the embedded graph in this process: synthetic data, the benchmarks (with their checks), the warm
    start, a GRPO, a DAPO and a PC run of a few segments driven by the real ``advance_runs`` sensor, their
    evaluations and the report; then print the rollouts-to-target table and where the plots are.

    With ``DAGSTER_HOME`` set (``make demo`` sets it to ``.dagster``, as ``make ui`` does) every materialization is
    recorded there, so the UI shows the demo's runs afterwards. Runs are named by their config hash: running the
    demo again finds its segments done and only rebuilds the report."""
    p = argparse.ArgumentParser(prog="python -m pc_pipelines_dagster.demo", description=demo.__doc__.split("\n\n")[0])
    p.add_argument("--methods", default="grpo,dapo,pc", help="comma-separated methods (default grpo,dapo,pc)")
    p.add_argument("--segments", type=int, default=2, help="segments per run (default 2)")
    p.add_argument("--segment-steps", type=int, default=10, help="training steps per segment (default 10)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--preset", default="bench",
                   help="preset of every run (default bench: the efficiency study's regime, whose headline it prints)")
    p.add_argument("--set", dest="overrides", action="append", default=["training.eval_every=5"],
                   help="config override for every run, e.g. training.lr=2e-4 (repeatable); PC-only settings "
                        "(allocator.n_pilot=8) apply to the PC run only")
    p.add_argument("--root", default="runs", help="store, run directories, data and plots go here (default runs/)")
    p.add_argument("--cache-dir", default=None, help="warm-start cache (default ~/.cache/pc-pipelines)")
    args = p.parse_args(argv)
    try:  # --set values (and the preset / methods they go with) are checked before any data or warm start is built
        for method in args.methods.split(","):
            resolve(args.preset, parse_overrides(_method_overrides(args.overrides, method)), method=method,
                    seed=args.seed)
    except ConfigError as exc:
        p.exit(USER_ERROR, f"{p.prog}: configuration error: {exc}\n")
    for method in args.methods.split(","):  # and each run's start_run config, as its launch would check it
        problems = launch_problems(_start_config(args, method))
        if problems:
            p.exit(USER_ERROR, "".join(f"{p.prog}: configuration error: {m}\n" for m in problems.values()))
    logging.basicConfig(level=logging.WARNING)
    t0 = time.monotonic()
    root = args.root.rstrip("/")
    res = {
        **local_resources(),
        "store": StoreResource(path=f"{root}/pc.duckdb"),
        "checkpoints": LocalCheckpointResource(root=root),
        "data": DataResource(out_dir=f"{root}/data"),
    }
    instance = DagsterInstance.get() if os.environ.get("DAGSTER_HOME") else DagsterInstance.ephemeral()
    say = lambda msg: print(f"[demo {time.monotonic() - t0:6.0f}s] {msg}", flush=True)  # noqa: E731
    # SIGTERM (timeout, CI, a process manager) or Ctrl-C: the step in progress finishes, the segment checkpoints and
    # is recorded stopped, nothing else starts, and the demo exits 143 / 130. A second signal abandons the step.
    # transformers' own "Loading weights" / "Writing model shards" bars off: the console is the demo's lines and the
    # segments' step lines
    with stop_on_signals() as stop, transformers_bars_off():
        try:
            return _demo(args, res, instance, say, stop)
        except (StopRequested, KeyboardInterrupt, DagsterExecutionInterruptedError) as exc:
            signum = stop.signum or getattr(exc, "signum", signal.SIGINT)
            say(f"stopped by {signal.Signals(signum).name}; nothing else was started. Run the same command again: "
                "the stopped segment resumes from its checkpoint.")
            return StopRequested(signum).exit_code


def _demo(args: argparse.Namespace, res: dict, instance: DagsterInstance, say, stop: StopFlag) -> int:
    """The demo's stages; ``stop`` is looked at before each one starts (:class:`StopRequested` ends them)."""
    root = args.root.rstrip("/")
    say("data + warm start: arith_task, benchmarks (+ checks), base_policy (the shipped warm start: no SFT)")
    data_checks = [c for c in DATA_CHECKS if any(k.asset_key == benchmarks.key for k in c.check_keys)]
    cache = {"cache_dir": args.cache_dir}
    stop.check()
    out = materialize([arith_task, benchmarks, base_policy, *data_checks], instance=instance, resources=res,
                      run_config={"ops": {"arith_task": {"config": cache}, "base_policy": {"config": cache}},
                                  **QUIET})
    meta = out.asset_materializations_for_node("base_policy")[0].metadata
    say(f"warm start at {meta['path'].value}: greedy held-out accuracy per digit length "
        f"{ {k: round(v, 2) for k, v in meta['greedy_heldout_accuracy'].value.items()} }")

    run_ids = []
    for method in args.methods.split(","):
        cfg = _start_config(args, method)
        stop.check()
        r = start_run.execute_in_process(run_config={"ops": {"register_training_run": {"config": cfg}}, **QUIET},
                                         instance=instance, resources=res)
        run_ids.append(r.output_for_node("register_training_run"))
    say(f"started {', '.join(run_ids)}; the advance_runs sensor now trains them segment by segment")

    sensor = build_advance_runs_sensor()
    job = build_definitions(res).resolve_job_def(train_segment_job.name)
    failed: list[str] = []
    reports: list[RunRequest] = []  # the sensor's report requests (runs finished): executed below
    while True:
        stop.check()
        tick = sensor(build_sensor_context(instance=instance, resources={"store": res["store"]}))
        if isinstance(tick, SkipReason):
            break
        segments = [r for r in tick.run_requests if r.job_name in (None, train_segment_job.name)]
        reports += [r for r in tick.run_requests if r.job_name == report_job.name]
        if not segments:
            break
        for req in segments:
            stop.check()
            say(f"{req.partition_key}: training + evaluation")
            result = job.execute_in_process(partition_key=req.partition_key, instance=instance,
                                            tags=sensor_run_tags(req),
                                            run_config=QUIET,
                                            raise_on_error=False)
            if stop.requested or _interrupted(result):
                say(_failure(result) or f"{req.partition_key}: stopped after its evaluation")
                raise StopRequested(stop.signum or signal.SIGINT)
            if not result.success:
                say(f"{req.partition_key} failed (the sensor retries it, then pauses the run); see the log above")
                failed.append(req.partition_key)
                continue
            m = result.asset_materializations_for_node("segment_eval")[0].metadata
            t = result.asset_materializations_for_node("training_segment")[-1].metadata  # after segment_progress's
            say(f"{req.partition_key}: steps {t['steps'].value}, cumulative rollouts {t['cumulative_rollouts'].value:,}, "
                f"held-out accuracy {m['average_accuracy'].value:.3f}")

    # The report as the sensor requested it (the `report` job, tagged pc/report_for and as the sensor's run), so
    # the sensor of `make ui` finds it built and requests none; a demo run again (nothing finished anew) rebuilds it.
    rep_dir = f"{root}/reports"
    stop.check()
    report = build_definitions(res).resolve_job_def(report_job.name)
    report_config = {"ops": {name: {"config": {"out_dir": rep_dir}}  # every asset of the job: nothing outside --root
                             for name in ("rollouts_report", "pass_rate_timeline", "run_comparison")}, **QUIET}
    for tags in [sensor_run_tags(r) for r in reports] or [{REPORT_TAG: ",".join(run_ids)}]:
        out = report.execute_in_process(instance=instance, tags=tags, run_config=report_config)
    md = out.asset_materializations_for_node("rollouts_report")[0].metadata["rollouts_to_target"].value
    print()
    print(md)  # a smoke test says so under each family's heading, before its table (reports.smoke_test)
    print()
    print(study_headline())
    print()
    try_sql = shell_command(installed_command("pilot-commit"), "sql", "--store", res["store"].path, "SELECT * FROM segments")
    say(f"plots in {os.path.abspath(rep_dir)}; store {os.path.abspath(res['store'].path)} (try: {try_sql})")
    if os.environ.get("DAGSTER_HOME"):
        say("`make ui` shows these materializations at http://127.0.0.1:3000")
    if failed:
        say(f"{len(failed)} segment run(s) failed: {', '.join(failed)} (their logs are above)")
        return RUN_FAILED
    return OK


def _failure(result) -> str | None:
    """The first failed step's message in a job's result (a Failure's description, else the error's)."""
    for event in result.all_events:
        if event.is_step_failure:
            data = event.step_failure_data
            return data.user_failure_data.description if data.user_failure_data else data.error.message.strip()
    return None


def _interrupted(result) -> bool:
    """Whether a step of the job was interrupted by Dagster's own signal handling (a signal that came while
    Dagster, not one of our assets, held the handlers)."""
    return any(e.is_step_failure and e.step_failure_data.error is not None
               and e.step_failure_data.error.cls_name in ("DagsterExecutionInterruptedError", "KeyboardInterrupt")
               for e in result.all_events)


def _start_config(args: argparse.Namespace, method: str) -> dict:
    """The start_run op config of the demo's run of ``method``."""
    return {"method": method, "preset": args.preset, "seed": args.seed,
            "overrides": _method_overrides(args.overrides, method), "segment_steps": args.segment_steps,
            "total_steps": args.segments * args.segment_steps, "cache_dir": args.cache_dir}


def _method_overrides(overrides: list[str], method: str) -> list[str]:
    """The --set overrides of one method's run: PC-only settings (allocator.n_pilot, allocator.eviction_strategy,
    allocator.return_share) go to the PC run only."""
    pc_only = tuple(f"allocator.{name}=" for name in PC_ONLY_FIELDS)
    return [o for o in overrides if method == "pc" or not o.strip().startswith(pc_only)]


if __name__ == "__main__":
    sys.exit(demo(sys.argv[1:]))
