"""Issue 18, the store's part: "Nothing lost, whatever the user or the machine does". Fault injection with real
processes and real files, one test per case found; each checks that no step is lost or duplicated, no other run is
touched, the message names the fix, and a user error gives no traceback.

1. Glob characters: run names like ``*`` / ``[a-z]*`` / ``?ictim`` while ``victim`` is live; store paths with
   ``[`` ``*``; run names over 255 bytes.
2. Damaged steps: a 0-byte step file of a killed run, flipped bytes, a deleted step directory.
3. ``pilot-commit sql`` writing: COPY over the catalog or a step file, EXPORT/ATTACH/INSTALL, a typo'd table name
   (which used to open the catalog for writing and migrate it), and a copied / moved store.

The killed run is a real ``pilot-commit simulate`` process SIGKILLed after it printed step 24 (so steps 1..24 are on
disk as step directories, uncompacted: the CLI compacts at step 250 and at the end).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from pilot_cli import run_cli

from pc_pipelines.store import Store
from pc_pipelines.store.names import RUN_ID_PATTERN
from pc_pipelines.store.schema import CATALOG_ADDED
from pc_pipelines.store.steplog import MANIFEST
from tests.support.old_numbering import catalog_from_zero, files_from_zero

pytestmark = [pytest.mark.integration, pytest.mark.slow]

EXE = str(Path(sys.executable).parent / "pilot-commit")
SMALL = ["--prompts", "5000", "--train-batch", "32", "--n", "16"]
KILL_AFTER = 24  # steps printed (hence on disk) before the SIGKILL


def cli(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    out = run_cli(*args, check_rc=0 if check else None)
    assert "Traceback" not in out.stderr, out.stderr
    return out


def simulate(store: Path | str, name: str, steps: int, method: str = "pc", prompts: int = 5000,
             overwrite: bool = False) -> list[dict]:
    out = cli("simulate", "--store", str(store), "--run-name", name, "--method", method, "--steps", str(steps),
              *SMALL, "--prompts", str(prompts), "--json", *(["--overwrite"] if overwrite else []))
    return [json.loads(ln) for ln in out.stdout.splitlines()]


def sql(store: Path | str, query: str, check: bool = True) -> list[dict] | subprocess.CompletedProcess:
    out = cli("sql", "--store", str(store), query, "--json", check=check)
    return json.loads(out.stdout) if check else out


def steps_of(store: Path | str, run: str) -> list[tuple[int, int]]:
    return [(r["step"], r["sampled_rollouts"]) for r in sql(
        store, f"SELECT step, sampled_rollouts FROM steps WHERE run_id = '{run}' ORDER BY step")]


def assert_whole(store: Path | str, run: str, recorded: list[dict]) -> None:
    """Every step of ``run`` exactly once, with the values its writer printed."""
    assert steps_of(store, run) == [(r["step"], r["sampled_rollouts"]) for r in recorded]


def snapshot(path: Path) -> dict[str, str]:
    """sha256 of every file of a store (catalog and step logs)."""
    files = [path, *sorted(p for p in Path(str(path) + ".runs").rglob("*") if p.is_file())]
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in files if p.exists()}


def start_killed_run(store: Path, name: str) -> list[dict]:
    """A real simulate process, SIGKILLed once it has printed KILL_AFTER steps; returns the steps it printed."""
    proc = subprocess.Popen([EXE, "simulate", "--store", str(store), "--run-name", name, "--steps", "400",
                             "--prompts", "20000", "--train-batch", "32", "--n", "16", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    printed = []
    try:
        while len(printed) < KILL_AFTER:
            line = proc.stdout.readline()
            assert line, proc.stderr.read()
            printed.append(json.loads(line))
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
        proc.stdout.close()
        proc.stderr.close()
    return printed


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> dict:
    """A store with two finished runs (pc and grpo, 30 steps, compacted) and a killed pc run (uncompacted)."""
    root = tmp_path_factory.mktemp("faults")
    store = root / "base" / "s.duckdb"
    healthy = simulate(store, "healthy", 30)
    grpo = simulate(store, "base-grpo", 30, method="grpo")
    killed = start_killed_run(store, "killed")
    return {"store": store, "healthy": healthy, "grpo": grpo, "killed": killed}


@pytest.fixture
def store(base, tmp_path) -> Path:
    """A private copy of the base store (catalog and step logs) for a test that damages it."""
    dst = tmp_path / "copy" / "s.duckdb"
    dst.parent.mkdir()
    shutil.copy2(base["store"], dst)
    shutil.copytree(str(base["store"]) + ".runs", str(dst) + ".runs", symlinks=True)
    return dst


def killed_steps(store: Path) -> dict[int, Path]:
    run_dir = Path(str(store) + ".runs") / "killed"
    return {int(p.name.split("-")[1]): p for p in run_dir.iterdir() if p.name.startswith("step-")}


def runs_json(store: Path) -> dict[str, dict]:
    return {r["run_id"]: r for r in json.loads(cli("runs", "--store", str(store), "--json").stdout)}


# ---- 1. glob characters ------------------------------------------------------------------------------------------
# Long enough that the five refused attempts (a process start each) end while it writes, on a loaded machine too:
# 300 steps finished first under CI load (2026-11-29).
VICTIM_STEPS = 1500


def test_glob_run_names_are_refused_while_victim_is_live_and_victim_keeps_exactly_its_steps(tmp_path):
    store = tmp_path / "s.duckdb"
    log, err = (tmp_path / "victim.out").open("w"), (tmp_path / "victim.err").open("w")
    victim = subprocess.Popen([EXE, "simulate", "--store", str(store), "--run-name", "victim", "--steps", str(VICTIM_STEPS),
                               "--prompts", "20000", "--train-batch", "32", "--n", "16", "--json"],
                              stdout=log, stderr=err, text=True)
    try:
        first = Path(str(store) + ".runs") / "victim" / "step-00000001"
        while not first.exists():  # victim is live
            assert victim.poll() is None, (tmp_path / "victim.err").read_text()
        for bad in ("*", "[a-z]*", "?ictim", "v" * 300, "../victim"):
            out = cli("simulate", "--store", str(store), "--run-name", bad, "--steps", "20", *SMALL, check=False)
            assert out.returncode == 2, (bad, out.stderr)
            assert "--run-name" in out.stderr and RUN_ID_PATTERN in out.stderr and "Fix:" in out.stderr, out.stderr
            assert len(out.stderr) < 2000  # the 300-character name is not echoed whole
        assert victim.poll() is None, "victim finished before the attempts: make it longer"
        victim.wait(timeout=1200)
    finally:
        if victim.poll() is None:
            victim.kill()
            victim.wait()
        log.close()
        err.close()
    assert victim.returncode == 0, (tmp_path / "victim.err").read_text()
    recorded = [json.loads(ln) for ln in (tmp_path / "victim.out").read_text().splitlines()]
    assert len(recorded) == VICTIM_STEPS
    rows = sql(store, "SELECT run_id, count(*) AS n, count(DISTINCT step) AS d, max(step) AS m FROM steps GROUP BY ALL")
    assert rows == [{"run_id": "victim", "n": VICTIM_STEPS, "d": VICTIM_STEPS, "m": VICTIM_STEPS}]
    assert [r["run_id"] for r in sql(store, "SELECT run_id FROM runs")] == ["victim"]
    assert sorted(p.name for p in Path(str(store) + ".runs").iterdir()) == ["victim"]
    total = sql(store, "SELECT sum(sampled_rollouts) AS s FROM steps")[0]["s"]
    assert total == recorded[-1]["cumulative_sampled"]


def test_store_paths_with_glob_characters_read_only_their_own_runs(tmp_path):
    """``st[1]`` as a pattern matches ``st1``: the two stores must stay apart, while both are written."""
    a, b = tmp_path / "st[1]" / "s.duckdb", tmp_path / "st1" / "s.duckdb"
    rec_b = simulate(b, "victim", 12)
    rec_a = simulate(a, "victim", 7, method="grpo")
    assert_whole(a, "victim", rec_a)
    assert_whole(b, "victim", rec_b)
    star = tmp_path / "*" / "s.duckdb"
    rec_star = simulate(star, "victim", 5)
    assert_whole(star, "victim", rec_star)
    assert_whole(b, "victim", rec_b)
    out = cli("simulate", "--store", str(tmp_path / "what?" / "s.duckdb"), "--steps", "3", *SMALL, check=False)
    assert out.returncode == 2 and "Fix: choose a store path without" in out.stderr
    assert not (tmp_path / "what?").exists()


def test_start_run_refuses_a_glob_run_name_before_anything_is_written(tmp_path):
    from dagster import DagsterInstance, DagsterInvalidConfigError

    from pc_pipelines_dagster.automation.jobs import start_run
    from pc_pipelines_dagster.resources import DataResource, LocalCheckpointResource, StoreResource

    resources = {"data": DataResource(out_dir=str(tmp_path / "data")),
                 "store": StoreResource(path=str(tmp_path / "pc.duckdb")),
                 "checkpoints": LocalCheckpointResource(root=str(tmp_path / "runs"))}
    with DagsterInstance.ephemeral() as instance:
        with pytest.raises(DagsterInvalidConfigError) as caught:  # refused at launch: no run is created
            start_run.execute_in_process(
                run_config={"ops": {"register_training_run": {"config": {"method": "pc", "run_name": "[a-z]*"}}}},
                instance=instance, resources=resources, raise_on_error=False)
        assert instance.get_runs() == []
    msg = str(caught.value)
    assert "start_run config run_name '[a-z]*'" in msg and RUN_ID_PATTERN in msg and "Fix:" in msg
    assert not (tmp_path / "pc.duckdb").exists() and not (tmp_path / "runs").exists()


# ---- 2. damaged steps ----------------------------------------------------------------------------------------------
def test_an_empty_step_file_blocks_nothing_and_is_reported(base, store):
    steps = killed_steps(store)
    assert sorted(steps)[:KILL_AFTER] == list(range(1, KILL_AFTER + 1))
    (steps[5] / "prompt_observations.parquet").write_bytes(b"")  # what a power loss without fsync leaves

    runs = runs_json(store)
    assert runs["killed"]["damaged_steps"] == 1 and runs["killed"]["missing_steps"] == 1
    assert runs["killed"]["problems"] == "step 5 damaged"
    assert runs["killed"]["steps"] == len(steps) - 1  # every other step still there, once
    for name in ("healthy", "base-grpo"):
        assert runs[name]["missing_steps"] == 0 and runs[name]["steps"] == 30
        assert runs[name]["cumulative_sampled"] == base[name if name == "healthy" else "grpo"][-1]["cumulative_sampled"]
    table = cli("runs", "--store", str(store))
    line = next(ln for ln in table.stdout.splitlines() if ln.startswith("killed"))
    assert line.rstrip().endswith("step 5 damaged")
    assert "pilot-commit check" in table.stderr

    assert_whole(store, "healthy", base["healthy"])
    assert_whole(store, "base-grpo", base["grpo"])
    killed = steps_of(store, "killed")
    assert [s for s, _ in killed] == [s for s in sorted(steps) if s != 5]
    assert cli("report", "--store", str(store), "--json").returncode == 0

    rec = simulate(store, "after-damage", 8)  # new runs can be written
    assert_whole(store, "after-damage", rec)

    out = cli("check", "--store", str(store), check=False)
    assert out.returncode == 1
    assert "run killed step 5: damaged: prompt_observations.parquet is 0 bytes" in out.stdout
    assert "fix:" in out.stdout and "--run-name killed" in out.stdout and "--overwrite" in out.stdout
    assert str(steps[5]) in out.stdout
    report = json.loads(cli("check", "--store", str(store), "--json", check=False).stdout)
    assert [(p["run_id"], p["step"], p["kind"]) for p in report["problems"]] == [("killed", 5, "damaged")]

    # The fix works: re-recording the run replays every step; the store is whole again.
    rec = simulate(store, "killed", 30, prompts=20000, overwrite=True)  # the killed run's own flags, as check says
    assert_whole(store, "killed", rec)
    assert cli("check", "--store", str(store)).returncode == 0


def test_flipped_bytes_are_caught_by_the_checksum_and_never_compacted(store):
    steps = killed_steps(store)
    f = steps[7] / "steps.parquet"
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0x40
    f.write_bytes(bytes(data))

    assert 7 not in [s for s, _ in steps_of(store, "killed")]
    out = cli("check", "--store", str(store), check=False)
    assert out.returncode == 1 and "run killed step 7: damaged: steps.parquet has sha256" in out.stdout

    # Compaction (the run's writer) quarantines it instead of copying the changed bytes into the catalog.
    st = Store(store)
    assert st.compact("killed") == len(steps) - 1
    quarantined = list((Path(str(store) + ".runs") / "killed" / ".quarantine").iterdir())
    assert [p.name.split(".")[0] for p in quarantined] == ["step-00000007"]
    assert st.query("SELECT count(*) AS n FROM compacted_steps WHERE run_id = 'killed' AND step = 7") == [{"n": 0}]
    report = json.loads(cli("check", "--store", str(store), "--json", check=False).stdout)
    (p,) = report["problems"]
    assert (p["run_id"], p["step"], p["kind"]) == ("killed", 7, "missing")
    assert "quarantined" in p["detail"] and p["path"] == str(quarantined[0]) and "rm -r" in p["fix"]


def test_a_deleted_step_directory_is_flagged_in_the_cumulative_figures(base, store):
    steps = killed_steps(store)
    shutil.rmtree(steps[3])
    n = len(steps)
    # eval rows for the killed run, as a longer-lived run would have flushed them (steps 9 and 19)
    acc = {r["step"]: r["accuracy"] for r in base["killed"]}
    Store(store).add_eval_results([{"run_id": "killed", "step": s, "benchmark": "sim_heldout", "accuracy": acc[s]}
                                   for s in (9, 19)])

    runs = runs_json(store)
    assert runs["killed"]["missing_steps"] == 1 and runs["killed"]["damaged_steps"] == 0
    assert runs["killed"]["problems"] == "step 3 missing" and runs["killed"]["steps"] == n - 1
    full = {r["step"]: r["cumulative_sampled"] for r in base["killed"]}
    costs = {r["step"]: r for r in sql(store, "SELECT step, cumulative_sampled, missing_steps FROM step_costs "
                                              "WHERE run_id = 'killed'")}
    assert costs[2]["missing_steps"] == 0 and costs[2]["cumulative_sampled"] == full[2]
    assert costs[4]["missing_steps"] == 1 and costs[4]["cumulative_sampled"] < full[4]  # a lower bound, flagged
    curve = {r["step"]: r for r in sql(store, "SELECT step, missing_steps FROM eval_curve WHERE run_id = 'killed'")}
    assert curve[9]["missing_steps"] == 1 and curve[19]["missing_steps"] == 1
    # `report` compares the finished PC run of a seed before an unfinished one (the `compared_runs` view): moved to
    # another seed, `healthy` leaves `killed` the PC run of its seed, so its missing step reaches the report
    con = duckdb.connect(str(store))
    con.execute("UPDATE runs SET seed = seed + 1000 WHERE run_id = 'healthy'")
    con.close()
    rep = json.loads(cli("report", "--store", str(store), "--json").stdout)
    (seed,) = rep["sim"]["seeds"]
    assert seed["missing_steps"] == 1
    table = cli("report", "--store", str(store)).stdout
    assert "lower bounds" in table and "pilot-commit check" in table
    out = cli("check", "--store", str(store), check=False)
    assert out.returncode == 1 and "run killed step 3: missing: no step directory" in out.stdout


# ---- 3. sql cannot write ---------------------------------------------------------------------------------------------
def test_sql_cannot_write_the_catalog_or_a_step_file_or_anything_else(store, tmp_path):
    before = snapshot(store)
    step = next(iter(killed_steps(store).values())) / "steps.parquet"
    attacks = [
        f"COPY (SELECT 'x') TO '{store}' (FORMAT csv)",
        f"COPY (SELECT 'x') TO '{step}' (FORMAT csv, USE_TMP_FILE false)",
        f"COPY (SELECT 1 AS step) TO '{step}' (FORMAT parquet, USE_TMP_FILE false, OVERWRITE true)",
        f"COPY runs TO '{tmp_path / 'out.csv'}'",
        f"EXPORT DATABASE '{tmp_path / 'export'}'",
        f"ATTACH '{tmp_path / 'other.duckdb'}' AS o",
        "INSTALL httpfs",
        "LOAD httpfs",
        "SELECT * FROM read_csv('/etc/passwd')",
        f"SELECT * FROM read_parquet('{step}')",
        "SET enable_external_access = true",
        "DELETE FROM runs",
        "CREATE TABLE main.evil AS SELECT 1",
        "CHECKPOINT; DELETE FROM runs",
    ]
    for q in attacks:
        out = sql(store, q, check=False)
        assert out.returncode == 1, (q, out.stdout)
        assert "pilot-commit sql:" in out.stderr and out.stdout == "", (q, out.stderr)
    out = sql(store, attacks[0], check=False)
    assert "read-only" in out.stderr and "--csv or --json" in out.stderr  # says what sql allows
    assert snapshot(store) == before
    assert not (tmp_path / "out.csv").exists() and not (tmp_path / "export").exists()
    assert not (tmp_path / "other.duckdb").exists()
    assert len(runs_json(store)) == 3


def test_a_typo_never_opens_the_catalog_for_writing_even_on_an_older_store(store):
    con = duckdb.connect(str(store))
    con.execute("UPDATE meta SET value = '4' WHERE key = 'schema_version'")
    for version, added in CATALOG_ADDED.items():  # what the versions after 4 added
        for table, columns in added.items() if version > 4 else ():
            for column in columns:
                con.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    con.execute("DROP VIEW rollout_breakdown")
    con.close()
    # a store written before v12 counts steps from 0: its first read upgrades it, once (one numbering everywhere)
    con = duckdb.connect(str(store))
    catalog_from_zero(con)
    con.close()
    files_from_zero(Path(str(store) + ".runs"))
    out = sql(store, "SELECT * FROM stpes", check=False)
    assert out.returncode == 1 and "stpes" in out.stderr and "Tables and views:" in out.stderr
    assert Store(store).schema_version() == 12
    before = snapshot(store)  # from then on a typo writes nothing
    out = sql(store, "SELECT * FROM stpes", check=False)
    assert out.returncode == 1 and "stpes" in out.stderr and "Tables and views:" in out.stderr
    rows = sql(store, "SELECT count(*) AS n FROM rollout_breakdown")  # the session's views
    assert rows == [{"n": 3}]
    assert snapshot(store) == before
    assert Store(store).schema_version() == 12


def test_a_copied_or_moved_store_reads_its_own_files(base, tmp_path):
    src = tmp_path / "orig" / "s.duckdb"
    src.parent.mkdir()
    shutil.copy2(base["store"], src)
    shutil.copytree(str(base["store"]) + ".runs", str(src) + ".runs")
    want = {r: steps_of(src, r) for r in ("healthy", "base-grpo", "killed")}
    assert len(want["killed"]) >= KILL_AFTER

    copy = tmp_path / "copy" / "s.duckdb"
    copy.parent.mkdir()
    shutil.copy2(src, copy)
    shutil.copytree(str(src) + ".runs", str(copy) + ".runs")
    moved = tmp_path / "moved" / "s.duckdb"
    moved.parent.mkdir()
    os.rename(src, moved)
    os.rename(str(src) + ".runs", str(moved) + ".runs")
    # change the copy's files: the moved one must not see it, and the original location is gone
    shutil.rmtree(killed_steps(copy)[1])
    for r, rows in want.items():
        assert steps_of(moved, r) == rows, r
    assert steps_of(copy, "killed") == want["killed"][1:]
    assert cli("check", "--store", str(moved)).returncode == 0
    assert json.loads(cli("check", "--store", str(copy), "--json", check=False).stdout)["problems"][0]["step"] == 1


def test_step_manifest_is_present_for_every_step_the_cli_writes(store):
    for step, d in killed_steps(store).items():
        manifest = json.loads((d / MANIFEST).read_text())
        assert (manifest["run_id"], manifest["step"]) == ("killed", step)
        for name, entry in manifest["files"].items():
            assert (d / name).stat().st_size == entry["size"], (step, name)



# ---- 4. issue 31: step identity, deletion through a link, honest status -----------------------------------------
def rewrite_manifest(step_dir: Path, **fields) -> None:
    """What a careful tamperer does: the manifest made to match the files now in ``step_dir`` (sizes, sha256)."""
    manifest = json.loads((step_dir / MANIFEST).read_text())
    for name in manifest["files"]:
        data = (step_dir / name).read_bytes()
        manifest["files"][name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    manifest.update(fields)
    (step_dir / MANIFEST).write_text(json.dumps(manifest))


def test_a_step_file_swapped_for_another_steps_is_reported_and_left_out(store):
    """steps.parquet of step 5 replaced by step 3's, the manifest rewritten to match: `check` exits 1 naming step 5
    and what it holds; step 3 is served once, step 5 is missing (not a second step 3), cumulative figures say so."""
    steps = killed_steps(store)
    before = dict(steps_of(store, "killed"))
    shutil.copy2(steps[3] / "steps.parquet", steps[5] / "steps.parquet")
    rewrite_manifest(steps[5])

    rows = steps_of(store, "killed")
    assert [s for s, _ in rows] == [s for s in sorted(before) if s != 5]  # step 3 once, step 5 left out
    assert dict(rows) == {s: v for s, v in before.items() if s != 5}
    out = cli("check", "--store", str(store), check=False)
    assert out.returncode == 1
    assert "run killed step 5: damaged: steps.parquet says it holds step 3, not 5" in out.stdout
    assert runs_json(store)["killed"]["problems"] == "step 5 damaged"


def test_a_step_directory_copied_under_another_number_or_run_is_reported(base, store):
    """A whole step directory copied under a new number (manifest untouched, then rewritten to the new number) and
    into another run: each is reported naming what it holds; no step or run gains rows."""
    steps = killed_steps(store)
    last = max(steps)
    before = steps_of(store, "killed")
    shutil.copytree(steps[2], steps[2].parent / f"step-{last + 1:08d}")
    out = cli("check", "--store", str(store), check=False)
    assert out.returncode == 1
    assert f"run killed step {last + 1}: damaged: MANIFEST.json describes step 2, not {last + 1}" in out.stdout
    rewrite_manifest(steps[2].parent / f"step-{last + 1:08d}", step=last + 1)
    out = cli("check", "--store", str(store), check=False)
    assert f"run killed step {last + 1}: damaged: " in out.stdout and "says it holds step 2" in out.stdout
    assert steps_of(store, "killed") == before

    # into another run (healthy: 30 compacted steps), manifest rewritten to the new place
    foreign = Path(str(store) + ".runs") / "healthy" / "step-00000031"
    shutil.copytree(steps[4], foreign)
    rewrite_manifest(foreign, run_id="healthy", step=31)
    out = cli("check", "--store", str(store), check=False)
    assert "run healthy step 31: damaged: " in out.stdout and "says it holds run 'killed', not 'healthy'" in out.stdout
    assert_whole(store, "healthy", base["healthy"])


def test_overwrite_never_deletes_through_a_symlinked_run_directory(tmp_path):
    """`simulate --overwrite` of a run whose step directory is a link to another folder: exit 2, the link and the
    fix named, the other folder's files and the run's rows untouched; without the link it overwrites and says so."""
    store = tmp_path / "s.duckdb"
    rec = simulate(store, "victim", 5)
    runs_root = Path(str(store) + ".runs")
    elsewhere = tmp_path / "precious"
    elsewhere.mkdir()
    (elsewhere / "thesis.tex").write_text("years of work")
    real = runs_root / "victim-real"
    (runs_root / "victim").rename(real)
    (runs_root / "victim").symlink_to(elsewhere)
    out = cli("simulate", "--store", str(store), "--run-name", "victim", "--steps", "5", *SMALL, "--overwrite",
              check=False)
    assert out.returncode == 2
    assert "is a symbolic link to" in out.stderr and "nothing was deleted" in out.stderr and "Fix:" in out.stderr
    assert sorted(p.name for p in elsewhere.iterdir()) == ["thesis.tex"]  # not even a lock file
    assert (elsewhere / "thesis.tex").read_text() == "years of work"
    (runs_root / "victim").unlink()
    real.rename(runs_root / "victim")
    assert_whole(store, "victim", rec)
    out = cli("simulate", "--store", str(store), "--run-name", "victim", "--steps", "3", *SMALL, "--overwrite",
              "--json")
    assert "run victim overwritten: deleted" in out.stderr
    assert {r["run_id"]: r["steps"] for r in json.loads(cli("runs", "--store", str(store), "--json").stdout)} == {
        "victim": 3}
    assert [s for s, _ in steps_of(store, "victim")] == [1, 2, 3]


def test_a_killed_writer_shows_as_stopped_with_its_pid_and_host(store):
    """After a SIGKILL the catalog still says `running`; `runs` and `check` show the run as stopped, naming the
    dead writer's pid and host and the fix (the catalog itself is not changed by a reader)."""
    import socket

    runs = runs_json(store)
    assert runs["killed"]["status"] == "stopped"
    reason = runs["killed"]["status_reason"]
    assert "is gone" in reason and f"on host {socket.gethostname()}" in reason and "pid " in reason
    assert "Fix:" in reason
    assert runs["healthy"]["status"] == "finished"
    assert Store(store).get_run("killed")["status"] == "running"
    out = cli("check", "--store", str(store), "--json")
    assert [r["run_id"] for r in json.loads(out.stdout)["stopped_runs"]] == ["killed"]
    assert "run killed: stopped: recorded as running, but its writer, pid" in cli("check", "--store", str(store)).stdout


def test_a_rerun_on_a_clock_a_day_behind_is_still_the_run_report_compares(tmp_path):
    """The newest attempt of a (family, method, seed) is the one registered last in the store (runs.seq), whatever
    the writers' clocks say: a PC re-run recorded on a machine whose clock is a day behind the first PC run's is the
    run `report` and `rollouts_to_target` compare."""
    store = tmp_path / "s.duckdb"
    simulate(store, "g", 30, method="grpo")
    simulate(store, "pc-first", 30)
    con = duckdb.connect(str(store))  # the first run's clock was a day ahead: the re-run looks a day older
    con.execute("UPDATE runs SET created_at = created_at + INTERVAL 1 DAY WHERE run_id = 'pc-first'")
    con.close()
    cli("simulate", "--store", str(store), "--run-name", "pc-rerun", "--method", "pc", "--steps", "30",
        "--prompts", "5000", "--train-batch", "32", "--n", "8", "--json")

    def reaches(run: str, target: float) -> int:
        return min(r["cumulative_sampled"] for r in sql(
            store, f"SELECT accuracy, cumulative_sampled FROM eval_curve WHERE run_id = '{run}'")
            if r["accuracy"] >= target - 1e-12)

    def peak(run: str) -> float:
        return sql(store, f"SELECT max(accuracy) AS m FROM eval_curve WHERE run_id = '{run}'")[0]["m"]

    (seed,) = json.loads(cli("report", "--store", str(store), "--json").stdout)["sim"]["seeds"]
    target = min(peak("g"), peak("pc-rerun"))
    assert seed["target"] == pytest.approx(target)
    assert seed["rollouts"]["pc"] == reaches("pc-rerun", target)
    assert reaches("pc-first", min(peak("g"), peak("pc-first"))) != seed["rollouts"]["pc"]  # the old run differs


OTHER_SESSION = ("import sys; from pc_pipelines_dagster.resources.storage import StoreResource; "
                 "StoreResource(path=sys.argv[1]).get()")  # what training_segment, segment_eval and start_run open


def test_another_runs_store_session_never_deletes_a_replays_fresh_step_files(tmp_path):
    """Issue 54, the vacuum race: run ``a`` replays its compacted step 2 (a re-materialized segment: fresh step files
    at or below its watermark, swapped in at the end by ``Store.replace_steps``) while run ``b``'s process opens the
    store through ``StoreResource.get()``, which vacuumed EVERY run: ``a``'s fresh files were deleted, the swap found
    nothing (0 steps) and the replayed step was silently lost, the old rows standing. Now only the process holding a
    run's writer lock vacuums it."""
    import pyarrow as pa

    from pc_pipelines.store import hold_run
    from pc_pipelines.store.schema import STEP_TABLES

    path = tmp_path / "pc.duckdb"
    for name in ("a", "b"):
        simulate(path, name, 6)  # compacted at its end: step files gone, rows in the catalog
    st = Store(path)
    assert [r["compacted_through"] for r in st.query("SELECT compacted_through FROM runs ORDER BY run_id")] == [6, 6]
    replayed = {}
    with st.connect(read_only=True) as con:
        for t, schema in STEP_TABLES.items():
            replayed[t] = pa.Table.from_pylist(con.execute(
                f"SELECT {', '.join(schema.names)} FROM compacted_{t} WHERE run_id = 'a' AND step = 2").fetchdf()
                .to_dict("records"), schema=schema)
    replayed["steps"] = replayed["steps"].set_column(replayed["steps"].schema.get_field_index("loss"), "loss",
                                                     pa.array([123.5], pa.float64()))
    b_before = st.query("SELECT * FROM steps WHERE run_id = 'b' ORDER BY step")

    with hold_run("a", st.run_dir("a")):  # a's writer, as run_segment holds it
        fresh = st.writer("a").write_step(2, replayed)
        other = subprocess.run([sys.executable, "-c", OTHER_SESSION, str(path)], capture_output=True, text=True,
                               timeout=300, check=False)  # b's session opens meanwhile
        assert other.returncode == 0, other.stderr
        assert fresh.is_dir()  # before: deleted by b's session
        assert st.replace_steps("a", 2, 2) == 1  # before: 0, nothing to swap in

    assert [r["loss"] for r in st.query("SELECT loss FROM steps WHERE run_id = 'a' AND step = 2")] == [123.5]
    assert [r["step"] for r in st.query("SELECT step FROM steps WHERE run_id = 'a' ORDER BY step")] == list(range(1, 7))
    assert st.query("SELECT * FROM steps WHERE run_id = 'b' ORDER BY step") == b_before  # b untouched
    with pytest.raises(Exception, match="does not hold the run's writer lock"):
        st.vacuum("b")  # not this process's run: refused, nothing deleted
