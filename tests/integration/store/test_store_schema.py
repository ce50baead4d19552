"""Catalog versioning: a version-1 catalog is upgraded in place, a newer one is refused untouched."""

from __future__ import annotations

import datetime as dt

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pc_pipelines.store import SCHEMA_VERSION, STEP_TABLES, RunRecord, Store, StoreError, schema
from tests.support.old_numbering import catalog_from_zero, files_from_zero

pytestmark = pytest.mark.integration

T0 = dt.datetime(2025, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
V1_ROW = ["old-run", "fam", "pc", "paper", 0, '{"seed": 0}', "abc123", None, "simulate", "finished", "/somewhere",
          T0, T0]


def step_tables(run_id: str, step: int) -> dict[str, pa.Table]:
    steps = pa.Table.from_pylist([{"run_id": run_id, "step": step, "sampled_rollouts": 10}],
                                 schema=STEP_TABLES["steps"])
    return {"steps": steps, **{t: STEP_TABLES[t].empty_table() for t in STEP_TABLES if t != "steps"}}


def store_with_steps(path, steps: int) -> Store:
    """A fresh store holding run ``r`` with ``steps`` step directories (uncompacted)."""
    st = Store(path).init()
    st.register_run(RunRecord(run_id="r", family="f", method="pc", preset="p", seed=0, config={}, config_hash="h",
                              kind="simulate"))
    w = st.writer("r")
    for step in range(1, steps + 1):  # steps count from 1 (v12)
        w.write_step(step, step_tables("r", step))
    return st


def build_v1(path) -> None:
    """A catalog as version 1 wrote it: meta, the v1 runs table (no status_reason), checkpoints, eval_results."""
    con = duckdb.connect(str(path))
    try:
        con.execute("CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
        con.execute("INSERT INTO meta VALUES ('schema_version', '1')")
        con.execute(schema.DDL_V1_RUNS)
        for sql in schema.DDL:
            # v1 had checkpoints and eval_results; runs is the v1 table above; compacted_* came with v2, segments v3
            if any(f"TABLE IF NOT EXISTS {t}" in sql for t in ("meta", "runs", "compacted_", "segments")):
                continue
            con.execute(sql)
        con.execute("INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", V1_ROW)
        con.execute("INSERT INTO eval_results VALUES ('old-run', 4, 'aime', 8, 0.7, 0.25, 30, ?)", [T0])
    finally:
        con.close()


def as_version(con, version: int) -> None:
    """Make a current catalog what ``version`` wrote: drop the tables and columns later versions added (their rows
    with them), count its steps from 0 as versions before 12 did (the step files: :func:`files_from_zero`, called
    by the test before it strips their newer columns), set its version."""
    if version < 12:
        catalog_from_zero(con)
    want = schema.catalog_columns(version)
    for v in sorted(schema.CATALOG_ADDED, reverse=True):
        if v <= version:
            break
        for table, cols in schema.CATALOG_ADDED[v].items():
            if table not in want:
                con.execute(f"DROP TABLE IF EXISTS {table}")
                continue
            for c in cols:
                con.execute(f"ALTER TABLE {table} DROP COLUMN IF EXISTS {c}")
    con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [str(version)])


def columns(path, table: str) -> list[str]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return [r[0] for r in con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = ? ORDER BY ordinal_position",
            [table]).fetchall()]
    finally:
        con.close()


def test_schema_version_is_twelve():
    assert SCHEMA_VERSION == 12
    assert sorted(schema.MIGRATIONS) == list(range(1, SCHEMA_VERSION))


def test_fresh_store_is_at_the_current_version(new_store):
    st = new_store
    assert st.schema_version() == SCHEMA_VERSION
    assert "status_reason" in columns(st.path, "runs")
    st.init()  # idempotent
    assert st.schema_version() == SCHEMA_VERSION
    assert st.query("SELECT count(*) AS n FROM meta") == [{"n": 1}]
    # views bind before any run exists
    for view in ("steps", "prompt_observations", "buffer_state", "evictions", "pass_rate_history", "step_costs",
                 "eval_curve", "rollouts_to_target"):
        assert st.query(f"SELECT count(*) AS n FROM {view}") == [{"n": 0}], view


def test_version_1_catalog_is_upgraded_keeping_its_rows(tmp_path):
    path = tmp_path / "v1.duckdb"
    build_v1(path)
    assert "status_reason" not in columns(path, "runs")
    assert columns(path, "compacted_steps") == []

    st = Store(path).init()
    assert st.schema_version() == SCHEMA_VERSION == 12
    assert {"status_reason", "compacted_through", "seq"} <= set(columns(path, "runs"))
    assert columns(path, "segments")[:5] == ["run_id", "segment", "first_step", "last_step", "status"]
    for table in STEP_TABLES:
        assert columns(path, f"compacted_{table}") == list(STEP_TABLES[table].names), table
    run = st.get_run("old-run")
    assert run is not None
    assert [run[k] for k in ("run_id", "family", "method", "preset", "seed", "config_json", "config_hash",
                             "lineage_json", "kind", "status", "run_dir")] == V1_ROW[:11]
    assert run["created_at"] == T0 and run["status_reason"] is None and run["compacted_through"] is None
    assert run["seq"] == 1  # existing runs numbered in their creation order
    # v1 counted steps from 0: its evaluation after step 4 is after step 5 since v12 (steps from 1)
    assert st.query("SELECT step, accuracy FROM eval_results WHERE run_id = 'old-run'") == [
        {"step": 5, "accuracy": 0.25}]

    st.set_status("old-run", "failed", "OOM at step 5")
    run = st.get_run("old-run")
    assert (run["status"], run["status_reason"]) == ("failed", "OOM at step 5")

    # the upgraded catalog works like a fresh one: new runs, views, list_runs
    st.register_run(RunRecord(run_id="new-run", family="fam", method="grpo", preset="p", seed=1, config={},
                              config_hash="h", kind="simulate"))
    listed = {r["run_id"]: r for r in st.list_runs()}
    assert st.get_run("new-run")["seq"] == 2
    assert listed["old-run"]["status_reason"] == "OOM at step 5"
    assert listed["new-run"]["status"] == "running" and listed["new-run"]["steps"] == 0
    # the old run's step logs (v1 wrote Parquet the same way) are visible, and compaction works on it
    w = st.writer("old-run")
    for step in range(1, 4):
        w.write_step(step, step_tables("old-run", step))
    assert st.query("SELECT count(*) AS n FROM steps WHERE run_id = 'old-run'") == [{"n": 3}]
    assert st.compact("old-run") == 3
    assert st.query("SELECT count(*) AS n, sum(sampled_rollouts) AS s FROM steps WHERE run_id = 'old-run'") == [
        {"n": 3, "s": 30}]
    assert st.get_run("old-run")["compacted_through"] == 3

    st.init()  # a second open finds the current version and changes nothing
    assert st.schema_version() == SCHEMA_VERSION and len(st.list_runs()) == 2
    assert st.query("SELECT count(*) AS n FROM steps WHERE run_id = 'old-run'") == [{"n": 3}]


V4_COLUMNS = {"steps": ["widened", "early_decided", "pilot_rollouts_saved", "survival"],
              "prompt_observations": ["wave", "rule"]}


def test_version_3_catalog_gains_the_strategy_columns_keeping_its_rows(tmp_path):
    """v4 (issue 7): the compacted tables gain the strategy columns; compacted v3 rows read them as NULL."""
    st = store_with_steps(tmp_path / "v3.duckdb", 2)
    assert st.compact("r") == 2
    files_from_zero(st.runs_root)
    con = duckdb.connect(str(st.path))
    as_version(con, 3)  # drops V4_COLUMNS (and later versions' columns)
    con.close()
    assert "survival" not in columns(st.path, "compacted_steps")

    st = Store(st.path).init()
    assert st.schema_version() == SCHEMA_VERSION
    for table in V4_COLUMNS:
        assert set(columns(st.path, f"compacted_{table}")) == set(STEP_TABLES[table].names), table
    assert st.query("SELECT count(*) AS n, sum(sampled_rollouts) AS s, count(survival) AS sv FROM steps") == [
        {"n": 2, "s": 20, "sv": 0}]
    assert st.query("SELECT count(*) AS n FROM decision_reasons") == [{"n": 0}]


def test_version_5_catalog_gains_buffer_replaced_keeping_its_rows(tmp_path):
    """v6 (issue 18, one live buffer entry per prompt): steps gain ``buffer_replaced``; compacted v5 rows and v5
    step files (written without the column) read it as NULL, new steps carry it."""
    st = store_with_steps(tmp_path / "v4.duckdb", 3)
    assert st.compact("r", through=2) == 2
    files_from_zero(st.runs_root)
    old_files = sorted((st.path.parent / "v4.duckdb.runs" / "r").glob("step-*/steps.parquet"))
    assert len(old_files) == 3
    for f in old_files:  # as a v5 writer wrote them: no buffer_replaced column (and no manifest before v5)
        # (nor v8's returned, nor v9's prior counts)
        pq.write_table(pq.read_table(f).drop_columns(["buffer_replaced", "returned", *PRIOR_STEPS]), f)
        (f.parent / "MANIFEST.json").unlink()
    con = duckdb.connect(str(st.path))
    as_version(con, 5)  # drops compacted_steps.buffer_replaced (and v7's, v8's and v9's columns, which v5 lacked too)
    con.close()

    st = Store(st.path).init()
    assert st.schema_version() == SCHEMA_VERSION
    assert columns(st.path, "compacted_steps") == list(STEP_TABLES["steps"].names)
    new = step_tables("r", 4)
    new["steps"] = pa.Table.from_pylist([{"run_id": "r", "step": 4, "sampled_rollouts": 10, "buffer_replaced": 7}],
                                        schema=STEP_TABLES["steps"])
    st.writer("r").write_step(4, new)
    assert st.query("SELECT step, buffer_replaced FROM steps ORDER BY step") == [
        {"step": 1, "buffer_replaced": None}, {"step": 2, "buffer_replaced": None},
        {"step": 3, "buffer_replaced": None}, {"step": 4, "buffer_replaced": 7}]
    assert st.query("SELECT count(*) AS n, sum(sampled_rollouts) AS s FROM step_costs") == [{"n": 4, "s": 40}]


PRIOR_STEPS = ["screened_by_prior", "prior_rollouts_saved"]
PRIOR_OBS = ["prior_useful", "prior_mean", "prior_evidence", "prior_observations"]
BAND_OBS = ["band_lower", "band_upper"]  # v10


def observation_tables(run_id: str, step: int, returned: bool) -> dict[str, pa.Table]:
    """A step with one pilot row: all 8 rollouts right, skipped as easy and evicted; back from the easy pool or not."""
    tables = step_tables(run_id, step)
    tables["steps"] = pa.Table.from_pylist([{"run_id": run_id, "step": step, "sampled_rollouts": 8, "band_lower": 0.125,
                                             "band_upper": 0.75, "returned": int(returned)}],
                                           schema=STEP_TABLES["steps"])
    tables["prompt_observations"] = pa.Table.from_pylist(
        [{"run_id": run_id, "step": step, "round": 1, "call": 0, "prompt_id": 40 + step, "stage": "pilot", "n": 8,
          "n_correct": 8.0, "p_hat": 1.0, "decision": "skipped_easy", "evicted": True, "lag": 0, "wave": 0,
          "rule": "band", "returned": returned}], schema=STEP_TABLES["prompt_observations"])
    return tables


def test_version_7_catalog_gains_returned_and_older_rows_read_as_not_returned(tmp_path):
    """v8 (issue 30, easy_pool eviction): steps gain ``returned`` (a count, NULL in older rows) and observations a
    ``returned`` flag, which compacted v7 rows and v7 step files (written without the column) read as false."""
    st = Store(tmp_path / "v7.duckdb").init()
    st.register_run(RunRecord(run_id="r", family="f", method="pc", preset="p", seed=0, config={}, config_hash="h",
                              kind="simulate"))
    w = st.writer("r")
    for step in range(1, 4):
        w.write_step(step, observation_tables("r", step, returned=False))
    assert st.compact("r", through=2) == 2
    files_from_zero(st.runs_root)  # as a v7 (v8) writer numbered them: from 0
    for table, cols in (("steps", PRIOR_STEPS), ("prompt_observations", PRIOR_OBS + BAND_OBS)):  # as a v7 writer wrote them:
        for f in sorted((st.runs_root / "r").glob(f"step-*/{table}.parquet")):  # no returned, no prior columns
            pq.write_table(pq.read_table(f).drop_columns(["returned", *cols]), f)
    for m in (st.runs_root / "r").glob("step-*/MANIFEST.json"):
        m.unlink()
    con = duckdb.connect(str(st.path))
    as_version(con, 7)  # drops v8's returned, v9's prior, v10's evidence and v11's band columns
    con.close()
    reader = Store(st.path)  # a v7 catalog read: upgraded first (steps from 1); the step files bring the column
    assert reader.query("SELECT step, returned FROM prompt_observations ORDER BY step") == [
        {"step": s, "returned": False} for s in range(1, 4)]

    st = Store(st.path).init()
    assert st.schema_version() == SCHEMA_VERSION
    for table in ("steps", "prompt_observations"):
        assert columns(st.path, f"compacted_{table}") == list(STEP_TABLES[table].names)
    st.writer("r").write_step(4, observation_tables("r", 4, returned=True))
    for compacted_through in (2, 4):  # compacted v7 rows + old and new step files, then everything compacted
        if compacted_through == 4:
            assert st.compact("r") == 2
        assert st.get_run("r")["compacted_through"] == compacted_through
        assert st.query("SELECT step, returned FROM prompt_observations ORDER BY step") == [
            {"step": 1, "returned": False}, {"step": 2, "returned": False}, {"step": 3, "returned": False},
            {"step": 4, "returned": True}]
        assert st.query("SELECT step, returned FROM steps ORDER BY step") == [
            {"step": 1, "returned": None}, {"step": 2, "returned": None}, {"step": 3, "returned": None},
            {"step": 4, "returned": 1}]
        reasons = {r["step"]: r["reason"] for r in st.query("SELECT step, reason FROM decision_reasons")}
        assert reasons[1] == "p_hat=1 > band upper 0.75; evicted: p_hat=1 reached p_solve"
        assert reasons[4] == "returned from the easy pool; " + reasons[1]
        assert st.query("SELECT count(*) AS n FROM pass_rate_history WHERE returned") == [{"n": 1}]


def test_version_8_catalog_gains_the_prior_columns_and_older_rows_read_null(tmp_path):
    """v9 (issue 42, the history prior): steps gain its counts and observations a skipped prompt's posterior; compacted
    v8 rows and v8 step files (written without the columns) read NULL, and a skipped row reads its reason."""
    st = Store(tmp_path / "v8.duckdb").init()
    st.register_run(RunRecord(run_id="r", family="f", method="pc", preset="p", seed=0, config={}, config_hash="h",
                              kind="simulate"))
    w = st.writer("r")
    for step in range(1, 4):
        w.write_step(step, observation_tables("r", step, returned=False))
    assert st.compact("r", through=2) == 2
    files_from_zero(st.runs_root)  # as a v7 (v8) writer numbered them: from 0
    for table, cols in (("steps", PRIOR_STEPS), ("prompt_observations", PRIOR_OBS + BAND_OBS)):  # as a v8 writer wrote them
        for f in sorted((st.runs_root / "r").glob(f"step-*/{table}.parquet")):
            pq.write_table(pq.read_table(f).drop_columns(cols), f)
    for m in (st.runs_root / "r").glob("step-*/MANIFEST.json"):
        m.unlink()
    con = duckdb.connect(str(st.path))
    as_version(con, 8)  # drops v9's prior, v10's evidence and v11's band columns
    con.close()
    assert "prior_useful" not in columns(st.path, "compacted_prompt_observations")

    st = Store(st.path).init()
    assert st.schema_version() == SCHEMA_VERSION == 12
    for table in ("steps", "prompt_observations"):
        assert columns(st.path, f"compacted_{table}") == list(STEP_TABLES[table].names)
    tables = observation_tables("r", 4, returned=False)
    tables["steps"] = pa.Table.from_pylist([{"run_id": "r", "step": 4, "sampled_rollouts": 0, "band_lower": 0.125,
                                             "band_upper": 0.75, "screened_by_prior": 1, "prior_rollouts_saved": 16}],
                                           schema=STEP_TABLES["steps"])
    tables["prompt_observations"] = pa.Table.from_pylist(
        [{"run_id": "r", "step": 4, "round": 1, "call": 0, "prompt_id": 43, "stage": "pilot", "n": 0,
          "n_correct": 0.0, "p_hat": 0.0, "decision": "screened_by_prior", "evicted": False, "lag": 0, "wave": 0,
          "rule": "prior_easy", "returned": False, "prior_useful": 0.031, "prior_mean": 0.968, "prior_evidence": 6.25,
          "prior_observations": 11}], schema=STEP_TABLES["prompt_observations"])
    st.writer("r").write_step(4, tables)
    for compacted_through in (2, 4):
        if compacted_through == 4:
            assert st.compact("r") == 2
        assert st.query("SELECT step, screened_by_prior AS s, prior_rollouts_saved AS r FROM steps ORDER BY step") == [
            {"step": 1, "s": None, "r": None}, {"step": 2, "s": None, "r": None}, {"step": 3, "s": None, "r": None},
            {"step": 4, "s": 1, "r": 16}]
        assert st.query("SELECT step, prior_useful, prior_observations FROM prompt_observations ORDER BY step") == [
            {"step": s, "prior_useful": None, "prior_observations": None} for s in range(1, 4)] + [
            {"step": 4, "prior_useful": 0.031, "prior_observations": 11}]
        reasons = {r["step"]: r["reason"] for r in st.query("SELECT step, reason FROM decision_reasons")}
        assert reasons[1] == "p_hat=1 > band upper 0.75; evicted: p_hat=1 reached p_solve"
        assert reasons[4] == ("skipped by prior, easy side: P(pilot in band) 0.03 from 11 observations "
                              "(discounted 6.2 rollouts), posterior mean 0.97")


def _pilot_row(step: int, prompt: int, n: int, correct: float, decision: str, wave: int, rule: str,
               evidence: tuple[int, float] | None) -> dict:
    n_ev, c_ev = evidence or (n, correct)
    return {"run_id": "r", "step": step, "round": 1, "call": wave, "prompt_id": prompt, "stage": "pilot", "n": n,
            "n_correct": correct, "p_hat": c_ev / n_ev, "decision": decision, "evicted": False, "lag": 0, "wave": wave,
            "rule": rule, "returned": False, "evidence_n": n_ev if evidence else None}


def test_version_9_catalog_gains_evidence_and_every_later_first_wave_has_its_row(tmp_path):
    """v10 (issue 52, every pilot wave its own row): a v9 row of a later wave pooled both waves into n and has no
    evidence (read as n); a v10 step has the first wave's own ``continued`` row and the later wave's row with its own
    n and the decision's evidence. decision_reasons reads one decision with its evidence from both; pass_rate_history
    has every v10 first wave with its true n and n_correct (a v9 pooled first wave has no row of its own)."""
    st = Store(tmp_path / "v9.duckdb").init()
    st.register_run(RunRecord(run_id="r", family="f", method="pc", preset="p", seed=0, config={}, config_hash="h",
                              kind="simulate"))
    old = [_pilot_row(1, 40, 8, 4.0, "kept", 1, "band", None), _pilot_row(1, 41, 2, 2.0, "skipped_easy", 0,
                                                                            "early_wave", None)]
    tables = observation_tables("r", 1, returned=False)
    tables["prompt_observations"] = pa.Table.from_pylist(old, schema=STEP_TABLES["prompt_observations"])
    st.writer("r").write_step(1, tables)
    assert st.compact("r", through=1) == 1
    files_from_zero(st.runs_root)  # as a v9 writer numbered it: from 0
    for f in sorted((st.runs_root / "r").glob("step-*/prompt_observations.parquet")):  # as a v9 writer wrote them
        pq.write_table(pq.read_table(f).drop_columns(["evidence_n"]), f)
    for m in (st.runs_root / "r").glob("step-*/MANIFEST.json"):
        m.unlink()
    con = duckdb.connect(str(st.path))
    as_version(con, 9)
    con.close()
    assert "evidence_n" not in columns(st.path, "compacted_prompt_observations")

    st = Store(st.path).init()
    assert st.schema_version() == SCHEMA_VERSION == 12
    assert columns(st.path, "compacted_prompt_observations") == list(STEP_TABLES["prompt_observations"].names)
    new = [_pilot_row(2, 50, 2, 1.0, "continued", 0, "none", None),
           _pilot_row(2, 50, 6, 2.0, "kept", 1, "band", (8, 3.0))]
    tables = observation_tables("r", 2, returned=False)
    tables["prompt_observations"] = pa.Table.from_pylist(new, schema=STEP_TABLES["prompt_observations"])
    st.writer("r").write_step(2, tables)
    for compacted_through in (1, 2):
        if compacted_through == 2:
            assert st.compact("r") == 1
        reasons = st.query("SELECT step, prompt_id, n, p_hat, decision, reason FROM decision_reasons ORDER BY step, "
                           "prompt_id")
        assert [(r["step"], r["prompt_id"], r["n"], r["decision"]) for r in reasons] == [
            (1, 40, 8, "kept"), (1, 41, 2, "skipped_easy"), (2, 50, 8, "kept")]
        assert reasons[0]["reason"] == "p_hat=0.5 in band [0.125, 0.75]"
        assert reasons[2]["reason"] == "p_hat=0.375 in band [0.125, 0.75]"  # 1 of 2, then 2 of 6
        first = st.query("SELECT step, prompt_id, n, n_correct, evidence_n FROM pass_rate_history WHERE wave = 0 "
                         "ORDER BY step, prompt_id")
        assert first == [{"step": 1, "prompt_id": 41, "n": 2, "n_correct": 2.0, "evidence_n": 2},
                         {"step": 2, "prompt_id": 50, "n": 2, "n_correct": 1.0, "evidence_n": 2}]
        assert st.query("SELECT sum(n) AS n FROM pass_rate_history WHERE step = 2") == [{"n": 8}]
        parts = st.query("SELECT screened_out, early_screen FROM rollout_breakdown")
        assert parts == [{"screened_out": 0, "early_screen": 2}]


def test_newer_catalog_is_refused_and_left_unchanged(tmp_path):
    st = Store(tmp_path / "future.duckdb").init()
    st.register_run(RunRecord(run_id="r", family="f", method="pc", preset="p", seed=0, config={}, config_hash="h",
                              kind="simulate"))
    con = duckdb.connect(str(st.path))
    con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [str(SCHEMA_VERSION + 1)])
    con.execute("CREATE TABLE future_only (x INTEGER)")
    con.execute("INSERT INTO future_only VALUES (42)")
    con.close()
    before = st.query("SELECT * FROM runs")

    with pytest.raises(StoreError, match="newer") as exc:
        Store(st.path).init()
    assert str(SCHEMA_VERSION + 1) in str(exc.value) and "Fix" in str(exc.value)

    assert st.schema_version() == SCHEMA_VERSION + 1
    assert st.query("SELECT * FROM runs") == before
    assert st.query("SELECT x FROM future_only") == [{"x": 42}]
    assert "status_reason" in columns(st.path, "runs")


def test_catalog_without_an_upgrade_path_is_refused(tmp_path):
    path = tmp_path / "v0.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
    con.execute("INSERT INTO meta VALUES ('schema_version', '0')")
    con.close()
    with pytest.raises(StoreError, match="no upgrade path from schema version 0"):
        Store(path).init()
    con = duckdb.connect(str(path), read_only=True)
    assert con.execute("SELECT value FROM meta").fetchall() == [("0",)]
    con.close()


def view_definitions(path) -> dict[str, str]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return dict(con.execute("SELECT view_name, sql FROM duckdb_views() WHERE NOT internal").fetchall())
    finally:
        con.close()


def test_version_4_catalog_is_upgraded_when_read_to_file_free_views(tmp_path):
    """v5 (issue 18): a v4 catalog's views embed an absolute glob over the step files. Reading it (the `sql` path)
    never uses those views: since v12 (steps from 1) a catalog that counts steps from 0 is upgraded before it is
    read, which replaces them with views that name no file."""
    st = store_with_steps(tmp_path / "v4.duckdb", 3)
    files_from_zero(st.runs_root)
    con = duckdb.connect(str(st.path))
    glob = str(st.runs_root) + "/*/step-*/steps.parquet"
    con.execute(f"CREATE OR REPLACE VIEW steps AS SELECT * FROM read_parquet('{glob}', union_by_name=true)")
    con.execute("DROP VIEW rollout_breakdown")
    as_version(con, 4)
    con.close()

    reader = Store(st.path)
    assert reader.query("SELECT count(*) AS n, sum(sampled_rollouts) AS s, min(step) AS first FROM steps") == [
        {"n": 3, "s": 30, "first": 1}]
    assert reader.query("SELECT steps FROM rollout_breakdown") == [{"steps": 3}]  # a view v4 lacked
    assert reader.schema_version() == SCHEMA_VERSION  # upgraded by the read
    views = view_definitions(st.path)
    assert "rollout_breakdown" in views
    assert not any("read_parquet" in sql or str(st.runs_root) in sql for sql in views.values()), views


def test_the_latest_run_is_the_last_registered_whatever_the_clocks_say(new_store, monkeypatch):
    """Issue 31: a re-run on a machine whose clock is a day behind is still the newest attempt of its (family,
    method, seed): registration order is the store's own sequence, not created_at."""
    from pc_pipelines.store import run_tables

    st = new_store
    rec = dict(family="fam", method="grpo", preset="p", seed=0, config={}, config_hash="h", kind="simulate")
    st.register_run(RunRecord(run_id="first", **rec))
    real_now = run_tables._now
    monkeypatch.setattr(run_tables, "_now", lambda: real_now() - dt.timedelta(days=1))
    st.register_run(RunRecord(run_id="second", **rec))  # created "yesterday"
    runs = {r["run_id"]: r for r in st.query("SELECT run_id, seq, created_at FROM runs")}
    assert runs["second"]["created_at"] < runs["first"]["created_at"]
    assert (runs["first"]["seq"], runs["second"]["seq"]) == (1, 2)
    from pc_pipelines.reports import load_curves

    st.add_eval_results([{"run_id": r, "step": 0, "benchmark": "b", "accuracy": 0.5} for r in ("first", "second")])
    assert [c.run_id for c in load_curves(st, "fam")] == ["second"]
    assert [c.run_id for c in load_curves(st, "fam", latest_only=False)] == ["first", "second"]


def test_version_10_catalog_reads_each_rows_own_band_from_its_round(tmp_path):
    """v11 (issue 55): a PC pilot row holds the band that decided it. Rows a v10 writer wrote (compacted and in step
    files) hold none; after the upgrade decision_reasons derives each one's band from its round (the config's band
    widened to the round's widened rows), the very band and text a v11 writer records."""
    from pc_pipelines.config import resolve
    from pc_pipelines.simulator import record_simulation

    st = Store(tmp_path / "v9.duckdb").init()
    cfg = resolve("simulator", {"allocator.train_batch": 16, "sim.num_prompts": 1500, "sim.difficulty_spread": 3.0,
                                "allocator.band_strategy": "adaptive", "allocator.pilot_strategy": "sequential",
                                "allocator.pilot_wave": 4}, method="pc", seed=3)
    assert len(list(record_simulation(cfg, st, 20, run_id="pc", compact_every=8))) == 20
    q = "SELECT step, round, prompt_id, stage, band_lower, band_upper, reason FROM decision_reasons ORDER BY ALL"
    recorded = st.query(q)
    assert st.get_run("pc")["compacted_through"] is not None  # both compacted rows and step files
    assert sum(r["band_upper"] is not None for r in recorded) > 100
    assert any("widened band" in r["reason"] for r in recorded)
    files_from_zero(st.runs_root)  # as a v10 writer numbered them: from 0
    for f in sorted((st.runs_root / "pc").glob("step-*/prompt_observations.parquet")):  # as a v9 writer wrote them
        pq.write_table(pq.read_table(f).drop_columns(BAND_OBS), f)
    for m in (st.runs_root / "pc").glob("step-*/MANIFEST.json"):
        m.unlink()
    con = duckdb.connect(str(st.path))
    as_version(con, 10)  # drops v11's band columns (and the compacted rows' bands with them)
    con.close()
    assert "band_lower" not in columns(st.path, "compacted_prompt_observations")
    assert Store(st.path).query(q) == recorded  # read: upgraded first (steps from 1), each row's band derived
    st = Store(st.path).init()
    assert st.schema_version() == SCHEMA_VERSION
    assert columns(st.path, "compacted_prompt_observations") == list(STEP_TABLES["prompt_observations"].names)
    assert st.query("SELECT count(*) AS n FROM prompt_observations WHERE band_lower IS NOT NULL") == [{"n": 0}]
    assert st.query(q) == recorded


def test_version_11_store_is_renumbered_once_from_one_and_loses_nothing(tmp_path, monkeypatch):
    """v12 (issue 55, one step numbering): a store v11 wrote counts steps from 0 (files, compacted rows, watermark,
    eval_results with -1 before training, checkpoints, segment bounds). Opened, even only to read, it is upgraded
    once: every step one more, each row where it was, the step files renumbered (a crash halfway through leaves a
    state the next open finishes), and a second open changes nothing."""
    from pc_pipelines.config import resolve
    from pc_pipelines.simulator import record_simulation
    from pc_pipelines.store import steplog
    from tests.support.old_numbering import count_from_zero

    st = Store(tmp_path / "v11.duckdb").init()
    cfg = resolve("simulator", {"allocator.train_batch": 16, "sim.num_prompts": 600, "training.eval_every": 4},
                  method="pc", seed=5)
    assert len(list(record_simulation(cfg, st, 12, run_id="pc", compact_every=None))) == 12
    st.compact("pc", through=6)  # steps 1..6 in the catalog, 7..12 in step files
    st.plan_segments("pc", [(1, 6), (7, 12)])
    st.add_checkpoint("pc", 6, "/ckpt/step-00000006")
    queries = {
        "steps": "SELECT step, sampled_rollouts, trained_rollouts FROM steps ORDER BY step",
        "obs": "SELECT step, count(*) AS n, sum(n) AS rollouts FROM prompt_observations GROUP BY step ORDER BY step",
        "buffer": "SELECT step, entry_id, born FROM buffer_state ORDER BY step, entry_id",
        "evictions": "SELECT step, prompt_id FROM evictions ORDER BY ALL",
        "evals": "SELECT step, benchmark, accuracy FROM eval_results ORDER BY ALL",
        "curve": "SELECT step, accuracy, cumulative_sampled, missing_steps FROM eval_curve ORDER BY step",
        "costs": "SELECT step, cumulative_sampled, missing_steps FROM step_costs ORDER BY step",
        "checkpoints": "SELECT step, path FROM checkpoints",
        "segments": "SELECT segment, first_step, last_step FROM segments ORDER BY segment",
        "watermark": "SELECT compacted_through FROM runs",
    }
    now = {k: st.query(q) for k, q in queries.items()}
    assert [r["step"] for r in now["steps"]] == list(range(1, 13))
    assert [r["step"] for r in now["curve"]] == [0, 4, 8, 12]  # 0: before training; every 4th step; the last
    assert all(r["missing_steps"] == 0 for r in now["curve"] + now["costs"])
    assert now["watermark"] == [{"compacted_through": 6}]
    assert len(now["buffer"]) > 0 and min(r["born"] for r in now["buffer"]) >= 1

    count_from_zero(st.path, st.runs_root)  # what the v11 writer left
    con = duckdb.connect(str(st.path), read_only=True)
    assert con.execute("SELECT min(step), max(step) FROM eval_results").fetchall() == [(-1, 11)]
    assert con.execute("SELECT min(step), max(step) FROM compacted_steps").fetchall() == [(0, 5)]
    assert con.execute("SELECT compacted_through FROM runs").fetchall() == [(5,)]
    con.close()
    assert [n for n, _ in steplog.list_step_dirs(st.runs_root / "pc")] == list(range(12))  # leftovers 0..5 too

    # a crash in the middle of renumbering the files: the highest step written anew, its old copy still there
    real_rmtree = steplog.shutil.rmtree
    monkeypatch.setattr(steplog.shutil, "rmtree", lambda *a, **k: (_ for _ in ()).throw(OSError("killed")))
    with pytest.raises(OSError, match="killed"):
        steplog.renumber_step_dirs(st.runs_root / "pc")
    monkeypatch.setattr(steplog.shutil, "rmtree", real_rmtree)
    assert [n for n, _ in steplog.list_step_dirs(st.runs_root / "pc")] == list(range(13))

    reader = Store(st.path)
    assert {k: reader.query(q) for k, q in queries.items()} == now  # read: upgraded first, nothing lost or moved
    assert reader.schema_version() == SCHEMA_VERSION
    dirs = steplog.list_step_dirs(st.runs_root / "pc")
    assert [n for n, _ in dirs] == list(range(1, 13))
    assert all(steplog.counts_from_one(d) and steplog.verify_step_dir(d) is None for _, d in dirs)
    assert Store(st.path).init().schema_version() == SCHEMA_VERSION  # once: a second open renumbers nothing
    assert [n for n, _ in steplog.list_step_dirs(st.runs_root / "pc")] == list(range(1, 13))
    assert {k: Store(st.path).query(q) for k, q in queries.items()} == now
    assert Store(st.path).check().problems == []


def test_version_11_store_with_evaluations_and_checkpoints_at_adjacent_steps_is_upgraded(tmp_path):
    """A v11 store evaluated at adjacent steps (a sampled-rollout cadence evaluates after several steps in a row):
    moving step 20 onto 21 while 21 is still there broke the upgrade's UPDATE on the primary key, so such a store
    (the small-groups study's) could not even be read. Every evaluation and checkpoint moves by one, none lost."""
    from pc_pipelines.config import resolve
    from pc_pipelines.simulator import record_simulation
    from tests.support.old_numbering import count_from_zero

    st = Store(tmp_path / "v11.duckdb").init()
    cfg = resolve("simulator", {"allocator.train_batch": 16, "sim.num_prompts": 600, "training.eval_every": 1},
                  method="grpo", seed=5)
    assert len(list(record_simulation(cfg, st, 6, run_id="g", compact_every=None))) == 6
    for step in (3, 4, 5):
        st.add_checkpoint("g", step, f"/ckpt/step-{step}")
    evals = st.query("SELECT step, benchmark, accuracy FROM eval_results ORDER BY ALL")
    assert [r["step"] for r in evals] == [0, 1, 2, 3, 4, 5, 6]
    count_from_zero(st.path, st.runs_root)
    con = duckdb.connect(str(st.path))
    assert con.execute("SELECT list(step ORDER BY step) FROM eval_results").fetchall() == [([-1, 0, 1, 2, 3, 4, 5],)]
    # DuckDB checks a key UPDATE one vector (2,048 rows) at a time: the failure needs adjacent steps in two vectors,
    # so 2,500 more evaluations of one benchmark at consecutive steps (another run's, as a long study has)
    con.execute("INSERT INTO runs SELECT * REPLACE ('long' AS run_id, 10 ** 6 AS seq) FROM runs WHERE run_id = 'g'")
    con.execute("INSERT INTO eval_results SELECT 'long', i - 1, 'b', 1, 1.0, i / 2500, 1, now() FROM range(2500) t(i)")
    con.close()
    reader = Store(st.path)
    assert reader.query("SELECT step, benchmark, accuracy FROM eval_results WHERE run_id = 'g' ORDER BY ALL") == evals
    long = reader.query("SELECT count(*) AS n, min(step) AS lo, max(step) AS hi, sum(accuracy) AS total "
                        "FROM eval_results WHERE run_id = 'long'")
    assert long == [{"n": 2500, "lo": 0, "hi": 2499, "total": pytest.approx(sum(range(2500)) / 2500)}]
    assert [r["step"] for r in reader.query("SELECT step FROM checkpoints ORDER BY step")] == [3, 4, 5]
    assert reader.schema_version() == SCHEMA_VERSION
