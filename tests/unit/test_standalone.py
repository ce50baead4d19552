"""The repository stands alone: nothing tracked points at a folder beside the checkout (users clone it alone; CI's
clone has one, so this and ``.ci/standalone`` catch what CI would not see). ``docs/history*`` keeps old notes as
they were written."""

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUTSIDE = "../" + "shared"  # spelled apart so that this file does not match itself


def tracked_files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                         capture_output=True, check=True).stdout
    return [f for f in out.decode().split("\0") if f and not f.startswith("docs/history")]


def test_no_tracked_file_names_a_folder_beside_the_repository():
    files = tracked_files()
    assert "README.md" in files and "pc_pipelines/data/evaluation_sets.py" in files  # the listing is the repository's
    hits = []
    for f in files:
        path = ROOT / f
        if not path.is_file():
            continue
        for i, line in enumerate(path.read_bytes().decode("utf-8", "replace").splitlines(), 1):
            if OUTSIDE in line:
                hits.append(f"{f}:{i}: {line.strip()[:120]}")
    assert not hits, "a folder outside the repository is named (ship what it holds in the repository):\n" + "\n".join(
        hits)


def test_the_standalone_check_runs_in_ci():
    assert ".ci/standalone" in (ROOT / ".ci" / "run").read_text()
