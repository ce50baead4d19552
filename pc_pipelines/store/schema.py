"""The store's logical schema: per-step Parquet tables, DuckDB tables, views, and the upgrade path.

Layout of a store at ``PATH`` (e.g. ``benchmarks/out/efficiency.duckdb``)::

    PATH                                  the DuckDB catalog: runs, checkpoints, eval_results, meta + views
    PATH.runs/<run_id>/step-00000123/     one directory per step, renamed into place atomically:
        steps.parquet                     one row: the step's ledger, loss, timings
        prompt_observations.parquet       one row per observed group (pilot, commit, full group)
        buffer_state.parquet              the replay buffer after the step's expiry
        evictions.parquet                 prompts marked solved this step
        MANIFEST.json                     each file's size and sha256, written last (v5)
    PATH.runs/<run_id>/.quarantine/       damaged step directories moved aside by compaction (v5)

Reading (v5): paths are never patterns. A reading session lists the step directories itself, checks each
against its manifest, and hands DuckDB the verified files as Arrow datasets (exact paths, read by pyarrow) behind
TEMP views; DuckDB itself gets no file access at all (``enable_external_access`` off, configuration locked). The
catalog's own views cover the compacted rows only and name no file, so a moved or copied store reads its own files.

Compaction: a query over a run must open every step file, so a 1000-step run costs 1000 file opens per query.
``Store.compact(run_id, through)`` moves steps ``<= through`` into ``compacted_<table>`` catalog tables and sets
``runs.compacted_through = through`` in ONE transaction; the views take catalog rows for steps at or below the
watermark and Parquet rows above it, so a reader never sees a step twice or not at all, whatever moment it reads.
Deleting the compacted step directories afterwards is only cleanup. A replay of steps after ``k`` (resume from an
earlier checkpoint) first lowers the watermark to ``k`` and drops the compacted rows above it
(``Store.reopen_after``).

Versioning: ``meta.schema_version`` is the catalog's version. A writable open of an older catalog runs the
migrations in ``MIGRATIONS`` in order (each one SQL script, in one transaction); a catalog newer than this code is
refused with an error saying to upgrade. Before any migration, and in every reading session, the catalog is checked
against its version (:func:`schema_problem`): a version that is no whole number or is missing, or tables and columns
that do not match it (``CATALOG_ADDED``: what each version added), is refused, nothing changed, never migrated.
Parquet files carry no version: a column added later reads as NULL in older step files (they are read with the
current schema), except ``prompt_observations.returned``, which the view reads as false there (no prompt could come
back from an easy pool before v8).
"""

from __future__ import annotations

import pyarrow as pa

from ..allocation.reasons import reason_sql
from .rollouts_to_target import reached_sql

COMPARED_RUN_RULE = ("the finished run with the most steps for each family, method and seed (ties: the newest; an "
                     "unfinished run only where none is finished)")
"""What the ``compared_runs`` view picks, in words (``pilot-commit report`` and the report asset print it)."""

SCHEMA_VERSION = 12

STEP_TABLES: dict[str, pa.Schema] = {
    "steps": pa.schema(
        [
            ("run_id", pa.string()),
            ("step", pa.int64()),
            ("epoch", pa.int64()),
            ("rounds", pa.int32()),
            ("engine_calls", pa.int32()),
            ("sampled_rollouts", pa.int64()),
            ("pilot_rollouts", pa.int64()),
            ("commit_rollouts", pa.int64()),
            ("full_rollouts", pa.int64()),
            ("trained_rollouts", pa.int64()),
            ("trained_prompts", pa.int32()),
            ("prompts_consumed", pa.int32()),
            ("kept", pa.int32()),
            ("skipped_easy", pa.int32()),
            ("deferred_hard", pa.int32()),
            ("surplus", pa.int32()),
            ("evicted", pa.int32()),
            ("buffer_size", pa.int32()),
            ("buffer_adds", pa.int32()),
            ("buffer_pops", pa.int32()),
            ("buffer_expired", pa.int32()),
            ("shortfall", pa.bool_()),
            ("band_lower", pa.float64()),
            ("band_upper", pa.float64()),
            ("mean_reward_std", pa.float64()),
            ("informative_share", pa.float64()),
            ("mean_lag", pa.float64()),
            ("max_lag", pa.int32()),
            ("loss", pa.float64()),  # NULL for simulated runs
            ("mean_reward", pa.float64()),
            ("time_generate_s", pa.float64()),
            ("time_reward_s", pa.float64()),
            ("time_update_s", pa.float64()),
            ("time_bookkeeping_s", pa.float64()),
            ("written_at", pa.timestamp("us", tz="UTC")),
            ("widened", pa.int32()),  # v4: PC adaptive band, pilots kept only by widening
            ("early_decided", pa.int32()),  # v4: PC sequential pilots, prompts decided by the first wave
            ("pilot_rollouts_saved", pa.int64()),  # v4: later-wave rollouts those early decisions saved
            ("survival", pa.float64()),  # v4: PC survival sampling, the survival estimate after the step
            # v5: buffer entries replaced by a newer pilot of the same prompt (one live entry per prompt; never
            # trained, not expired). buffer_size = previous + adds - pops - replaced - expired. NULL before v5.
            ("buffer_replaced", pa.int32()),
            # v8: PC easy_pool eviction, solved prompts drawn back from the easy pool for pilots. NULL before v8.
            ("returned", pa.int32()),
            # v9: the history prior (screen_strategy), drawn prompts skipped without a rollout and the first rollouts
            # they would have cost. NULL before v9.
            ("screened_by_prior", pa.int32()),
            ("prior_rollouts_saved", pa.int64()),
        ]
    ),
    "prompt_observations": pa.schema(
        [
            ("run_id", pa.string()),
            ("step", pa.int64()),
            ("round", pa.int16()),
            ("call", pa.int16()),
            ("prompt_id", pa.int64()),
            ("stage", pa.string()),  # pilot | commit | full
            ("n", pa.int32()),
            ("n_correct", pa.float64()),
            ("p_hat", pa.float64()),
            ("decision", pa.string()),  # kept | skipped_easy | deferred_hard | trained | surplus | continued | ...
            ("evicted", pa.bool_()),  # independent of decision
            ("lag", pa.int32()),
            ("wave", pa.int16()),  # v4: last pilot wave of the row's rollouts (sequential pilots), else 0
            ("rule", pa.string()),  # v4: none | band | adaptive_band | early_wave: which rule decided
            ("returned", pa.bool_()),  # v8: the prompt came back from the easy pool (read as false before v8)
            # v9: a screened_by_prior row's posterior (NULL on every other row): predicted chance of a useful group,
            # posterior mean pass rate, the prompt's own discounted rollouts, its observed groups
            ("prior_useful", pa.float64()),
            ("prior_mean", pa.float64()),
            ("prior_evidence", pa.float64()),
            ("prior_observations", pa.int32()),
            # v10: every pilot wave is its own row (a first wave that decided nothing is ``continued``; n and
            # n_correct are the row's own rollouts) and evidence_n counts the rollouts its decision read (every wave
            # of the round on a later wave's row, else n; p_hat is their pass rate). NULL before v10, where a later
            # wave's row pooled the earlier waves into its n (read as n there).
            ("evidence_n", pa.int32()),
            # v11: the keep band in force when a PC pilot row was decided by it (NULL on every other row, and in
            # older rows: the decision_reasons view derives theirs from the round's widened rows and the config)
            ("band_lower", pa.float64()),
            ("band_upper", pa.float64()),
        ]
    ),
    "buffer_state": pa.schema(
        [
            ("run_id", pa.string()),
            ("step", pa.int64()),
            ("entry_id", pa.int64()),
            ("prompt_id", pa.int64()),
            ("born", pa.int64()),
            ("n_pilot", pa.int32()),
            ("pilot_correct", pa.float64()),
            ("pilot_std", pa.float64()),
        ]
    ),
    "evictions": pa.schema(
        [
            ("run_id", pa.string()),
            ("step", pa.int64()),
            ("prompt_id", pa.int64()),
            ("effective_epoch", pa.int64()),  # first epoch the prompt is no longer streamed in
        ]
    ),
}

# The catalog's own tables at the current version (what a fresh store gets).
DDL = [
    "CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR)",
    """CREATE TABLE IF NOT EXISTS runs (
        run_id VARCHAR PRIMARY KEY,
        family VARCHAR NOT NULL,
        method VARCHAR NOT NULL,
        preset VARCHAR NOT NULL,
        seed BIGINT NOT NULL,
        config_json VARCHAR NOT NULL,
        config_hash VARCHAR NOT NULL,
        lineage_json VARCHAR,
        kind VARCHAR NOT NULL,            -- simulate | train
        status VARCHAR NOT NULL,          -- running | finished | failed | paused | stopped
        status_reason VARCHAR,            -- v2: why a run failed or was paused
        compacted_through BIGINT,         -- v2: steps <= this live in compacted_* tables (NULL: none)
        run_dir VARCHAR NOT NULL,
        created_at TIMESTAMPTZ NOT NULL,
        updated_at TIMESTAMPTZ NOT NULL,
        seq BIGINT                        -- v7: registration order in this store (newest attempt: highest)
    )""",
    """CREATE TABLE IF NOT EXISTS checkpoints (
        run_id VARCHAR NOT NULL,
        step BIGINT NOT NULL,
        path VARCHAR NOT NULL,
        created_at TIMESTAMPTZ NOT NULL,
        PRIMARY KEY (run_id, step)
    )""",
    """CREATE TABLE IF NOT EXISTS eval_results (
        run_id VARCHAR NOT NULL,
        step BIGINT NOT NULL,             -- evaluated after this step's update; 0 = before training
        benchmark VARCHAR NOT NULL,
        k INTEGER NOT NULL,               -- samples per prompt (mean@k)
        temperature DOUBLE NOT NULL,
        accuracy DOUBLE NOT NULL,
        n_prompts INTEGER,
        created_at TIMESTAMPTZ NOT NULL,
        PRIMARY KEY (run_id, step, benchmark)
    )""",
]

# Version 1 as released, kept verbatim so tests can build an old store and exercise the upgrade.
DDL_V1_RUNS = """CREATE TABLE runs (
        run_id VARCHAR PRIMARY KEY, family VARCHAR NOT NULL, method VARCHAR NOT NULL, preset VARCHAR NOT NULL,
        seed BIGINT NOT NULL, config_json VARCHAR NOT NULL, config_hash VARCHAR NOT NULL, lineage_json VARCHAR,
        kind VARCHAR NOT NULL, status VARCHAR NOT NULL, run_dir VARCHAR NOT NULL,
        created_at TIMESTAMPTZ NOT NULL, updated_at TIMESTAMPTZ NOT NULL)"""


def _duck_type(t: pa.DataType) -> str:
    if pa.types.is_string(t):
        return "VARCHAR"
    if pa.types.is_boolean(t):
        return "BOOLEAN"
    if pa.types.is_floating(t):
        return "DOUBLE"
    if pa.types.is_timestamp(t):
        return "TIMESTAMPTZ"
    if pa.types.is_int16(t):
        return "SMALLINT"
    if pa.types.is_int32(t):
        return "INTEGER"
    return "BIGINT"


COMPACTED_DDL = [
    f"CREATE TABLE IF NOT EXISTS compacted_{name} ("
    + ", ".join(f"{f.name} {_duck_type(f.type)}" for f in schema)
    + ")"
    for name, schema in STEP_TABLES.items()
]
DDL += COMPACTED_DDL

# Training segments (Dagster partitions ``<run>/seg-NNNN``): the plan written by the start_run job and each
# segment's last outcome, which the sensor reads to advance runs (version 3).
SEGMENTS_DDL = """CREATE TABLE IF NOT EXISTS segments (
        run_id VARCHAR NOT NULL,
        segment INTEGER NOT NULL,
        first_step BIGINT NOT NULL,
        last_step BIGINT NOT NULL,
        status VARCHAR NOT NULL,          -- planned | running | done | failed | stopped
        attempts INTEGER NOT NULL,        -- materializations started
        consecutive_failures INTEGER NOT NULL,  -- failures since the segment last succeeded
        error VARCHAR,                    -- the last failure's reason
        orchestrator_run_id VARCHAR,      -- the Dagster run of the last attempt
        cumulative_rollouts BIGINT,       -- after the segment's last step
        eval_accuracy DOUBLE,             -- the segment's last in-loop evaluation, if any
        mean_reward_std DOUBLE,
        updated_at TIMESTAMPTZ NOT NULL,
        PRIMARY KEY (run_id, segment)
    )"""
DDL.append(SEGMENTS_DDL)

# v11 -> v12: every stored step number + 1 (steps from 1, the evaluation before training step 0); a buffer entry's
# ``born`` is a step too, a watermark is the last compacted step.
def shift_keyed_steps(table: str, by: int) -> list[str]:
    """SQL moving every row of ``table``, whose primary key holds ``step``, by ``by`` steps. Not an UPDATE: DuckDB
    checks the key row by row within one, so evaluations at adjacent steps (step 20 moving onto 21 while 21 is still
    there) failed the upgrade and left the store unreadable; a copy, a delete and an insert move them all at once."""
    tmp = f"_shift_{table}"
    return [f"CREATE TEMP TABLE {tmp} AS SELECT * REPLACE (step + ({by}) AS step) FROM {table}",
            f"DELETE FROM {table}", f"INSERT INTO {table} BY NAME SELECT * FROM {tmp}", f"DROP TABLE {tmp}"]


RENUMBER_STEPS_SQL = [
    *(f"UPDATE compacted_{t} SET step = step + 1" + (", born = born + 1" if t == "buffer_state" else "")
      for t in ("steps", "prompt_observations", "buffer_state", "evictions")),
    *shift_keyed_steps("eval_results", 1),
    *shift_keyed_steps("checkpoints", 1),
    "UPDATE runs SET compacted_through = compacted_through + 1 WHERE compacted_through IS NOT NULL",
    "UPDATE segments SET first_step = first_step + 1, last_step = last_step + 1",
]

# from_version -> SQL run to reach from_version + 1.
MIGRATIONS: dict[int, list[str]] = {
    1: [
        "ALTER TABLE runs ADD COLUMN status_reason VARCHAR",
        "ALTER TABLE runs ADD COLUMN compacted_through BIGINT",
        *COMPACTED_DDL,
    ],
    2: [SEGMENTS_DDL],
    # IF NOT EXISTS: a v1 catalog's upgrade creates the compacted tables at the current columns in step 1.
    3: [
        "ALTER TABLE compacted_steps ADD COLUMN IF NOT EXISTS widened INTEGER",
        "ALTER TABLE compacted_steps ADD COLUMN IF NOT EXISTS early_decided INTEGER",
        "ALTER TABLE compacted_steps ADD COLUMN IF NOT EXISTS pilot_rollouts_saved BIGINT",
        "ALTER TABLE compacted_steps ADD COLUMN IF NOT EXISTS survival DOUBLE",
        "ALTER TABLE compacted_prompt_observations ADD COLUMN IF NOT EXISTS wave SMALLINT",
        "ALTER TABLE compacted_prompt_observations ADD COLUMN IF NOT EXISTS rule VARCHAR",
    ],
    # v5: the catalog's views name no file (compacted rows only; sessions add the step files), so the
    # views of v4 (absolute glob patterns) are replaced by Store.init's view refresh; nothing else changes.
    4: [],
    # v6 (one live buffer entry per prompt): steps count the entries a newer pilot replaced.
    5: ["ALTER TABLE compacted_steps ADD COLUMN IF NOT EXISTS buffer_replaced INTEGER"],
    # v7: the store's own order of registration, so "the latest run" never depends on a wall clock (a machine whose
    # clock is behind registers an older-looking run); existing runs are numbered in their creation order.
    6: ["ALTER TABLE runs ADD COLUMN IF NOT EXISTS seq BIGINT",
        """UPDATE runs SET seq = o.rn FROM (
               SELECT run_id, row_number() OVER (ORDER BY created_at, run_id) AS rn FROM runs) o
           WHERE runs.run_id = o.run_id"""],
    # v8 (easy_pool eviction): steps count returns from the easy pool; observations flag a returned prompt's row
    # (compacted rows of older steps hold NULL, which the prompt_observations view reads as false).
    7: ["ALTER TABLE compacted_steps ADD COLUMN IF NOT EXISTS returned INTEGER",
        "ALTER TABLE compacted_prompt_observations ADD COLUMN IF NOT EXISTS returned BOOLEAN"],
    # v9 (the history prior): steps count the prompts it skipped and the rollouts saved; observations hold a
    # skipped prompt's posterior (NULL in older rows and in every row the prior did not skip).
    8: ["ALTER TABLE compacted_steps ADD COLUMN IF NOT EXISTS screened_by_prior INTEGER",
        "ALTER TABLE compacted_steps ADD COLUMN IF NOT EXISTS prior_rollouts_saved BIGINT",
        "ALTER TABLE compacted_prompt_observations ADD COLUMN IF NOT EXISTS prior_useful DOUBLE",
        "ALTER TABLE compacted_prompt_observations ADD COLUMN IF NOT EXISTS prior_mean DOUBLE",
        "ALTER TABLE compacted_prompt_observations ADD COLUMN IF NOT EXISTS prior_evidence DOUBLE",
        "ALTER TABLE compacted_prompt_observations ADD COLUMN IF NOT EXISTS prior_observations INTEGER"],
    # v10 (every pilot wave its own row): observations count the rollouts behind their decision. Older rows hold
    # NULL, read as n: their later-wave rows pooled every wave into n (a first wave that decided nothing has no row of
    # its own there, and cannot be split out again).
    9: ["ALTER TABLE compacted_prompt_observations ADD COLUMN IF NOT EXISTS evidence_n INTEGER"],
    # v11 (issue 55): each PC pilot row holds the band that decided it (an adaptive band widens between a step's
    # rounds; the step's band is its widest). Older rows hold NULL: decision_reasons derives their band.
    10: ["ALTER TABLE compacted_prompt_observations ADD COLUMN IF NOT EXISTS band_lower DOUBLE",
        "ALTER TABLE compacted_prompt_observations ADD COLUMN IF NOT EXISTS band_upper DOUBLE"],
    # v12 (issue 55, one step numbering): steps count from 1 (step N: the run's N-th update) and the evaluation
    # before training is step 0, in the store as on every screen; every stored step number moves up by one (the
    # step files too: Store.init renumbers them first, steplog.renumber_step_dirs). Nothing else changes.
    11: RENUMBER_STEPS_SQL,
}


# What each version added to the catalog's tables (a table first named at a version was created by it), for
# :func:`schema_problem`: a catalog at version v has every table and column of the versions up to v and none that a
# later version added. The step tables' compacted copies have the step schema's columns, less those added later.
_STEP_COLUMNS_ADDED = {
    4: {"compacted_steps": ("widened", "early_decided", "pilot_rollouts_saved", "survival"),
        "compacted_prompt_observations": ("wave", "rule")},
    6: {"compacted_steps": ("buffer_replaced",)},
    8: {"compacted_steps": ("returned",), "compacted_prompt_observations": ("returned",)},
    9: {"compacted_steps": ("screened_by_prior", "prior_rollouts_saved"),
        "compacted_prompt_observations": ("prior_useful", "prior_mean", "prior_evidence", "prior_observations")},
    10: {"compacted_prompt_observations": ("evidence_n",)},
    11: {"compacted_prompt_observations": ("band_lower", "band_upper")},
}
_LATER_STEP_COLUMNS = {(t, c) for added in _STEP_COLUMNS_ADDED.values() for t, cols in added.items() for c in cols}
CATALOG_ADDED: dict[int, dict[str, tuple[str, ...]]] = {
    1: {"meta": ("key", "value"),
        "runs": ("run_id", "family", "method", "preset", "seed", "config_json", "config_hash", "lineage_json", "kind",
                 "status", "run_dir", "created_at", "updated_at"),
        "checkpoints": ("run_id", "step", "path", "created_at"),
        "eval_results": ("run_id", "step", "benchmark", "k", "temperature", "accuracy", "n_prompts", "created_at")},
    2: {"runs": ("status_reason", "compacted_through"),
        **{f"compacted_{t}": tuple(c for c in schema.names if (f"compacted_{t}", c) not in _LATER_STEP_COLUMNS)
           for t, schema in STEP_TABLES.items()}},
    3: {"segments": ("run_id", "segment", "first_step", "last_step", "status", "attempts", "consecutive_failures",
                     "error", "orchestrator_run_id", "cumulative_rollouts", "eval_accuracy", "mean_reward_std",
                     "updated_at")},
    4: _STEP_COLUMNS_ADDED[4],
    6: _STEP_COLUMNS_ADDED[6],
    7: {"runs": ("seq",)},
    8: _STEP_COLUMNS_ADDED[8],
    9: _STEP_COLUMNS_ADDED[9],
    10: _STEP_COLUMNS_ADDED[10],
    11: _STEP_COLUMNS_ADDED[11],
}


def catalog_columns(version: int) -> dict[str, set[str]]:
    """The tables and columns of a catalog at ``version`` (1 to :data:`SCHEMA_VERSION`)."""
    out: dict[str, set[str]] = {}
    for v in range(1, version + 1):
        for table, cols in CATALOG_ADDED.get(v, {}).items():
            out.setdefault(table, set()).update(cols)
    return out


def _added_in(table: str, column: str | None) -> int:
    """The version that added ``table`` (``column`` None) or ``table.column``."""
    for v in sorted(CATALOG_ADDED):
        cols = CATALOG_ADDED[v].get(table)
        if cols is not None and (column is None or column in cols):
            return v
    return 0


def matching_version(columns: dict[str, set[str]]) -> int | None:
    """The version whose tables and columns ``columns`` has (extra tables and columns of no version aside)."""
    for v in range(SCHEMA_VERSION, 0, -1):
        if not _mismatch(v, columns):
            return v
    return None


def _mismatch(version: int, columns: dict[str, set[str]]) -> list[str]:
    """What ``columns`` (table -> its columns) lacks of ``version``, and what it has of a later version."""
    want = catalog_columns(version)
    missing = [t if t not in columns else f"{t}.{c}" for t in sorted(want)
               for c in ([None] if t not in columns else sorted(want[t] - columns[t]))]
    later = []
    for table, cols in sorted(columns.items()):
        if table not in want:
            if _added_in(table, None) > version:
                later.append(f"{table} (version {_added_in(table, None)})")
            continue
        later += [f"{table}.{c} (version {_added_in(table, c)})" for c in sorted(cols - want[table])
                  if _added_in(table, c) > version]
    return ([f"lacks {', '.join(missing[:4])}{' and more' if len(missing) > 4 else ''}"] if missing else []) + (
        [f"has {', '.join(later[:4])}{' and more' if len(later) > 4 else ''}"] if later else [])


STORE_TABLES = frozenset(catalog_columns(SCHEMA_VERSION)) - {"meta"}


def schema_problem(versions: list[str] | None, columns: dict[str, set[str]]) -> tuple[str, int | None] | None:
    """Why a catalog cannot be read or upgraded as it stands, checked before any migration runs: ``versions`` are
    the values of its ``meta.schema_version`` rows (None: no meta table), ``columns`` its base tables' columns.
    ``(what is wrong, the version its tables match or None)``; None when the stored version is a whole number from 1
    to :data:`SCHEMA_VERSION` whose tables and columns the catalog has (and none of a later version), when the
    catalog is empty (a new store), or when it is newer than this code (refused or read as it is elsewhere)."""
    from ..errors import brief

    if versions is None:
        if not STORE_TABLES & set(columns):
            return None
        found = ", ".join(sorted(STORE_TABLES & set(columns))[:3])
        return f"it has the store's tables ({found}) but no meta table, so no schema version", matching_version(columns)
    if not versions:
        return "its meta table has no schema_version row", matching_version(columns)
    text = versions[0]
    version = int(text) if text is not None and text.isascii() and text.isdigit() else None
    if version is None:
        return (f"its schema version {brief(text)} is not a whole number (pc-pipelines writes 1 to {SCHEMA_VERSION})",
                matching_version(columns))
    if version > SCHEMA_VERSION:
        return None
    if version < 1:
        return (f"schema version {version} is none pc-pipelines ever wrote (1 to {SCHEMA_VERSION}): no upgrade path "
                f"from schema version {version}", matching_version(columns))
    wrong = _mismatch(version, columns)
    if not wrong:
        return None
    return f"its schema does not match its version {version}: it {' and '.join(wrong)}", matching_version(columns)


_REASON = reason_sql(decision="o.decision", stage="o.stage", rule="o.rule", evicted="o.evicted",
                     returned="o.returned",
                     columns={"p_hat": "o.p_hat", "n": "o.n", "lag": "o.lag", "band_lower": "o.band_lower",
                              "band_upper": "o.band_upper", "prior_useful": "o.prior_useful",
                              "prior_mean": "o.prior_mean", "prior_evidence": "o.prior_evidence",
                              "prior_observations": "o.prior_observations"})
"""``decision_reasons.reason``: the SQL rendering of ``pc_pipelines/allocation/reasons.py``'s templates."""


def view_sql(files: dict[str, str] | None = None, compacted: bool = True, watermark: bool = True,
             sequence: bool = True) -> list[str]:
    """The views, in dependency order.

    ``files`` None: the catalog's own (persistent) views, over the ``compacted_*`` tables only. They name no file,
    so a moved or copied catalog stays correct, and plain ``duckdb`` sessions see every compacted step (all of a
    finished run's). ``files`` maps each step table to a relation of its verified step files (registered per
    session by :meth:`.Store.connect`); the views are then TEMP views of that session, which shadow the persistent
    ones, and take catalog rows at or below each run's watermark and file rows above it. ``compacted`` /
    ``watermark``: whether the catalog has the ``compacted_*`` tables / ``runs.compacted_through`` (older versions
    read without being upgraded). ``sequence``: whether ``runs.seq`` exists (v7; before it the latest run of a
    (family, method, seed) is the one created last).
    """
    create = "CREATE OR REPLACE VIEW" if files is None else "CREATE OR REPLACE TEMP VIEW"
    newest_first = "seq DESC NULLS LAST, run_id" if sequence else "created_at DESC, run_id"

    def step_view(t: str) -> str:
        # rows written before v8 have no returned flag: no prompt came back from an easy pool then
        fill = " REPLACE (coalesce(returned, false) AS returned)" if t == "prompt_observations" else ""
        if files is None:
            return f"{create} {t} AS SELECT *{fill} FROM compacted_{t}"
        src = f"SELECT p.* FROM {files[t]} p"
        if watermark:
            src += " WHERE p.step > coalesce((SELECT r.compacted_through FROM runs r WHERE r.run_id = p.run_id), 0)"
        if not compacted:
            return f"{create} {t} AS SELECT *{fill} FROM ({src})" if fill else f"{create} {t} AS {src}"
        # Catalog rows at or below each run's watermark, file rows above it: every step exactly once.
        union = f"SELECT * FROM compacted_{t} UNION ALL BY NAME {src}"
        return f"{create} {t} AS SELECT *{fill} FROM ({union})" if fill else f"{create} {t} AS {union}"

    sqls = [step_view(t) for t in STEP_TABLES]
    sqls += [
        # Every observed group, a row per pilot wave (v10; before it a later wave's row pooled the earlier ones):
        # n / n_correct the row's own rollouts, evidence_n and p_hat what its decision read.
        f"""{create} pass_rate_history AS
           SELECT run_id, prompt_id, step, round, stage, n, n_correct, p_hat, decision, evicted, lag, wave, rule,
                  returned, coalesce(evidence_n, n) AS evidence_n
           FROM prompt_observations""",
        # Why each observed group was kept, skipped, deferred, trained or evicted, in words: one decision per prompt
        # per round, n the rollouts it read (a first wave that went on to its later wave is that decision's evidence,
        # not a row here), with the band in force when the row was decided (an adaptive band widens between a step's
        # rounds). Rows written before v4 have no rule: read as band. Rows written before v11 hold no band: a round's
        # band is the config's (the step's where the config has none), widened to the pass rates the round kept only
        # by widening (AdaptiveBand.keep: a widened band's edges are such rows' pass rates).
        f"""{create} decision_reasons AS
           WITH r AS (SELECT * REPLACE (coalesce(rule, CASE WHEN stage = 'pilot' THEN 'band' ELSE 'none' END) AS rule,
                                        coalesce(evidence_n, n) AS n)
                      FROM prompt_observations WHERE decision <> 'continued'),
           o AS (
               SELECT r.* REPLACE (
                      CASE WHEN r.stage = 'pilot' AND r.rule IN ('band', 'adaptive_band') THEN coalesce(r.band_lower,
                          least(coalesce(TRY_CAST(json_extract_string(c.config_json, '$.allocator.p_lower') AS DOUBLE),
                                         s.band_lower),
                                min(CASE WHEN r.rule = 'adaptive_band' THEN r.p_hat END)
                                    OVER (PARTITION BY r.run_id, r.step, r.round))) END AS band_lower,
                      CASE WHEN r.stage = 'pilot' AND r.rule IN ('band', 'adaptive_band') THEN coalesce(r.band_upper,
                          greatest(coalesce(TRY_CAST(json_extract_string(c.config_json, '$.allocator.p_upper') AS DOUBLE),
                                            s.band_upper),
                                   max(CASE WHEN r.rule = 'adaptive_band' THEN r.p_hat END)
                                       OVER (PARTITION BY r.run_id, r.step, r.round))) END AS band_upper)
               FROM r LEFT JOIN runs c USING (run_id) LEFT JOIN steps s USING (run_id, step))
           SELECT o.run_id, o.step, o.round, o.prompt_id, o.stage, o.n, o.p_hat, o.decision, o.evicted, o.rule,
                  o.returned, o.prior_useful, o.prior_mean, o.prior_evidence, o.prior_observations,
                  o.band_lower, o.band_upper, {_REASON} AS reason
           FROM o""",
        # Where each run's sampled rollouts went: every one in exactly one part (trained + early_screen +
        # screened_out + surplus + kept_unused = sampled). kept_unused: pilots kept for the buffer that never reached
        # a trained batch (those expired for age, those replaced by a newer pilot of their prompt, and those still
        # in the buffer). headroom = sampled / trained bounds what cheaper screening alone can buy.
        f"""{create} rollout_breakdown AS
           WITH t AS (SELECT run_id, count(*) AS steps, sum(sampled_rollouts) AS sampled,
                             sum(trained_rollouts) AS trained FROM steps GROUP BY run_id),
                o AS (SELECT run_id,
                             coalesce(sum(n) FILTER (WHERE rule = 'early_wave'), 0) AS early_screen,
                             coalesce(sum(coalesce(evidence_n, n)) FILTER (WHERE coalesce(rule, '') <> 'early_wave'
                                                     AND decision IN ('skipped_easy', 'deferred_hard')), 0) AS screened_out,
                             coalesce(sum(n) FILTER (WHERE decision = 'surplus'), 0) AS surplus
                      FROM prompt_observations GROUP BY run_id)
           SELECT t.run_id, t.steps, t.sampled, t.trained, coalesce(o.early_screen, 0) AS early_screen,
                  coalesce(o.screened_out, 0) AS screened_out, coalesce(o.surplus, 0) AS surplus,
                  t.sampled - t.trained - coalesce(o.early_screen, 0) - coalesce(o.screened_out, 0)
                      - coalesce(o.surplus, 0) AS kept_unused,
                  t.sampled / nullif(t.trained, 0) AS headroom
           FROM t LEFT JOIN o USING (run_id)""",
        f"""{create} step_costs AS
           SELECT run_id, step, sampled_rollouts, trained_rollouts, pilot_rollouts, commit_rollouts, full_rollouts,
                  sum(sampled_rollouts) OVER w AS cumulative_sampled,
                  sum(trained_rollouts) OVER w AS cumulative_trained,
                  step - count(*) OVER w AS missing_steps
           FROM steps
           WINDOW w AS (PARTITION BY run_id ORDER BY step ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)""",
        # Average accuracy = mean over the run's benchmarks at each eval step; cost = cumulative sampled
        # rollouts through that step (0 before training). missing_steps: steps 1..step the store lacks (damaged or
        # deleted); when it is > 0 the costs are lower bounds (taken at the last step present).
        f"""{create} eval_curve AS
           SELECT e.run_id, r.family, r.method, r.seed, e.step, avg(e.accuracy) AS accuracy,
                  coalesce(max(c.cumulative_sampled), 0) AS cumulative_sampled,
                  coalesce(max(c.cumulative_trained), 0) AS cumulative_trained,
                  greatest(e.step, 0) - coalesce(max(c.step - c.missing_steps), 0) AS missing_steps
           FROM eval_results e JOIN runs r USING (run_id)
           ASOF LEFT JOIN step_costs c ON c.run_id = e.run_id AND e.step >= c.step
           GROUP BY e.run_id, r.family, r.method, r.seed, e.step""",
        # The one run the reports compare per (family, method, seed): COMPARED_RUN_RULE.
        f"""{create} compared_runs AS
           WITH sizes AS (SELECT run_id, count(*) AS steps FROM steps GROUP BY run_id)
           SELECT r.family, r.method, r.seed, r.run_id, coalesce(z.steps, 0) AS steps, r.status,
                  count(*) OVER (PARTITION BY r.family, r.method, r.seed) AS candidates
           FROM runs r LEFT JOIN sizes z USING (run_id)
           QUALIFY row_number() OVER (PARTITION BY r.family, r.method, r.seed
                                      ORDER BY (r.status = 'finished') DESC, coalesce(z.steps, 0) DESC,
                                               {newest_first}) = 1""",
        # Paper Table 2, per family and seed (the compared run of each method): target = min(GRPO peak, PC peak);
        # each method's cumulative sampled rollouts at its first eval at or above the target (NULL = never, or no
        # run: <method>_run is NULL then). The rule in Python, for the CLI and the studies: rollouts_to_target.py.
        f"""{create} rollouts_to_target AS
           WITH curve AS (SELECT * FROM eval_curve WHERE run_id IN (SELECT run_id FROM compared_runs)),
           peaks AS (SELECT family, seed, method, max(accuracy) AS peak FROM curve GROUP BY ALL),
           targets AS (
               -- DuckDB's least() skips NULLs: without a GRPO or a PC run there is no target at all.
               SELECT family, seed,
                      CASE WHEN count(*) FILTER (WHERE method = 'grpo') > 0 AND count(*) FILTER (WHERE method = 'pc') > 0
                           THEN least(max(peak) FILTER (WHERE method = 'grpo'), max(peak) FILTER (WHERE method = 'pc'))
                      END AS target
               FROM peaks GROUP BY ALL),
           hits AS (
               SELECT c.family, c.seed, c.method,
                      min(c.cumulative_sampled) FILTER (WHERE {reached_sql('c.accuracy', 't.target')}) AS rollouts
               FROM curve c JOIN targets t USING (family, seed) GROUP BY ALL),
           gaps AS (SELECT family, seed, max(missing_steps) AS missing_steps FROM curve GROUP BY ALL),
           table2 AS (
           SELECT t.family, t.seed, t.target,
                  max(h.rollouts) FILTER (WHERE h.method = 'grpo') AS grpo,
                  max(h.rollouts) FILTER (WHERE h.method = 'dapo') AS dapo,
                  max(h.rollouts) FILTER (WHERE h.method = 'pc') AS pc,
                  max(h.rollouts) FILTER (WHERE h.method = 'grpo')::DOUBLE
                      / nullif(max(h.rollouts) FILTER (WHERE h.method = 'pc'), 0) AS grpo_over_pc,
                  max(h.rollouts) FILTER (WHERE h.method = 'dapo')::DOUBLE
                      / nullif(max(h.rollouts) FILTER (WHERE h.method = 'pc'), 0) AS dapo_over_pc,
                  -- > 0: a compared run lacks steps (damaged or deleted); its rollout counts are lower bounds
                  coalesce(max(g.missing_steps), 0) AS missing_steps
           FROM targets t LEFT JOIN hits h USING (family, seed) LEFT JOIN gaps g USING (family, seed)
           WHERE t.target IS NOT NULL
           GROUP BY t.family, t.seed, t.target),
           chosen AS (
               SELECT family, seed,
                      max(run_id) FILTER (WHERE method = 'grpo') AS grpo_run,
                      max(run_id) FILTER (WHERE method = 'dapo') AS dapo_run,
                      max(run_id) FILTER (WHERE method = 'pc') AS pc_run,
                      max(steps) FILTER (WHERE method = 'grpo') AS grpo_steps,
                      max(steps) FILTER (WHERE method = 'dapo') AS dapo_steps,
                      max(steps) FILTER (WHERE method = 'pc') AS pc_steps
               FROM compared_runs GROUP BY ALL)
           SELECT t2.*, c.grpo_run, c.dapo_run, c.pc_run, c.grpo_steps, c.dapo_steps, c.pc_steps
           FROM table2 t2 LEFT JOIN chosen c USING (family, seed)""",
    ]
    return sqls
