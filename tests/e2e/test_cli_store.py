"""`pilot-commit simulate --store`, `runs`, `sql`, `report` and `presets` as a user runs them: the installed
entry point, real processes, real output."""

from __future__ import annotations

import csv
import io
import json
from functools import partial

import pytest
from pilot_cli import run_cli

pytestmark = pytest.mark.e2e

SMALL = ["--prompts", "5000", "--steps", "30", "--train-batch", "32", "--n", "16"]
METHODS = ("grpo", "dapo", "pc")


run = partial(run_cli, check_rc=0)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> dict:
    """Three runs recorded through the CLI, plus the same three simulated without a store."""
    path = tmp_path_factory.mktemp("cli-store") / "runs.duckdb"
    recorded, plain = {}, {}
    for m in METHODS:
        recorded[m] = [json.loads(ln) for ln in
                       run("simulate", "--store", str(path), "--method", m, *SMALL, "--json").stdout.splitlines()]
        plain[m] = [json.loads(ln) for ln in run("simulate", "--method", m, *SMALL, "--json").stdout.splitlines()]
    return {"path": str(path), "recorded": recorded, "plain": plain}


def runs_json(path: str) -> list[dict]:
    return json.loads(run("runs", "--store", path, "--json").stdout)


def test_simulate_store_output_matches_a_plain_simulation(store):
    for m in METHODS:
        assert len(store["recorded"][m]) == 30
        assert store["recorded"][m] == store["plain"][m], m  # recording changes nothing about the run


def test_runs_lists_three_finished_runs_with_their_costs(store):
    runs = runs_json(store["path"])
    assert sorted(r["method"] for r in runs) == sorted(METHODS)
    for r in runs:
        m = r["method"]
        assert r["steps"] == 30
        assert r["status"] == "finished"
        assert r["family"] == "sim" and r["seed"] == 0
        assert r["cumulative_sampled"] == sum(s["sampled_rollouts"] for s in store["plain"][m])
        assert r["cumulative_sampled"] == store["plain"][m][-1]["cumulative_sampled"]
        assert r["cumulative_trained"] == store["plain"][m][-1]["cumulative_trained"]
        assert r["run_id"].startswith(f"sim-{m}-s0-")
    # the table form shows the same
    table = run("runs", "--store", store["path"]).stdout
    assert "(3 rows)" in table
    for r in runs:
        line = next(ln for ln in table.splitlines() if ln.startswith(r["run_id"]))
        assert line.split()[-4:] == ["30", str(r["cumulative_sampled"]), str(r["cumulative_trained"]), "finished"]


QUERY = ("SELECT r.method, count(*) AS steps, sum(s.sampled_rollouts) AS sampled, max(s.step) AS last "
         "FROM steps s JOIN runs r USING (run_id) GROUP BY r.method ORDER BY r.method")


def expected_rows(store) -> list[dict]:
    return [{"method": m, "steps": 30, "sampled": sum(s["sampled_rollouts"] for s in store["plain"][m]), "last": 30}
            for m in sorted(METHODS)]


def test_sql_json(store):
    assert json.loads(run("sql", "--store", store["path"], QUERY, "--json").stdout) == expected_rows(store)


def test_sql_csv(store):
    out = run("sql", "--store", store["path"], QUERY, "--csv").stdout
    rows = list(csv.DictReader(io.StringIO(out)))
    assert out.splitlines()[0] == "method,steps,sampled,last"
    assert [{k: (v if k == "method" else int(v)) for k, v in r.items()} for r in rows] == expected_rows(store)


def test_sql_table(store):
    lines = run("sql", "--store", store["path"], QUERY).stdout.splitlines()
    assert lines[0].split() == ["method", "steps", "sampled", "last"]
    assert set(lines[1]) <= {"-", " "}
    body = [ln.split() for ln in lines[2:5]]
    assert body == [[r["method"], "30", str(r["sampled"]), "30"] for r in expected_rows(store)]
    assert lines[5] == "(3 rows)"


def test_sql_null_and_views(store):
    out = json.loads(run("sql", "--store", store["path"],
                         "SELECT count(*) AS n, count(loss) AS with_loss FROM steps", "--json").stdout)
    assert out == [{"n": 90, "with_loss": 0}]  # simulated runs have no loss
    out = run("sql", "--store", store["path"], "SELECT NULL AS x, 1.5 AS y", "--csv").stdout
    assert out.splitlines() == ["x,y", ",1.5"]
    costs = json.loads(run("sql", "--store", store["path"],
                           "SELECT r.method, max(c.cumulative_sampled) AS c FROM step_costs c "
                           "JOIN runs r USING (run_id) GROUP BY ALL ORDER BY 1", "--json").stdout)
    assert costs == [{"method": r["method"], "c": r["sampled"]} for r in expected_rows(store)]


def test_sql_bad_query_shows_duckdbs_message_without_traceback(store):
    out = run("sql", "--store", store["path"], "SELECT no_such_column FROM steps", check_rc=None)
    assert out.returncode != 0
    assert "no_such_column" in out.stderr and "Binder Error" in out.stderr
    assert "Traceback" not in out.stderr and out.stdout == ""
    out = run("sql", "--store", store["path"], "SELEC 1", check_rc=None)
    assert out.returncode != 0 and "syntax error" in out.stderr.lower() and "Traceback" not in out.stderr


def test_sql_answers_with_views_a_store_from_an_older_version_lacks_without_writing_it(store, tmp_path):
    """A store written before the rollout_breakdown view existed: `sql` defines this version's views for its own
    session and answers; a typo still fails with DuckDB's message; the catalog is never written (issue 18: the
    old "refresh the views and retry" opened it for writing and migrated it)."""
    import shutil

    import duckdb

    old = tmp_path / "old.duckdb"
    shutil.copy(store["path"], old)
    shutil.copytree(store["path"] + ".runs", str(old) + ".runs")
    con = duckdb.connect(str(old))
    con.execute("DROP VIEW rollout_breakdown")
    con.close()
    out = json.loads(run("sql", "--store", str(old), "SELECT r.method, b.sampled, b.trained, b.headroom FROM "
                         "rollout_breakdown b JOIN runs r USING (run_id) ORDER BY 1", "--json").stdout)
    assert [(o["method"], o["sampled"]) for o in out] == [(r["method"], r["sampled"]) for r in expected_rows(store)]
    assert out[1]["headroom"] == 1.0 and out[0]["headroom"] > 1.0  # GRPO trains all it samples, DAPO does not
    bad = run("sql", "--store", str(old), "SELECT * FROM no_such_view", check_rc=None)
    assert bad.returncode != 0 and "no_such_view" in bad.stderr and "Traceback" not in bad.stderr
    con = duckdb.connect(str(old), read_only=True)
    try:  # still without the view: nothing was written
        assert con.execute("SELECT count(*) FROM duckdb_views() WHERE view_name = 'rollout_breakdown'").fetchone() == (0,)
    finally:
        con.close()


def test_sql_is_read_only(store):
    out = run("sql", "--store", store["path"], "DELETE FROM runs", check_rc=None)
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert "read-only" in out.stderr.lower() or "read only" in out.stderr.lower()
    assert len(runs_json(store["path"])) == 3


def test_sql_on_a_missing_store_exits_2_with_a_fix(tmp_path):
    missing = tmp_path / "nope.duckdb"
    out = run("sql", "--store", str(missing), "SELECT 1", check_rc=None)
    assert out.returncode == 2
    assert "Fix" in out.stderr and str(missing) in out.stderr
    assert "Traceback" not in out.stderr
    assert not missing.exists()  # reading never creates a store
    out = run("runs", "--store", str(missing), check_rc=None)
    assert out.returncode == 2 and "Fix" in out.stderr


def test_report_on_the_simulated_runs(store):
    rep = json.loads(run("report", "--store", store["path"], "--json").stdout)
    assert set(rep) == {"sim"}
    (seed,) = rep["sim"]["seeds"]
    assert seed["seed"] == 0
    before = {r["method"]: r["accuracy"] for r in json.loads(run(
        "sql", "--store", store["path"], "SELECT r.method, e.accuracy FROM eval_results e JOIN runs r USING (run_id) "
        "WHERE e.step = 0", "--json").stdout)}
    # the eval curve: before training (step 0, cost 0), then after steps 5, 10, ..., 30 (eval_every 5 in the simulator
    # preset); `simulate --json` prints step s on its s-th line
    plain = {m: {r["step"]: r for r in store["plain"][m]} for m in METHODS}
    eval_steps = [s for s in range(1, 31) if s % 5 == 0]
    curve = {m: [(before[m], 0)] + [(plain[m][s]["accuracy"], plain[m][s]["cumulative_sampled"])
                                    for s in eval_steps] for m in METHODS}
    target = min(max(a for a, _ in curve["grpo"]), max(a for a, _ in curve["pc"]))
    assert seed["target"] == pytest.approx(target)
    hits = {m: next((c for a, c in curve[m] if a >= target - 1e-12), None) for m in METHODS}
    assert seed["rollouts"] == hits
    assert hits["pc"] is not None and hits["grpo"] is not None  # both reach min(their peaks) by definition
    assert seed["grpo_over_pc"] == pytest.approx(hits["grpo"] / hits["pc"])
    if hits["dapo"] is None:
        assert seed["dapo_over_pc"] is None
    else:
        assert seed["dapo_over_pc"] == pytest.approx(hits["dapo"] / hits["pc"])
    assert rep["sim"]["median_grpo_over_pc"] == seed["grpo_over_pc"]  # one seed: its own ratio
    table = run("report", "--store", store["path"]).stdout
    assert "family sim" in table
    assert f"{hits['grpo']:,}" in table and f"{hits['pc']:,}" in table and "median" in table


def test_simulate_store_replayed_with_the_same_run_name_has_no_doubled_steps(tmp_path):
    path = str(tmp_path / "replay.duckdb")
    args = ["simulate", "--store", path, "--method", "pc", "--prompts", "3000", "--train-batch", "16", "--n", "8",
            "--run-name", "again", "--json"]
    first = run(*args, "--steps", "12").stdout
    refused = run(*args, "--steps", "12", check_rc=None)  # an existing run is never replaced silently (issue 18)
    assert refused.returncode == 2 and "--overwrite" in refused.stderr and refused.stdout == ""
    second = run(*args, "--steps", "12", "--overwrite").stdout
    assert first == second
    counts = json.loads(run("sql", "--store", path, "SELECT run_id, count(*) AS n, count(DISTINCT step) AS d "
                                                    "FROM steps GROUP BY run_id", "--json").stdout)
    assert counts == [{"run_id": "again", "n": 12, "d": 12}]
    run(*args, "--steps", "5", "--overwrite")  # a shorter replay asked for replaces the run
    counts = json.loads(run("sql", "--store", path, "SELECT count(*) AS n, count(DISTINCT step) AS d, max(step) AS m "
                                                    "FROM steps", "--json").stdout)
    assert counts == [{"n": 5, "d": 5, "m": 5}]  # steps 1..5
    evals = json.loads(run("sql", "--store", path, "SELECT count(*) AS n, count(DISTINCT step) AS d "
                                                   "FROM eval_results", "--json").stdout)
    assert evals == [{"n": 2, "d": 2}]  # before training and the last step
    # the same name with another config is refused, exit 2, nothing changed
    out = run(*args[:-1], "--steps", "5", "--p-upper", "0.875", check_rc=None)
    assert out.returncode == 2 and "Fix" in out.stderr and "Traceback" not in out.stderr
    (r,) = runs_json(path)
    assert (r["steps"], r["status"]) == (5, "finished")


def test_presets_lists_the_nine_presets():
    lines = run("presets").stdout.splitlines()
    names = [ln.split()[0] for ln in lines if ln.strip()]
    assert names == ["bench", "bench-paper", "efficiency", "embedded", "paper", "paper-1.5b-n128", "paper-n16", "paper-qwen3-n64", "simulator"]
    assert all(len(ln.split()) > 1 for ln in lines if ln.strip())  # each with its description


def test_presets_show_paper_prints_the_resolved_config_with_its_hash():
    from pc_pipelines.config import resolve

    shown = json.loads(run("presets", "--show", "paper").stdout)
    cfg = resolve("paper")
    assert shown["config_hash"] == cfg.config_hash
    assert {k: v for k, v in shown.items() if k != "config_hash"} == json.loads(json.dumps(cfg.to_dict()))
    assert shown["allocator"]["method"] == "pc" and shown["allocator"]["n"] == 128
    changed = json.loads(run("presets", "--show", "paper", "--set", "allocator.p_upper=0.875").stdout)
    assert changed["allocator"]["p_upper"] == 0.875 and changed["config_hash"] != shown["config_hash"]
    out = run("presets", "--show", "paper", "--set", "allocator.bogus=1", check_rc=None)
    assert out.returncode == 2 and "bogus" in out.stderr and "Traceback" not in out.stderr
    out = run("presets", "--show", "no-such-preset", check_rc=None)
    assert out.returncode == 2 and "unknown preset" in out.stderr
