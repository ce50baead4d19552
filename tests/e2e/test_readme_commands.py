"""The README's and docs/USAGE.md's shell blocks, pasted as a user would: each ```bash block is either run verbatim
with ``bash -e -o pipefail`` in a directory laid out like the repository after ``make demo`` (``.venv`` and
``runs/pc.duckdb``), or listed in ``NOT_RUN`` with the reason. A block in neither fails the test, so a new block is
never silently left out.

The store is made cheaply: a GRPO, a DAPO and a PC run recorded by ``pilot-commit simulate`` (the demo trains for
~15 minutes); the commands read the same tables and views, so they return real rows.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from pc_pipelines.config import parse_overrides, resolve

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
EXE = str(BIN / "pilot-commit")
DOCS = ("README.md", "docs/USAGE.md")

# (file, the block's first line) -> why it is not run here. Every other ```bash block of DOCS is run.
NOT_RUN = {
    ("README.md", "make demo    # creates .venv, installs everything from uv.lock (CPU torch), runs GRPO vs DAPO vs "
                  "PC side by side"): "make targets: the install and the demo (this test lays out the demo's store itself) and "
                           "the whole suite (which includes this test)",
    ("README.md", "make ui      # dagster dev; open http://127.0.0.1:3000 (UI_PORT=3001 make ui for another port)"):
        "a server that runs until Ctrl-C",
    ("README.md", ".venv/bin/pilot-commit train --method pc --steps 200 --run-name pc-s0          # Ctrl-C: "
                  "checkpoint, exit 130"): "200 training steps (about an hour on a CPU), interrupted by hand",
    ("docs/USAGE.md", ".venv/bin/pilot-commit simulate --method pc --train-batch 128 --n-pilot 32 --n-commit 96 "
                      "--oversample 3 \\"): "simulations of 300 to 1000 steps at the paper's scale (minutes)",
    ("docs/USAGE.md", "for m in grpo dapo pc; do .venv/bin/pilot-commit simulate --method $m --steps 300 --store "
                      "runs.duckdb; done"): "records 3 x 300 simulated steps (minutes); its queries are Journey 3's, "
                                            "which run here",
    ("docs/USAGE.md", ".venv/bin/pilot-commit train --method pc --steps 200 --run-name pc-s0 --out runs   # GRPO: "
                      "--method grpo, DAPO: dapo"): "200 training steps (about an hour on a CPU)",
    ("docs/USAGE.md", "make ui      # dagster dev on workspace.yaml; open http://127.0.0.1:3000 (UI_PORT=3001 make ui "
                      "for another port)"): "a server that runs until Ctrl-C",
    ("docs/USAGE.md", "make study-bench                   # the study on the frozen `bench` preset: tune, main (3 "
                      "seeds), repro; resumable"): "the study: hours",
    ("docs/USAGE.md", ".venv/bin/pilot-commit train --method pc --steps 50        # embedded preset: all four "
                      "strategies on"): "50 training steps per run (minutes on a CPU)",
    ("docs/USAGE.md", ".venv/bin/pilot-commit train --method pc --steps 50 --set allocator.screen_strategy=posterior"):
        "50 training steps (minutes on a CPU) and a simulator study of 120 steps x 2 seeds",
}


def demo_parser_default(option: str) -> str:
    """The default of one of ``python -m pc_pipelines_dagster.demo``'s options, as its source sets it."""
    text = (ROOT / "pc_pipelines_dagster" / "demo.py").read_text()
    return re.search(rf'p\.add_argument\("--{option}", default="([^"]+)"', text).group(1)


# the family of the demo's runs (its default preset's), which Journey 3's `compare --family` names
FAMILY = resolve(demo_parser_default("preset"), parse_overrides([]), method="pc", seed=0).family


BLOCK_RE = re.compile(r"^```bash\n(.*?)^```", re.S | re.M)


def bash_blocks(name: str) -> list[str]:
    return BLOCK_RE.findall((ROOT / name).read_text())


def all_blocks() -> list[tuple[str, str]]:
    return [(name, block) for name in DOCS for block in bash_blocks(name)]


def first_line(block: str) -> str:
    return block.splitlines()[0].rstrip()


def run_blocks() -> list[tuple[str, str]]:
    return [(name, b) for name, b in all_blocks() if (name, first_line(b)) not in NOT_RUN]


def test_every_block_is_run_or_listed_with_its_reason():
    found = {(name, first_line(b)) for name, b in all_blocks()}
    assert set(NOT_RUN) <= found, f"NOT_RUN names blocks the docs no longer have: {set(NOT_RUN) - found}"
    # the journeys this test runs: README's Journey 3 and USAGE's queries of the demo's store
    assert [(name, first_line(b)) for name, b in run_blocks()] == [
        ("README.md", 'S="--store runs/pc.duckdb"'),
        ("docs/USAGE.md", '.venv/bin/pilot-commit sql --store runs/pc.duckdb "SELECT step, prompt_id, decision, '
                          'reason FROM decision_reasons LIMIT 20"'),
    ]


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory) -> Path:
    """A directory laid out like the repository after ``make demo``: ``.venv`` (this interpreter's) and
    ``runs/pc.duckdb`` holding a GRPO, a DAPO and a PC run of the demo's family (which Journey 3's ``compare
    --family`` names) with steps, observations and evals."""
    root = tmp_path_factory.mktemp("after-demo")
    (root / ".venv").symlink_to(BIN.parent, target_is_directory=True)
    assert (root / ".venv" / "bin" / "pilot-commit").exists()
    for m in ("grpo", "dapo", "pc"):
        out = subprocess.run([EXE, "simulate", "--method", m, "--family", FAMILY, "--store", "runs/pc.duckdb", "--steps", "12",
                              "--prompts", "2000", "--train-batch", "32", "--n", "16"],
                             cwd=root, capture_output=True, text=True, timeout=600, check=False)
        assert out.returncode == 0, out.stderr[-3000:]
    return root


def paste(block: str, cwd: Path) -> subprocess.CompletedProcess:
    out = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block], cwd=cwd, capture_output=True, text=True,
                         timeout=600, check=False)
    assert out.returncode == 0, f"exit {out.returncode}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out


def row_counts(stdout: str) -> list[int]:
    return [int(n) for n in re.findall(r"^\((\d+) rows?\)$", stdout, flags=re.M)]


def test_readme_journey_3_as_pasted(demo_dir):
    block = next(b for name, b in run_blocks() if name == "README.md")
    out = paste(block, demo_dir)
    assert "\r" not in out.stdout
    # runs, decision_reasons, pass_rate_history, rollout_breakdown and report: each prints rows, none (0 rows)
    counts = row_counts(out.stdout)
    assert len(counts) == 5 and min(counts) > 0, out.stdout
    pc_run = subprocess.run([EXE, "sql", "--store", "runs/pc.duckdb", "--csv", "SELECT run_id FROM runs WHERE "
                             "method = 'pc'"], cwd=demo_dir, capture_output=True, text=True, check=True).stdout
    pc_run = pc_run.splitlines()[-1]
    assert f"wrote {demo_dir.resolve() / 'timeline.png'}" in out.stdout
    assert (demo_dir / "timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"no run '{pc_run}" not in out.stderr
    # the demo family's three runs overlaid by step and by rollouts
    assert f"wrote {demo_dir.resolve() / 'compare.png'}: 3 runs by step and by cumulative rollouts" in out.stdout
    assert (demo_dir / "compare.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the report prints Table 2 with the runs it compares
    assert f"family {FAMILY}: cumulative sampled rollouts to reach the target accuracy\nSMOKE TEST, not a " \
        "comparison: each method trained 12 steps on 1 seed, too few for rollout efficiency to show" in out.stdout
    assert re.search(r"^seed\s+target\s+grpo\s+dapo\s+pc\s+grpo/pc\s+dapo/pc$", out.stdout, flags=re.M)
    assert f"PC {pc_run} (12 steps)" in out.stdout


def test_usage_store_queries_as_pasted(demo_dir):
    block = next(b for name, b in run_blocks() if name == "docs/USAGE.md")
    out = paste(block, demo_dir)
    counts = row_counts(out.stdout)
    assert len(counts) == 2 and min(counts) > 0, out.stdout
    assert re.search(r"^\d+\s+\d+\s+(trained|kept|skipped_easy|deferred_hard|surplus)\s", out.stdout, flags=re.M)


def test_sql_csv_ends_lines_with_newline_only(demo_dir):
    out = subprocess.run([EXE, "sql", "--store", "runs/pc.duckdb", "--csv", "SELECT run_id, method FROM runs"],
                         cwd=demo_dir, capture_output=True, check=True).stdout
    assert b"\r" not in out and out.count(b"\n") == 4
