"""The ``data`` asset group's real datasets: DeepMath-103K, Polaris-53K and the six evaluation benchmarks, each
prepared by :mod:`pc_pipelines.data` from its local copy (``DataResource``; nothing is downloaded) into Parquet
under ``DataResource.out_dir``, with blocking Great Expectations asset checks (:mod:`pc_pipelines.data.expectations`).

One asset per generic dataset of the registry (:mod:`pc_pipelines.data.registry`: a spec with ``load`` and
``prepare``), built by :func:`dataset_assets` with its config and checks: ``deepmath``, ``polaris`` and any dataset
registered there. The benchmarks' asset is written by hand (six files, per-benchmark bounds).

The files each asset writes and what each check verifies: docs/DATA.md, "The data assets".
"""

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from dagster import (
    AssetCheckResult,
    AssetChecksDefinition,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetsDefinition,
    Config,
    Failure,
    MaterializeResult,
    MetadataValue,
    TableColumn,
    TableSchema,
    asset,
    asset_check,
    multi_asset_check,
)
from pydantic import Field, create_model

from pc_pipelines.data.evaluation_sets import BENCHMARK_SPECS, BENCHMARKS, BENCHMARKS_DATASET, prepare_benchmarks
from pc_pipelines.data.expectations import (
    CHECK_NO_BINARY,
    CHECK_NON_EMPTY,
    CHECK_PARSEABLE,
    CHECK_ROW_COUNT,
    CHECK_UNIQUE_IDS,
    ValidationReport,
    row_count_bounds,
    split_by_check,
    validate_prepared,
    verifier_parseable,
)
from pc_pipelines.data.prepare import BINARY_PARTS, PREPARED_SCHEMA, QUARANTINE_REASONS, PreparedDataset
from pc_pipelines.data.readers import DatasetError
from pc_pipelines.data.registry import DatasetSpec, datasets
from pc_pipelines_dagster.resources import DataResource

MAX_EXAMPLES_SHOWN = 10


# ------------------------------------------------------------------------------------------------------------------
# Configuration: one asset config and one checks config per generic dataset, from its registry entry
# ------------------------------------------------------------------------------------------------------------------


def _class_name(spec: DatasetSpec, suffix: str) -> str:
    """``DeepMathConfig``, ``PolarisChecksConfig``: from the title's first word."""
    return re.sub(r"[^0-9A-Za-z]", "", spec.title.split("-")[0]) + suffix


def _prepare_config(spec: DatasetSpec) -> type[Config]:
    """How ``spec``'s training set is split (the asset's config)."""
    return create_model(
        _class_name(spec, "Config"),
        __base__=Config,
        __module__=__name__,
        __doc__=spec.config_help.get("config") or f"How the {spec.title} training set is split.",
        heldout=(int, Field(default=spec.heldout, ge=0, le=50_000, description=spec.help("heldout"))),
        seed=(int, Field(default=0, ge=0, description=spec.help("seed"))),
        gold_workers=(int | None, Field(default=None, ge=1, le=64, description=spec.help("gold_workers"))),
    )


def _checks_config(spec: DatasetSpec) -> type[Config]:
    """Row-count bounds of ``spec``'s ``row_count_in_range`` check (the checks' config)."""
    return create_model(
        _class_name(spec, "ChecksConfig"),
        __base__=Config,
        __module__=__name__,
        __doc__=spec.config_help.get("checks") or (
            f"Row-count bounds of ``{spec.name}``'s ``row_count_in_range`` check: relative to the rows read from the "
            "file unless pinned."),
        min_rows=(int | None, Field(
            default=None, ge=0, description="Absolute lower bound on the kept rows (overrides min_kept_fraction).")),
        max_rows=(int | None, Field(
            default=None, ge=1, description="Absolute upper bound on the kept rows (default: the rows read from the "
                                            "file).")),
        min_kept_fraction=(float, Field(
            default=spec.min_kept_fraction, ge=0.0, le=1.0,
            description="Lower bound as a fraction of the rows read from the file.")),
    )


class BenchmarkChecksConfig(Config):
    """Row-count bounds of ``benchmarks``' ``row_count_in_range`` check, per benchmark: between
    ceil(min_kept_fraction * README rows) and the README's row count (30 / 30 / 40 / 500 / 272 / 675; the files are
    pinned by sha256, so another count means another file). The shipped files quarantine 6 Minerva and 4
    OlympiadBench golds the verifier cannot parse."""

    min_kept_fraction: float = Field(
        default=0.95, ge=0.0, le=1.0, description="Lower bound per benchmark, as a fraction of its README row count."
    )


# ------------------------------------------------------------------------------------------------------------------
# Assets
# ------------------------------------------------------------------------------------------------------------------


def _out_dir(data: DataResource) -> Path:
    return Path(data.out_dir)


def _load(spec: DatasetSpec, data: DataResource) -> pa.Table:
    """``spec.load(path)``; a missing or unset path fails the step with how to configure it (resource key and env
    var)."""
    setting, env = spec.path_setting, spec.env_var
    path = data.path_of(spec.name)
    try:
        return spec.load(path)
    except DatasetError as e:
        hint = ""
        if path is None or not str(path).strip() or not Path(path).expanduser().exists():
            hint = (
                f"\n\nHow to provide it: set the resource config key `resources.data.config.{setting}` in the "
                f"launchpad (run config YAML: `resources: {{data: {{config: {{{setting}: /path/to/copy}}}}}}`), or "
                f"set the environment variable `{env}` for the code location (pc_pipelines_dagster/resources/data.py "
                f"maps {env} onto DataResource.{setting})."
            )
        raise Failure(description=f"{e}{hint}", metadata={setting: str(path)}, allow_retries=False) from None


def _prepare(fn, *args, **kwargs) -> PreparedDataset:
    try:
        return fn(*args, **kwargs)
    except DatasetError as e:
        raise Failure(description=str(e), allow_retries=False) from None


def _md_cell(v: Any, width: int) -> str:
    s = "" if v is None else " ".join(str(v).split())
    s = s if len(s) <= width else s[: width - 1] + "…"
    return s.replace("|", "\\|")


def _quarantine_md(quarantine: pa.Table, source: str | None = None) -> str:
    if quarantine.num_rows == 0:
        return "No row quarantined."
    head = ["source"] if source else []
    lines = [
        "| " + " | ".join([*head, "row", "reason", "problem", "answer", "detail"]) + " |",
        "|" + "---|" * (len(head) + 5),
    ]
    for r in quarantine.slice(0, MAX_EXAMPLES_SHOWN).to_pylist():
        cells = [source] if source else []
        cells += [str(r["row_index"]), r["reason"], _md_cell(r["problem"], 60), _md_cell(r["answer"], 40),
                  _md_cell(r["detail"], 80)]
        lines.append("| " + " | ".join(cells) + " |")
    if quarantine.num_rows > MAX_EXAMPLES_SHOWN:
        lines.append(f"\n... and {quarantine.num_rows - MAX_EXAMPLES_SHOWN} more in the quarantine file.")
    return "\n".join(lines)


def _column_schema(schema: pa.Schema) -> TableSchema:
    return TableSchema(columns=[TableColumn(f.name, str(f.type)) for f in schema])


def _training_set_metadata(prepared: PreparedDataset, paths: dict[str, Path]) -> dict[str, Any]:
    s = prepared.stats
    md: dict[str, Any] = {
        "path": MetadataValue.path(str(paths["rows"].resolve())),
        "quarantine_path": MetadataValue.path(str(paths["quarantine"].resolve())),
        "dagster/row_count": s["kept"],
        "dagster/column_schema": _column_schema(PREPARED_SCHEMA),
        "rows_in": s["rows_in"],
        "kept": s["kept"],
        "train_rows": s["train"],
        "heldout_rows": s["heldout"],
        "heldout_seed": s["heldout_seed"],
        "quarantined": s["quarantined"],
    }
    for reason in QUARANTINE_REASONS:
        md[f"quarantined_{reason}"] = s["quarantined_by_reason"][reason]
    if "binary_removed" in s:
        md["binary_removed"] = s["binary_removed"]
        for part in BINARY_PARTS:
            md[f"binary_removed_{part}"] = s["binary_removed_by_part"][part]
    md.update(
        answers_rewrapped=s["answers_rewrapped"],
        difficulty_unparsed=s["difficulty_unparsed"],
        quarantine_examples=MetadataValue.md(_quarantine_md(prepared.quarantine)),
        stats=MetadataValue.json(s),
        seconds=s["seconds"],
    )
    return md


@asset(group_name="data", kinds={"parquet"})
def benchmarks(context: AssetExecutionContext, data: DataResource) -> MaterializeResult:
    """The six evaluation benchmarks (AIME24, AIME25, AMC23, MATH-500, Minerva Math, OlympiadBench) from
    ``benchmarks_dir`` (unset: the copies shipped with the package, sha256-checked), one Parquet each, golds the
    verifier cannot parse quarantined with the reason."""
    try:
        prepared = prepare_benchmarks(data.benchmarks_dir, verify=data.verify_benchmarks)
    except DatasetError as e:
        raise Failure(
            description=f"{e}\n\nHow to provide it: set the resource config key "
            "`resources.data.config.benchmarks_dir` in the launchpad (unset: the copies shipped with the package).",
            allow_retries=False,
        ) from None
    out = BENCHMARKS_DATASET.path(_out_dir(data))
    counts: dict[str, dict[str, Any]] = {}
    quarantine_md = []
    rows_md = ["| benchmark | rows in file | README rows | kept | golds normalized | quarantined |",
               "|---|---|---|---|---|---|"]
    for name, p in prepared.items():
        p.write(out)
        s = p.stats
        counts[name] = {"rows_in": s["rows_in"], "expected_rows": s["expected_rows"], "kept": s["kept"],
                        "answers_normalized": s["answers_normalized"], "quarantined": s["quarantined"],
                        "quarantined_by_reason": {k: v for k, v in s["quarantined_by_reason"].items() if v}}
        rows_md.append(f"| {name} | {s['rows_in']} | {s['expected_rows']} | {s['kept']} | {s['answers_normalized']} "
                       f"| {s['quarantined']} |")
        if p.quarantine.num_rows:
            quarantine_md.append(_quarantine_md(p.quarantine, source=name))
    context.log.info("benchmarks written to %s: %s", out, {n: (c["kept"], c["quarantined"]) for n, c in counts.items()})
    md: dict[str, Any] = {
        "path": MetadataValue.path(str(out.resolve())),
        "dagster/row_count": sum(c["kept"] for c in counts.values()),
        "dagster/column_schema": _column_schema(PREPARED_SCHEMA),
        "rows_per_benchmark": MetadataValue.json(counts),
        "row_counts": MetadataValue.md("\n".join(rows_md)),
        "quarantined": sum(c["quarantined"] for c in counts.values()),
        "quarantine_examples": MetadataValue.md("\n\n".join(quarantine_md) or "No row quarantined."),
        "golds_normalized": MetadataValue.md("\n".join(
            ["| benchmark | row | gold | normalized | rules |", "|---|---|---|---|---|"]
            + [f"| {n} | {d['row_index']} | `{d['gold']}` | `{d['normalized']}` | {', '.join(d['rules'])} |"
               for n, p in prepared.items() for d in p.stats["normalized_golds"]])),
    }
    for name, c in counts.items():
        md[f"rows_{name}"] = c["kept"]
    return MaterializeResult(metadata=md)


# ------------------------------------------------------------------------------------------------------------------
# Checks
# ------------------------------------------------------------------------------------------------------------------

_CHECK_DESCRIPTIONS = {
    CHECK_NON_EMPTY: "Every problem and answer is non-null and not blank (Great Expectations).",
    CHECK_UNIQUE_IDS: "Every id is non-null and unique (Great Expectations).",
    CHECK_NO_BINARY: "No normalized answer is yes / no / true / false (Great Expectations).",
    CHECK_ROW_COUNT: "The number of kept rows is within the configured bounds (Great Expectations).",
    CHECK_PARSEABLE: "Every answer parses as a gold for the verifier (math-verify, MathGrader.check_gold).",
}


def _specs(asset_def, names: list[str]) -> list[AssetCheckSpec]:
    return [AssetCheckSpec(n, asset=asset_def, blocking=True, description=_CHECK_DESCRIPTIONS[n]) for n in names]


def _read_written(paths: list[Path]) -> tuple[pa.Table | None, str | None]:
    """The written Parquet file(s), or None and why not."""
    missing = [p for p in paths if not p.is_file()]
    if missing:
        return None, (f"{missing[0]} does not exist (resolved to {missing[0].resolve()}): materialize the asset "
                      "first, with the same `data` resource out_dir.")
    return pa.concat_tables([pq.read_table(p) for p in paths]), None


def _rows_in(stats_path: Path) -> int | None:
    try:
        return int(json.loads(stats_path.read_text())["rows_in"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _examples(report: ValidationReport) -> list[dict]:
    out = []
    for r in report.failed:
        what = f"{r.expectation}({r.column})" if r.column else r.expectation
        for ex in r.examples:
            out.append({"check": what, **ex})
    return out


def _result(name: str, report: ValidationReport, extra: dict[str, Any] | None = None) -> AssetCheckResult:
    md: dict[str, Any] = {
        "rows": report.rows,
        "unexpected_rows": sum(r.unexpected_count or 0 for r in report.results),
        "summary": report.summary(),
        "expectations": MetadataValue.json([r.as_dict() for r in report.results]),
    }
    if not report.success:
        md["examples"] = MetadataValue.json(_examples(report))
    md.update(extra or {})
    return AssetCheckResult(check_name=name, passed=report.success, metadata=md, description=report.summary())


def _not_materialized(names: list[str], why: str) -> list[AssetCheckResult]:
    return [AssetCheckResult(check_name=n, passed=False, description=why, metadata={"error": why}) for n in names]


def _check_names(forbid_binary: bool) -> list[str]:
    return [CHECK_NON_EMPTY, CHECK_UNIQUE_IDS] + ([CHECK_NO_BINARY] if forbid_binary else []) + [CHECK_ROW_COUNT]


def _training_set_checks(spec: DatasetSpec, data: DataResource, config):
    forbid_binary = spec.forbid_binary
    names = _check_names(forbid_binary)
    rows = spec.path(_out_dir(data))
    table, why = _read_written([rows])
    if table is None:
        yield from _not_materialized(names, why)
        return
    rows_in = _rows_in(rows.with_name(f"{spec.name}.stats.json"))
    try:
        lo, hi = row_count_bounds(rows_in, min_kept_fraction=config.min_kept_fraction, min_rows=config.min_rows,
                                  max_rows=config.max_rows)
    except ValueError as e:
        raise Failure(description=f"{spec.name} checks: {e}", allow_retries=False) from None
    report = validate_prepared(table, min_rows=lo, max_rows=hi, forbid_binary=forbid_binary)
    bounds = {"min_rows": lo, "max_rows": hi, "rows_in": rows_in}
    for name, part in split_by_check(report, forbid_binary=forbid_binary).items():
        yield _result(name, part, {"bounds": MetadataValue.json(bounds)} if name == CHECK_ROW_COUNT else None)


def _parseable(paths: list[Path]) -> AssetCheckResult:
    table, why = _read_written(paths)
    if table is None:
        return _not_materialized([CHECK_PARSEABLE], why)[0]
    report = verifier_parseable(table)
    res = report.results[0]
    return _result(CHECK_PARSEABLE, report, {"distinct_golds": (res.observed or {}).get("distinct_golds", 0)})


@multi_asset_check(
    specs=_specs(benchmarks, [CHECK_NON_EMPTY, CHECK_UNIQUE_IDS, CHECK_ROW_COUNT]),
    description="Great Expectations suite over each written benchmark Parquet (row counts per benchmark).",
)
def benchmarks_expectations(config: BenchmarkChecksConfig, data: DataResource):
    names = [CHECK_NON_EMPTY, CHECK_UNIQUE_IDS, CHECK_ROW_COUNT]
    out = BENCHMARKS_DATASET.path(_out_dir(data))
    tables = {}
    for b in BENCHMARKS:
        table, why = _read_written([out / f"{b}.parquet"])
        if table is None:
            yield from _not_materialized(names, why)
            return
        tables[b] = table
    merged: dict[str, ValidationReport] = {}
    bounds = {}
    for b, table in tables.items():
        expected = BENCHMARK_SPECS[b].expected_rows
        lo, hi = row_count_bounds(expected, min_kept_fraction=config.min_kept_fraction)
        bounds[b] = {"min_rows": lo, "max_rows": hi, "rows": table.num_rows}
        report = validate_prepared(table, min_rows=lo, max_rows=hi, forbid_binary=False)
        for r in report.results:
            r.kwargs["benchmark"] = b
            for ex in r.examples:
                ex["benchmark"] = b
        for name, part in split_by_check(report, forbid_binary=False).items():
            merged[name] = merged[name].merged(part) if name in merged else part
    total = sum(t.num_rows for t in tables.values())  # merged() keeps the largest table's count
    for name in names:
        rep = ValidationReport(merged[name].success, merged[name].results, total, merged[name].seconds)
        yield _result(name, rep, {"bounds": MetadataValue.json(bounds)} if name == CHECK_ROW_COUNT else None)


@asset_check(asset=benchmarks, name=CHECK_PARSEABLE, blocking=True, description=_CHECK_DESCRIPTIONS[CHECK_PARSEABLE])
def benchmarks_answers_parseable(data: DataResource) -> AssetCheckResult:
    out = BENCHMARKS_DATASET.path(_out_dir(data))
    return _parseable([out / f"{b}.parquet" for b in BENCHMARKS])


# ------------------------------------------------------------------------------------------------------------------
# The generic data asset: one per dataset of the registry with load and prepare
# ------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DatasetAssets:
    """What :func:`dataset_assets` builds for one generic dataset."""

    asset: AssetsDefinition
    checks: list[AssetChecksDefinition]
    config: type[Config]
    checks_config: type[Config]


def dataset_assets(spec: DatasetSpec) -> DatasetAssets:
    """The asset of generic dataset ``spec`` (group ``data``, key ``spec.asset_key``: loads its local copy, prepares
    it, writes ``<name>.parquet``, its quarantine and stats under ``DataResource.out_dir``), its config, and its
    blocking checks: ``<name>_expectations`` (Great Expectations, with ``no_binary_answers`` when
    ``spec.forbid_binary``) and ``<name>_answers_parseable``."""
    if not spec.generic:
        raise ValueError(f"dataset {spec.name!r} has no load/prepare: its asset is written by hand.")
    config_cls, checks_cls = _prepare_config(spec), _checks_config(spec)
    name = spec.asset_key

    def prepare_asset(context: AssetExecutionContext, config, data: DataResource) -> MaterializeResult:
        table = _load(spec, data)
        prepared = _prepare(spec.prepare, table, heldout=config.heldout, seed=config.seed,
                            gold_workers=config.gold_workers)
        paths = prepared.write(_out_dir(data))
        s = prepared.stats
        binary = ("binary_removed" in s and f", {s['binary_removed']} binary removed {s['binary_removed_by_part']}") or ""
        context.log.info("%s: %d rows in, %d kept (%d held out), %d quarantined %s%s -> %s", spec.name, s["rows_in"],
                         s["kept"], s["heldout"], s["quarantined"], s["quarantined_by_reason"], binary, paths["rows"])
        return MaterializeResult(metadata=_training_set_metadata(prepared, paths))

    prepare_asset.__annotations__["config"] = config_cls  # Dagster reads the config class from the annotation
    asset_def = asset(name=name, group_name="data", kinds={"parquet"}, description=spec.description)(prepare_asset)

    def expectations(config, data: DataResource):
        yield from _training_set_checks(spec, data, config)

    expectations.__annotations__["config"] = checks_cls
    expectations_def = multi_asset_check(
        name=f"{name}_expectations", specs=_specs(asset_def, _check_names(spec.forbid_binary)),
        description=f"Great Expectations suite over the written {spec.path('.').name}.",
    )(expectations)

    def answers_parseable(data: DataResource) -> AssetCheckResult:
        return _parseable([spec.path(_out_dir(data))])

    answers_parseable.__name__ = f"{name}_answers_parseable"  # the check's op
    parseable_def = asset_check(asset=asset_def, name=CHECK_PARSEABLE, blocking=True,
                                description=_CHECK_DESCRIPTIONS[CHECK_PARSEABLE])(answers_parseable)
    return DatasetAssets(asset_def, [expectations_def, parseable_def], config_cls, checks_cls)


GENERIC = {spec.name: dataset_assets(spec) for spec in datasets() if spec.generic}
"""Per generic dataset of the registry (``deepmath``, ``polaris``, ...), its asset, checks and configs."""

DATA_ASSETS = [*(g.asset for g in GENERIC.values()), benchmarks]
DATA_CHECKS = [*(c for g in GENERIC.values() for c in g.checks), benchmarks_expectations, benchmarks_answers_parseable]


def __getattr__(name: str) -> Any:
    """``assets.data.deepmath`` (each generic dataset's asset by its name) and its config classes
    (``DeepMathConfig``, ``DeepMathChecksConfig``)."""
    for spec_name, g in GENERIC.items():
        if name == spec_name:
            return g.asset
        if name in (g.config.__name__, g.checks_config.__name__):
            return g.config if name == g.config.__name__ else g.checks_config
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DATA_ASSETS",
    "DATA_CHECKS",
    "GENERIC",
    "BenchmarkChecksConfig",
    "DatasetAssets",
    "benchmarks",
    "dataset_assets",
    *GENERIC,
    *(cls.__name__ for g in GENERIC.values() for cls in (g.config, g.checks_config)),
]
