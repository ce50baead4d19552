"""`pilot-commit sql` tells a write attempt from a plain SQL error by the statement, not by DuckDB's wording (which
changes between releases: 2.0.1 answers a COPY onto the catalog with a binder error naming neither read-only nor a
permission)."""

import pytest

from pc_pipelines.cli.store_commands import writing_statement


@pytest.mark.parametrize("query", [
    "COPY runs TO 'x.csv'", "copy (select 1) to 'x'", "  EXPORT DATABASE 'd'", "ATTACH 'o.duckdb' AS o",
    "INSTALL httpfs", "LOAD httpfs", "SET enable_external_access = true", "DELETE FROM runs",
    "CREATE TABLE main.evil AS SELECT 1", "CHECKPOINT; DELETE FROM runs", "SELECT 1; DROP VIEW steps",
    "-- a comment\nCOPY runs TO 'x'", "/* c */ INSERT INTO runs VALUES (1)", "PRAGMA enable_profiling",
])
def test_writing_statements_are_recognised(query):
    assert writing_statement(query)


@pytest.mark.parametrize("query", [
    "SELECT * FROM runs", "WITH a AS (SELECT 1) SELECT * FROM a", "DESCRIBE steps", "SUMMARIZE runs",
    "EXPLAIN SELECT 1", "CREATE TEMP VIEW v AS SELECT 1; SELECT * FROM v", "create temporary view v as select 1",
    "SELECT 'COPY runs TO x' AS s", "-- DELETE FROM runs\nSELECT 1", "", " ; ",
])
def test_reads_are_not_writing_statements(query):
    assert not writing_statement(query)
