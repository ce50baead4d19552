"""The session's shared trained runs (tests/support/shared_runs.py): built once whoever asks, rebuilt when the code or
the recipe that shape them change and only then, never read half-built, and a test that writes into one is named."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import shared_runs
from shared_runs import SharedRuns, copy_of


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    for rel, text in {"pc_pipelines/run/driver.py": "A = 1\n", "pc_pipelines/reports/table.py": "B = 1\n",
                      "pc_pipelines/simulator/model.py": "C = 1\n", "tests/test_x.py": "D = 1\n"}.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    return repo


def _build(log: Path):
    def build(out: Path) -> None:
        with log.open("a") as f:
            f.write("built\n")
        (out / "pc.duckdb").write_text("rows")
    return build


def test_built_once_and_rebuilt_only_when_what_shapes_it_changes(tmp_path):
    repo, log = _repo(tmp_path), tmp_path / "log"
    runs = SharedRuns(tmp_path / "cache", repo=repo)
    first = runs.get("r", ["train", "--steps", "4"], _build(log))
    assert runs.get("r", ["train", "--steps", "4"], _build(log)) == first and log.read_text() == "built\n"
    assert (first / "pc.duckdb").read_text() == "rows" and not list(tmp_path.glob("cache/*.partial"))
    (repo / "tests/test_x.py").write_text("D = 2\n")  # not what trains: the same run
    (repo / "pc_pipelines/reports/table.py").write_text("B = 2\n")
    (repo / "pc_pipelines/simulator/model.py").write_text("C = 2\n")
    assert runs.get("r", ["train", "--steps", "4"], _build(log)) == first and log.read_text().count("built") == 1
    (repo / "pc_pipelines/run/driver.py").write_text("A = 2\n")  # the training code: built again
    second = runs.get("r", ["train", "--steps", "4"], _build(log))
    assert second != first and log.read_text().count("built") == 2
    third = runs.get("r", ["train", "--steps", "5"], _build(log))  # another recipe: another run
    assert third not in (first, second) and log.read_text().count("built") == 3


def test_a_failed_build_is_never_read_and_the_next_asker_builds_it(tmp_path):
    runs, log = SharedRuns(tmp_path / "cache", repo=_repo(tmp_path)), tmp_path / "log"

    def broken(out: Path) -> None:
        (out / "pc.duckdb").write_text("half")
        raise RuntimeError("killed mid-run")

    with pytest.raises(RuntimeError):
        runs.get("r", ["x"], broken)
    got = runs.get("r", ["x"], _build(log))
    assert (got / "pc.duckdb").read_text() == "rows" and log.read_text() == "built\n"


ASK = """
import sys
import time
from pathlib import Path
from shared_runs import SharedRuns
cache, repo, log = map(Path, sys.argv[1:])
def build(out):
    time.sleep(1.0)  # a build takes a while: every asker arrives during it
    with log.open("a") as f:
        f.write("built\\n")
    (out / "pc.duckdb").write_text("rows")
print(SharedRuns(cache, repo=repo).get("r", ["x"], build))
"""


def test_workers_asking_at_once_build_it_once(tmp_path):
    repo, log = _repo(tmp_path), tmp_path / "log"
    env = {**os.environ, "PYTHONPATH": str(Path(shared_runs.__file__).parent)}
    procs = [subprocess.Popen([sys.executable, "-c", ASK, str(tmp_path / "cache"), str(repo), str(log)], env=env,
                              stdout=subprocess.PIPE, text=True) for _ in range(3)]
    got = {p.communicate(timeout=120)[0].strip() for p in procs}
    assert [p.returncode for p in procs] == [0, 0, 0]
    assert len(got) == 1 and log.read_text() == "built\n"


def test_a_write_into_a_shared_run_is_named_and_a_copy_is_free_to_change(tmp_path):
    runs = SharedRuns(tmp_path / "cache", repo=_repo(tmp_path))
    shared = runs.get("r", ["x"], _build(tmp_path / "log"))
    mine = copy_of(shared, tmp_path / "mine")
    (mine / "pc.duckdb").write_text("resumed")
    (mine / "extra").write_text("new")
    assert runs.changed() == {}
    (shared / "pc.duckdb").write_text("resumed")
    assert runs.changed() == {str(shared): ["pc.duckdb"]}
