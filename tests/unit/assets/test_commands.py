"""The `pilot-commit sql` commands the assets' metadata shows (issue 55 point 7): on short lines, so the code block
does not widen the segment page's metadata table ~2,200 px past the screen (the 306-character query was one line),
the same query for DuckDB, and a paste that runs."""

import subprocess

import pytest

from pc_pipelines.reports.compare import compare_query
from pc_pipelines.reports.run_plot import run_progress_query
from pc_pipelines_dagster.assets.commands import WIDTH, sql_command, sql_lines

QUERIES = {
    "segment": run_progress_query("bench-pc-s0-1a2b3c4d"),
    "family": compare_query("bench", None),
    "runs": compare_query(None, ["a", "b FROM x, y ORDER BY z"]),  # clause words and commas inside a literal
}


@pytest.mark.parametrize("name", QUERIES)
def test_each_line_is_short_and_the_query_is_the_same(name):
    query = QUERIES[name]
    assert len(query) > 2 * WIDTH  # the one long line
    wrapped = sql_lines(query)
    lines = wrapped.splitlines()
    assert len(lines) >= 4 and max(len(ln) for ln in lines) <= WIDTH + 10, lines
    assert " ".join(wrapped.split()) == " ".join(query.split())  # only spaces became newlines and indents
    assert [ln.split(" ")[0] for ln in lines if not ln.startswith(" ")][:2] == ["SELECT", "FROM"]


def test_a_literal_is_left_whole():
    wrapped = sql_lines(QUERIES["runs"])
    assert "'b FROM x, y ORDER BY z'" in wrapped
    assert "OVER (PARTITION BY s.run_id ORDER BY s.step)" in wrapped  # a clause inside parentheses stays inline


def test_the_command_pasted_into_bash_runs_the_query(new_store):
    query = QUERIES["segment"]
    command = sql_command(new_store.path, query)
    lines = command.splitlines()
    assert lines[0].endswith(f"sql --store {new_store.path} \"") and lines[1].startswith("SELECT ")
    assert max(len(ln) for ln in lines[1:]) <= WIDTH + 10
    out = subprocess.run(["bash", "-c", command + " --json"], check=False, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"  # an empty store: the query ran (a broken paste exits 2 or finds no table)
    # The same words read back by bash: the program replaced by a function printing its 4th argument, the query.
    program = command.split(" ", 1)[0]
    shown = f"show() {{ printf '%s' \"$4\"; }}; show{command.removeprefix(program)}"
    read_back = subprocess.run(["bash", "-c", shown], check=False, capture_output=True, text=True, timeout=30)
    assert read_back.stdout == "\n" + sql_lines(query)
