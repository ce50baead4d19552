"""The catalog's schema checked against its stored version before any migration runs (issue 40):
:func:`~pc_pipelines.store.schema.schema_problem` on the columns each version had."""

from __future__ import annotations

import duckdb

from pc_pipelines.store import schema
from pc_pipelines.store.schema import SCHEMA_VERSION, catalog_columns, matching_version, schema_problem


def fresh_columns() -> dict[str, set[str]]:
    """The tables and columns of a catalog made by today's DDL."""
    con = duckdb.connect(":memory:")
    for sql in schema.DDL:
        con.execute(sql)
    out: dict[str, set[str]] = {}
    for table, column in con.execute("SELECT table_name, column_name FROM information_schema.columns").fetchall():
        out.setdefault(table, set()).add(column)
    return out


def test_the_current_version_is_what_a_fresh_catalog_has():
    assert catalog_columns(SCHEMA_VERSION) == fresh_columns()
    assert schema_problem([str(SCHEMA_VERSION)], fresh_columns()) is None
    assert schema_problem(None, {}) is None  # a new store


def test_version_1_is_what_the_first_release_wrote():
    con = duckdb.connect(":memory:")
    con.execute(schema.DDL_V1_RUNS)
    v1_runs = {r[0] for r in con.execute("SELECT column_name FROM information_schema.columns").fetchall()}
    assert catalog_columns(1)["runs"] == v1_runs
    assert set(catalog_columns(1)) == {"meta", "runs", "checkpoints", "eval_results"}
    assert "segments" not in catalog_columns(2) and "segments" in catalog_columns(3)
    assert "seq" not in catalog_columns(6)["runs"] and "seq" in catalog_columns(7)["runs"]


def test_each_version_matches_its_own_columns_only():
    for v in range(1, SCHEMA_VERSION + 1):
        cols = catalog_columns(v)
        assert schema_problem([str(v)], cols) is None, v
        # v5 changed views only (v4's columns are v5's), v12 step numbers only (v11's columns are v12's)
        assert matching_version(cols) == {4: 5, 11: 12}.get(v, v)
        if matching_version(cols) < SCHEMA_VERSION:  # v11's columns are v12's
            what, match = schema_problem([str(v)], fresh_columns())
            assert what.startswith(f"its schema does not match its version {v}: it has "), what
            assert match == SCHEMA_VERSION


def test_what_is_wrong_is_named():
    cols = fresh_columns()
    assert schema_problem(["abc"], cols) == (
        f"its schema version 'abc' is not a whole number (pc-pipelines writes 1 to {SCHEMA_VERSION})", SCHEMA_VERSION)
    assert schema_problem(["8.0"], cols)[0].startswith("its schema version '8.0' is not a whole number")
    assert schema_problem(["x" * 500], cols)[0].startswith("its schema version 'xxxx")
    assert len(schema_problem(["x" * 500], cols)[0]) < 200  # the value is cut
    assert schema_problem([], cols) == ("its meta table has no schema_version row", SCHEMA_VERSION)
    assert schema_problem(None, {k: v for k, v in cols.items() if k != "meta"})[0].startswith(
        "it has the store's tables (checkpoints, compacted_buffer_state, compacted_evictions) but no meta table")
    assert "no upgrade path from schema version 0" in schema_problem(["0"], {"meta": {"key", "value"}})[0]
    assert schema_problem([str(SCHEMA_VERSION + 1)], {"meta": {"key", "value"}}) is None  # newer: refused elsewhere
    v8 = catalog_columns(8)
    no_seq = {**v8, "runs": v8["runs"] - {"seq"}}
    assert schema_problem(["8"], no_seq) == ("its schema does not match its version 8: it lacks runs.seq", None)
    assert schema_problem(["6"], v8) == (
        "its schema does not match its version 6: it has compacted_prompt_observations.returned (version 8), "
        "compacted_steps.returned (version 8), runs.seq (version 7)", 8)
    extra = {**v8, "notes": {"x"}, "runs": v8["runs"] | {"my_tag"}}  # tables and columns of no version: allowed
    assert schema_problem(["8"], extra) is None
