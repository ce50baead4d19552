"""benchmarks/ci_time.py (docs/BENCHMARKS.md "CI time"): a run that times some parts keeps the rows of the others,
and a part after the install is refused without it (it runs in the clone the install made), saying what to add."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def ci_time():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import ci_time

        yield ci_time
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def test_the_rows_already_written_are_read_back_by_part_and_load(ci_time, tmp_path):
    doc = tmp_path / "BENCHMARKS.md"
    rows = [f"| install, empty uv cache | {ci_time.IDLE} | 50 | 0.8 | x | y |",
            f"| test | {ci_time.LOADED} | 1800 | 30.0 | x | y |"]
    ci_time.write_section(doc, ci_time.SECTION, "\n".join(["## CI time", "", "| part | load |", "|---|---|", *rows]))
    assert ci_time.existing_rows(doc) == {("install, empty uv cache", ci_time.IDLE): rows[0],
                                          ("test", ci_time.LOADED): rows[1]}
    assert ci_time.existing_rows(tmp_path / "missing.md") == {}


def test_a_part_after_the_install_needs_it():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "ci_time.py"), "--parts", "test"],
                         capture_output=True, text=True, check=False)
    assert out.returncode == 2 and "the parts after install run in the clone `install` made; add install" in out.stderr
