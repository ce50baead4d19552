"""`pilot-commit timeline` as a user runs it: the installed entry point on a store recorded by `pilot-commit simulate`,
real processes, the PNG on disk, the line it prints and its refusals (each with its fix)."""

from __future__ import annotations

import struct
from functools import partial
from pathlib import Path

import pytest
from pilot_cli import run_cli, sql

pytestmark = pytest.mark.e2e

SMALL = ["--prompts", "300", "--steps", "20", "--train-batch", "16", "--n", "16"]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


run = partial(run_cli, check_rc=0)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> dict:
    path = str(tmp_path_factory.mktemp("cli-timeline") / "runs.duckdb")
    run("simulate", "--store", path, "--method", "pc", "--run-name", "pc-run", *SMALL)
    run("simulate", "--store", path, "--method", "grpo", "--run-name", "grpo-run", *SMALL)
    return {"path": path}


def png_size(path: Path) -> tuple[int, int]:
    blob = path.read_bytes()
    assert blob[:8] == PNG_MAGIC
    return struct.unpack(">II", blob[16:24])


def test_timeline_writes_the_png_and_says_what_it_shows(store, tmp_path):
    out = tmp_path / "figs" / "pc.png"
    res = run("timeline", "--store", store["path"], "--run", "pc-run", "--out", str(out))
    total = sql(store["path"], "SELECT count(DISTINCT prompt_id) AS k FROM pass_rate_history "
                               "WHERE run_id = 'pc-run'")[0]["k"]
    assert res.stdout == (f"wrote {out.resolve()}: run pc-run (PC): 40 most-visited of {total:,} prompts x 20 steps "
                          f"(training steps 1-20); lower panel: decisions of all {total:,} prompts per step\n")
    width, height = png_size(out)
    assert 1200 <= width <= 4000 and 800 <= height <= 5000
    assert res.stderr == ""


def test_timeline_of_chosen_prompts_and_of_a_grpo_run(store, tmp_path):
    top = sql(store["path"], "SELECT prompt_id, count(DISTINCT step) AS v FROM pass_rate_history WHERE run_id = "
                             "'grpo-run' GROUP BY prompt_id ORDER BY v DESC, prompt_id LIMIT 3")
    ids = ",".join(str(r["prompt_id"]) for r in top)
    out = tmp_path / "grpo.png"
    res = run("timeline", "--store", store["path"], "--run", "grpo-run", "--out", str(out), "--prompts", ids)
    # 20 steps x 16 prompts = 320 draws from a pool of 300: every prompt, some twice (the top three)
    assert [r["v"] for r in top] == [2, 2, 2]
    assert "run grpo-run (GRPO): 3 chosen prompts of 300 x 20 steps" in res.stdout
    png_size(out)
    res = run("timeline", "--store", store["path"], "--run", "grpo-run", "--out", str(out), "--top", "5")
    assert "5 most-visited of 300 prompts" in res.stdout


def test_timeline_refusals_name_the_fix(store, tmp_path):
    out = tmp_path / "never.png"
    bad = run("timeline", "--store", store["path"], "--run", "pc-run", "--out", str(out), "--prompts", "3,x",
              check_rc=None)
    assert bad.returncode == 2 and "'x' is not an integer" in bad.stderr
    bad = run("timeline", "--store", store["path"], "--run", "nope", "--out", str(out), check_rc=None)
    assert bad.returncode == 2 and "no run 'nope'" in bad.stderr and "Fix:" in bad.stderr
    assert "pc-run" in bad.stderr and "grpo-run" in bad.stderr
    bad = run("timeline", "--store", store["path"], "--run", "pc-run", "--out", str(out), "--prompts", "99999",
              check_rc=None)
    assert bad.returncode == 2 and "never sampled prompt(s) 99999" in bad.stderr and "Fix:" in bad.stderr
    bad = run("timeline", "--store", store["path"], "--run", "pc-run", "--out", str(out), "--top", "0", check_rc=None)
    assert bad.returncode == 2 and "Fix:" in bad.stderr and "Traceback" not in bad.stderr
    bad = run("timeline", "--store", store["path"], "--run", "pc-run", "--out", str(out), "--prompts", "3",
              "--top", "4", check_rc=None)
    assert bad.returncode == 2 and "not allowed with argument" in bad.stderr
    assert not out.exists()
    folder = tmp_path / "a-folder.png"
    folder.mkdir()
    bad = run("timeline", "--store", store["path"], "--run", "pc-run", "--out", str(folder), check_rc=None)
    assert bad.returncode == 2 and f"--out {folder} is a directory; it is not written over. Fix:" in bad.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-folder.png"]  # no temporary left behind
