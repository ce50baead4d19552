"""The code location's jobs: ``start_run`` registers a training run (its config, its segment plan in the store, one
partition per segment), ``train_segment`` trains and evaluates one segment (the ``advance_runs`` sensor launches
it, one partition at a time, or the ``advance_runs_in_window`` schedule in its window) and ``report`` rebuilds
``rollouts_report``, ``pass_rate_timeline`` and ``run_comparison`` (the sensor launches it once when a run finishes)."""

import functools
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Literal

import pydantic
from dagster import (
    Config,
    ConfigMapping,
    DagsterInvalidConfigError,
    Enum,
    EnumValue,
    Failure,
    IntSource,
    OpExecutionContext,
    Permissive,
    define_asset_job,
    job,
    op,
)
from dagster import Field as DagsterField
from dagster._core.errors import DagsterUserCodeProcessError
from dagster._utils.error import SerializableErrorInfo
from pydantic import Field

from pc_pipelines.allocation import training_methods
from pc_pipelines.config import RunConfig, available_presets, parse_overrides, resolve
from pc_pipelines.config.presets import INT_MAX, presets_state
from pc_pipelines.data.registry import EMBEDDED, TRAINING, auto_dataset, dataset_names, datasets, or_list
from pc_pipelines.errors import ConfigError, RunError, brief, shell_command, sql_string
from pc_pipelines.run import task_for
from pc_pipelines.run.segments import SegmentPlan, partition_key
from pc_pipelines.run.start import check_trainable, start_training_run
from pc_pipelines.store.names import RUN_ID_RULE, RunIdError, run_id_for
from pc_pipelines_dagster.assets.evaluation import segment_eval
from pc_pipelines_dagster.assets.reports import pass_rate_timeline, rollouts_report, run_comparison
from pc_pipelines_dagster.assets.training import SEGMENTS, training_segment
from pc_pipelines_dagster.resources import CheckpointResource, DataResource, StoreResource


def dataset_choices() -> tuple[str, ...]:
    """start_run's ``dataset`` values: ``auto`` and the registry's training datasets (read when a run starts)."""
    return ("auto", *dataset_names(TRAINING))


def _dataset_help() -> str:
    real = [d.name for d in datasets(TRAINING) if d.name != EMBEDDED]
    return (f"Training data: {EMBEDDED} (the synthetic task), {or_list(real)} (prepared by their data assets; evaluated "
            "on the held-out split and the prepared benchmarks; needs policy_path), or auto: embedded when the preset "
            f"has a task section, else {auto_dataset(False)}.")


# ---- start_run ----------------------------------------------------------------------------------------------------
class StartRunConfig(Config):
    method: Literal[tuple(training_methods())] = Field(  # type: ignore[valid-type]
        description=f"Allocation method, one of the registered training methods: {', '.join(training_methods())}."
    )
    preset: str = Field(default="embedded", description="Versioned preset file (`pilot-commit presets`).")
    overrides: list[str] = Field(
        default_factory=list, description="--set style overrides, e.g. allocator.n_pilot=8 or training.lr=2e-4."
    )
    seed: int = Field(default=0, ge=0, le=INT_MAX, description="Fixes data order, sampling and init.")
    family: str | None = Field(default=None, description="Groups runs compared in one report (default: the preset's).")
    segment_steps: int = Field(default=10, ge=1, le=100_000, description="Training steps per segment (partition).")
    total_steps: int = Field(default=50, ge=1, le=10_000_000, description="Training steps of the whole run.")
    run_name: str | None = Field(
        default=None, description=f"Run id (default: <family>-<method>-s<seed>-<config hash>); {RUN_ID_RULE}."
    )
    policy_path: str | None = Field(
        default=None, description="An HF causal LM directory to start from (default: the embedded SFT warm start)."
    )
    cache_dir: str | None = Field(default=None, description="Warm-start cache (default ~/.cache/pc-pipelines).")
    dataset: str = Field(default="auto", description=_dataset_help())


def _task_for(dataset: str, cfg, data: DataResource):
    """None for the embedded task (prepare_run builds it), else the prepared dataset's task."""
    try:
        return task_for(dataset, cfg, data.out_dir)
    except RunError as exc:
        raise Failure(str(exc)) from exc


@op(tags={"kind": "duckdb"})
def register_training_run(
    context: OpExecutionContext,
    config: StartRunConfig,
    store: StoreResource,
    checkpoints: CheckpointResource,
    data: DataResource,
) -> str:
    """Resolve the run's config, register it and its segment plan in the store, add its partitions."""
    # Checked once in this process: Dagster ran the job's config mapping (launch_check) on this config when it
    # resolved the run's config here, before this op; check_start_run gives that check's outcome (run directly,
    # without the mapping, it checks now).
    try:
        cfg, dataset, run_id = check_start_run(config)
    except ConfigError as exc:  # the message names the setting and the fix: no traceback
        raise Failure(f"configuration error: {exc}", allow_retries=False) from None
    plan = SegmentPlan(config.segment_steps, config.total_steps)
    registered = registered_as(store.path, run_id, cfg.config_hash, plan)  # before the warm start and any write
    try:
        run = start_training_run(  # cfg and the id (a RunId) as check_start_run checked them: not checked again
            cfg, checkpoints.runs_root(), run_id, config_checked=True, policy_path=config.policy_path,
            cache_dir=config.cache_dir,
            progress=lambda s, loss: s % 200 == 0 and context.log.info("warm start SFT step %d loss %.4f", s, loss),
            task=_task_for(dataset, cfg, data), run_name_field="start_run config run_name",
        )
    except (RunError, ConfigError) as exc:
        raise Failure(str(exc)) from exc
    run = replace(run, run_dir=checkpoints.run_dir(run.run_id), lineage={
        **run.lineage, "preset": config.preset, "overrides": config.overrides, "segment_steps": plan.segment_steps,
        "total_steps": plan.total_steps, "dataset": dataset, "started_by": context.run_id,
    })
    st = store.get()
    st.register_run(run.record())
    st.plan_segments(run.run_id, plan.all_bounds())
    keys = [partition_key(run.run_id, k) for k in range(plan.num_segments)]
    context.instance.add_dynamic_partitions(SEGMENTS.name, keys)
    if registered:
        context.log.info("run %s is already registered with this config: nothing new registered; %s", run.run_id,
                         registered)
        context.add_output_metadata({"registered": f"nothing new: already registered; {registered}"})
    else:
        context.log.info("run %s: %d segments of %d steps registered (%s .. %s)", run.run_id, plan.num_segments,
                         plan.segment_steps, keys[0], keys[-1])
    return run.run_id


def registered_as(store_path: str, run_id: str, config_hash: str, plan: SegmentPlan) -> str | None:
    """None for a run id the store at ``store_path`` does not hold (a store not yet created holds none); the state
    of its segments in words when it holds the run with this config and segment plan. A run of that name with
    another config or plan is refused (:class:`Failure`, one line: the run, the difference and the fix), before the
    warm start is built and before anything is written."""
    from pathlib import Path

    from pc_pipelines.store import Store

    if not Path(store_path).exists():
        return None
    st = Store(store_path)
    rows = st.query("SELECT config_hash FROM runs WHERE run_id = ?", [run_id])
    if not rows:
        return None
    see = shell_command("pilot-commit", "sql", "--store", store_path,
                        f"SELECT preset, config_json, lineage_json FROM runs WHERE run_id = {sql_string(run_id)}")
    fix = (f"Fix: set start_run config run_name to a name not in the store (e.g. {brief(run_id + '-2')}), or launch "
           f"with the old run's config to continue it (see it: {see})")
    old = rows[0]["config_hash"]
    if old != config_hash:
        raise Failure(f"configuration error: start_run config run_name {brief(run_id)}: the store already has a run "
                      f"of this name with another config (hash {old[:8]}, this launch's {config_hash[:8]}). {fix}.",
                      allow_retries=False)
    segs = st.segments(run_id)
    want = list(plan.all_bounds())
    if segs and [(int(r["first_step"]), int(r["last_step"])) for r in segs] != [tuple(b) for b in want]:
        raise Failure(f"configuration error: start_run config run_name {brief(run_id)}: the store already has this "
                      f"run with a plan of {len(segs)} segments of {int(segs[0]['last_step']) - int(segs[0]['first_step']) + 1} "
                      f"steps, not {plan.num_segments} of {plan.segment_steps}. {fix}, or set segment_steps and "
                      "total_steps to the old plan's.", allow_retries=False)
    counts: dict[str, int] = {}
    for r in segs:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    return "its segments: " + (", ".join(f"{n} {s}" for s, n in counts.items()) or "none planned")


# ---- start_run's checks at launch ------------------------------------------------------------------------------
# Dagster's config schema has no bounds and runs no code of ours (the Launchpad checks a config against it alone as
# you type: types, required fields and the enums below), and the pydantic checks of a Config run only when the op
# builds it, seconds into the run. A config mapping's function runs wherever Dagster resolves the run config
# (ResolvedRunConfig.build): in execute_in_process and in the code server when the webserver (the UI, GraphQL)
# creates a run, both before the run exists, and again in the run worker. So the mapping below runs the checks that
# need no warm start and no file but the store (a run name taken by another config), and refuses a bad config with
# StartRunRefused, one line per field, each naming the field and the fix, shown alone in the UI's dialog; it returns
# the run config unchanged. Its schema is the job's own `ops` section (the launchpad shows the same fields,
# descriptions and defaults); the other sections (resources, loggers, execution) pass through to the job's schema,
# which checks them as before.
OP = "register_training_run"


def _what(name: str) -> str:
    """A field's description as a parenthesis: "Training steps of the whole run." -> "training steps of the whole run"."""
    desc = (StartRunConfig.model_fields[name].description or name).split(". ")[0].rstrip(".")
    desc = desc.split(" (")[0]  # "Training steps per segment (partition)": no parenthesis inside the parenthesis
    return desc[:1].lower() + desc[1:] if desc[1:2].islower() else desc


def _bounds(name: str) -> tuple[Any, Any]:
    lo = hi = None
    for m in StartRunConfig.model_fields[name].metadata:
        lo = getattr(m, "ge", lo)
        hi = getattr(m, "le", hi)
    return lo, hi


def _pydantic_problems(exc: pydantic.ValidationError) -> dict[str, str]:
    """field -> "start_run config <field> <value>: <why> (<what it is>). Fix: <fix>" for each field pydantic refuses."""
    out: dict[str, str] = {}
    for err in exc.errors():
        name = str(err["loc"][0]) if err.get("loc") else "config"
        if name in out:
            continue
        ctx = err.get("ctx") or {}
        bound = {"greater_than_equal": ">=", "less_than_equal": "<=", "greater_than": ">", "less_than": "<"}
        limit = next(iter(ctx.values()), None)
        why = (f"must be {bound[err['type']]} {limit:,}" if err["type"] in bound and isinstance(limit, int)
               else err["msg"][:1].lower() + err["msg"][1:])
        field = StartRunConfig.model_fields.get(name)
        if field is None:
            out[name] = f"start_run config {name}: {why}. Fix: drop {name}."
            continue
        lo, hi = _bounds(name)
        if lo is not None and hi is not None:
            want = f"a whole number from {lo:,} to {hi:,}"
        elif lo is not None:
            want = f"a whole number >= {lo:,}"
        else:
            want = "a valid value"
        default = field.get_default(call_default_factory=True)
        fix = f"set {name} to {want}" + ("" if field.is_required() else f", or leave it out (default {default!r})")
        out[name] = f"start_run config {name} {brief(err.get('input'))}: {why} ({_what(name)}). Fix: {fix}."
    return out


def check_start_run(config: StartRunConfig) -> tuple[RunConfig, str, str]:
    """What start_run checks before its warm start: the preset, the overrides (they parse, resolve and keep the
    segment boundaries), the method and strategy names, the run id, the dataset and what it needs. The resolved
    config, the dataset and the run id (a checked :class:`~pc_pipelines.store.names.RunId`); :class:`ConfigError` naming the start_run field and the fix otherwise.

    Checked once per process for a config and the preset files as they are: Dagster resolves a run's config
    several times in one process (``execute_in_process`` three times: the plan, the orchestration and the execution
    context; a run worker as many), running the config mapping (:func:`launch_check`) each time, and the op reads
    the resolved config after it. The outcome is kept per config and preset files' contents, so a preset edited
    between two launches is read again; each process (the code server at launch, the run worker) checks anew."""
    outcome = _checked(config.model_dump_json(), presets_state())
    if isinstance(outcome, ConfigError):
        raise ConfigError(str(outcome))
    return outcome


@functools.lru_cache(maxsize=32)
def _checked(config_json: str, presets: tuple) -> tuple[RunConfig, str, str] | ConfigError:
    """:func:`_check_start_run` of the config ``config_json``, its refusal returned (kept like a result)."""
    try:
        return _check_start_run(StartRunConfig.model_validate_json(config_json))
    except ConfigError as exc:
        return exc


def _check_start_run(config: StartRunConfig) -> tuple[RunConfig, str, str]:
    if config.preset not in available_presets():
        raise ConfigError(f"start_run config preset {brief(config.preset)}: no such preset. Fix: use one of "
                          f"{available_presets()} (`pilot-commit presets`).")
    try:
        overrides = parse_overrides(config.overrides)
    except ConfigError as exc:
        raise ConfigError(f"start_run config overrides: {exc}") from None
    if overrides.get("training.keep_every", config.segment_steps) != config.segment_steps:
        raise ConfigError(
            f"start_run config overrides: training.keep_every={overrides['training.keep_every']!r} would be ignored: "
            f"a segmented run keeps every segment boundary (keep_every = segment_steps = {config.segment_steps}). "
            "Fix: drop the override, or change segment_steps."
        )
    overrides["training.keep_every"] = config.segment_steps
    where = "start_run config overrides" if config.overrides else "start_run config"
    try:
        cfg = resolve(config.preset, overrides, method=config.method, seed=config.seed, family=config.family)
        check_trainable(cfg)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    try:
        run_id = run_id_for(cfg.default_run_id(), config.run_name, field="start_run config run_name")
    except RunIdError as exc:
        if config.run_name is not None:  # the message names run_name
            raise ConfigError(str(exc)) from None
        who = f"family {brief(config.family)}" if config.family is not None else f"preset {config.preset!r}'s family"
        raise ConfigError(f"start_run config {who}: {exc}") from None
    choices = dataset_choices()
    if config.dataset not in choices:
        raise ConfigError(f"start_run config dataset {brief(config.dataset)}: not one of {choices}. Fix: pick one of "
                          "them (auto: the embedded task when the preset has one).")
    dataset = config.dataset if config.dataset != "auto" else auto_dataset(cfg.task is not None)
    if dataset == EMBEDDED and cfg.task is None:
        real = tuple(n for n in dataset_names(TRAINING) if n != EMBEDDED)
        raise ConfigError(f"start_run config dataset {brief(config.dataset)}: preset {config.preset!r} has no embedded "
                          f"task section. Fix: use dataset {or_list(real)} (with policy_path), or the embedded preset.")
    if dataset != EMBEDDED and config.policy_path is None:
        raise ConfigError(f"start_run config policy_path: a run on dataset {dataset!r} starts from a model of your "
                          "own (the embedded warm start knows the addition task only). Fix: set policy_path to a local "
                          "Hugging Face causal LM directory.")
    return cfg, dataset, run_id


def launch_problems(op_config: Mapping[str, Any], store_path: str | None = None) -> dict[str, str]:
    """field -> message (without "configuration error: ") for each problem of a start_run op config that shows
    before its warm start: pydantic's bounds and types first (every field at once), then :func:`check_start_run`,
    then, with ``store_path``, a run name the store holds with another config or plan (:func:`registered_as`)."""
    try:
        config = StartRunConfig(**op_config)
    except pydantic.ValidationError as exc:
        return _pydantic_problems(exc)
    try:
        cfg, _, run_id = check_start_run(config)
    except ConfigError as exc:
        text = str(exc)
        name = text.removeprefix("start_run config ").split(" ", 1)[0].rstrip(":")
        return {name if name in StartRunConfig.model_fields else "config": text}
    if store_path is not None:
        try:
            registered_as(store_path, run_id, cfg.config_hash, SegmentPlan(config.segment_steps, config.total_steps))
        except Failure as exc:
            return {"run_name": (exc.description or "").removeprefix("configuration error: ")}
    return {}


class StartRunRefused(DagsterInvalidConfigError, DagsterUserCodeProcessError):
    """start_run refused at launch: its message is one line per refused field, "configuration error: start_run
    config <field> ...: why. Fix: ...", and nothing else.

    A :class:`DagsterInvalidConfigError` where the run config is resolved in process (``execute_in_process`` raises
    it). It is also a ``DagsterUserCodeProcessError`` carrying its own error info, that message without a stack: the
    code server answers a launch whose config mapping raised with the error's info, and for this class Dagster
    forwards the info it carries as it is (``serializable_error_info_from_exc_info`` hoists it), so the webserver
    answers the lines alone and the Launch button's error dialog shows them, not the mapping callers' ~20 lines of
    traceback under "dagster._core.errors.DagsterInvalidConfigError"."""

    def __init__(self, lines: list[str], run_config: Mapping[str, Any]) -> None:
        text = "\n".join(lines)
        info = SerializableErrorInfo(message=text, stack=[], cls_name=type(self).__name__)
        super().__init__(text, [], run_config, user_code_process_error_infos=[info])


def launch_check(run_config: Mapping[str, Any], store_path: str | None = None) -> Mapping[str, Any]:
    """start_run's config mapping: the run config unchanged, or :class:`StartRunRefused` (before any run exists
    when Dagster resolves it at launch) with one line per refused field. ``store_path``: the store the code
    location's ``store`` resource opens (a ``resources.store.config.path`` in the run config wins), checked for a
    run of the same name with another config or segment plan."""
    store = ((run_config.get("resources") or {}).get("store") or {}).get("config") or {}
    path = store.get("path", store_path) if isinstance(store, Mapping) else store_path
    problems = launch_problems(run_config["ops"][OP]["config"], path if isinstance(path, str) else None)
    if not problems:
        return run_config
    raise StartRunRefused([f"configuration error: {text}" for text in problems.values()], run_config)


def _method_enum() -> Enum:
    """The registered training methods (:data:`~pc_pipelines.allocation.METHODS`, read when the code location
    loads), each with its description: the Launchpad offers them and refuses any other name before a launch."""
    from pc_pipelines.allocation.methods import METHODS

    return Enum("StartRunMethod", [EnumValue(m, description=(METHODS[m].__doc__ or m).strip().split("\n")[0])
                                   for m in training_methods()])


def _dataset_enum() -> Enum:
    """start_run's ``dataset`` values (:func:`dataset_choices`, read when the code location loads)."""
    return Enum("StartRunDataset", [EnumValue(d) for d in dataset_choices()])


def _preset_enum() -> Enum:
    """The shipped preset files (``pilot-commit presets``, read when the code location loads)."""
    return Enum("StartRunPreset", [EnumValue(p) for p in available_presets()])


def launch_schema() -> dict[str, DagsterField]:
    """The fields the Launchpad validates as you type (Dagster's config schema, no code of ours): the op's own
    fields, with ``method``, ``preset`` and ``dataset`` as enums of their registries and each bounded whole number
    an ``Int`` whose description gives its range (Dagster's schema has no bounds: :func:`launch_check` refuses
    those, before a run exists, in one line)."""
    fields = dict(register_training_run.config_schema.as_field().config_type.fields)
    enums = {"method": _method_enum(), "preset": _preset_enum(), "dataset": _dataset_enum()}
    for name, field in StartRunConfig.model_fields.items():
        lo, hi = _bounds(name)
        if name not in enums and lo is None:
            continue
        desc = field.description or ""
        if lo is not None:
            desc += f" A whole number from {lo:,} to {hi:,}." if hi is not None else f" A whole number >= {lo:,}."
        kind = enums.get(name, IntSource)
        if field.is_required():
            fields[name] = DagsterField(kind, description=desc)
        else:
            fields[name] = DagsterField(kind, default_value=field.get_default(call_default_factory=True),
                                        is_required=False, description=desc)
    return fields


def build_start_run(store_path: str | None = None):
    """The ``start_run`` job. ``store_path``: the store its launches are checked against for a run name taken by
    another config (:func:`registered_as`, at launch, before a run exists); None checks that in the op only."""
    mapping = ConfigMapping(
        config_fn=functools.partial(launch_check, store_path=store_path),
        config_schema=Permissive({"ops": DagsterField({OP: DagsterField({"config": DagsterField(launch_schema())})})}),
    )

    @job(name="start_run", config=mapping,
         description="Register a training run in the store and add its segment partitions; the sensor trains them.")
    def start_run_job():
        register_training_run()

    return start_run_job


start_run = build_start_run()
"""``start_run`` without a store to check at launch (in process: the op checks the run name); the code location's
is :func:`build_start_run` of its ``store`` resource's path."""


# ---- train_segment -------------------------------------------------------------------------------------------------
train_segment_job = define_asset_job(
    "train_segment",
    selection=[training_segment, segment_eval],
    description="Train one segment and evaluate its final checkpoint (launched by the advance_runs sensor, or the "
                "advance_runs_in_window schedule in its window).",
)


# ---- report ---------------------------------------------------------------------------------------------------------
report_job = define_asset_job(
    "report",
    selection=[rollouts_report, pass_rate_timeline, run_comparison],
    description="Rebuild the rollouts report, the pass-rate timelines of the latest runs and the runs compared by "
                "step (launched by the advance_runs sensor once when a training run finishes; config defaults: every "
                "family, the 6 most recent runs).",
)
