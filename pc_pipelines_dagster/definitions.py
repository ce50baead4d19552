"""The Dagster code location (``workspace.yaml`` loads it): the assets, checks, jobs, sensors and resources,
assembled. The environment's resources are chosen once, when the code location loads (``PC_PIPELINES_ENV`` =
``local``, the default, ``k8s`` or ``ray``; :mod:`pc_pipelines_dagster.resources.environments`).

The graph: ``data`` (synthetic arithmetic, DeepMath, Polaris, the benchmarks; Great Expectations checks) ->
``policy`` (the SFT warm start) -> ``training`` (``training_segment``, partitioned ``<run>/seg-NNNN``; the
``start_run`` job adds a run's partitions, the ``advance_runs`` sensor trains them in order, or the
``advance_runs_in_window`` schedule in its time window only, when it is started) -> ``evaluation`` (``segment_eval``)
-> ``reports`` (``rollouts_report``; the sensor requests the ``report`` job when a run finishes). ``make demo``
(:mod:`pc_pipelines_dagster.demo`) runs it headless.
"""

from dagster import Definitions

from pc_pipelines_dagster.assets import arith_task, base_policy
from pc_pipelines_dagster.assets.data import DATA_ASSETS, DATA_CHECKS
from pc_pipelines_dagster.assets.evaluation import segment_eval
from pc_pipelines_dagster.assets.reports import budget_plan, pass_rate_timeline, rollouts_report, run_comparison
from pc_pipelines_dagster.assets.training import SEGMENT_PROGRESS, training_segment
from pc_pipelines_dagster.automation.jobs import build_start_run, report_job, train_segment_job
from pc_pipelines_dagster.automation.schedules import ScheduleSettings, build_advance_schedule
from pc_pipelines_dagster.automation.sensors import build_advance_runs_sensor, interval_from_env
from pc_pipelines_dagster.resources import StoreResource, environment_resources


def build_definitions(resources: dict | None = None, max_failures: int = 3,
                      schedule_settings: ScheduleSettings | None = None) -> Definitions:
    """The code location with ``resources`` (default: the environment's), the sensor pausing a run after
    ``max_failures`` consecutive failures of a segment, ``start_run`` checking a launch against the ``store``
    resource's store (a run name it holds with another config is refused before a run exists).
    ``schedule_settings``: the window schedule's (default: from ``PC_ADVANCE_SCHEDULE_*``,
    :mod:`pc_pipelines_dagster.automation.schedules`); while that schedule runs, the sensor requests no segment.
    The sensor's interval: ``PC_ADVANCE_SENSOR_INTERVAL_S`` (default 30 s)."""
    advance_schedule = build_advance_schedule(schedule_settings, max_failures=max_failures)
    resources = resources or environment_resources()
    store = resources.get("store")
    store_path = store.path if isinstance(store, StoreResource) and isinstance(store.path, str) else None
    return Definitions(
        assets=[arith_task, base_policy, *DATA_ASSETS, training_segment, SEGMENT_PROGRESS, segment_eval, rollouts_report,
                pass_rate_timeline, run_comparison, budget_plan],
        asset_checks=DATA_CHECKS,
        jobs=[build_start_run(store_path), train_segment_job, report_job],
        sensors=[build_advance_runs_sensor(max_failures=max_failures, interval_s=interval_from_env(),
                                           defer_to=advance_schedule)],
        schedules=[advance_schedule],
        resources=resources,
    )


defs = build_definitions()
