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
    rows = [f"| install, empty uv cache | {ci_time.IDLE} | 50 | 0.8 | 91% | x | y |",
            f"| test | {ci_time.LOADED} | 1800 | 30.0 | 100% | x | y |"]
    ci_time.write_section(doc, ci_time.SECTION, "\n".join(["## CI time", "", "| part | load |", "|---|---|", *rows]))
    assert ci_time.existing_rows(doc) == {("install, empty uv cache", ci_time.IDLE): rows[0],
                                          ("test", ci_time.LOADED): rows[1]}
    assert ci_time.existing_rows(tmp_path / "missing.md") == {}


def test_a_part_after_the_install_needs_it():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "ci_time.py"), "--parts", "test"],
                         capture_output=True, text=True, check=False)
    assert out.returncode == 2 and "the parts after install run in the clone `install` made; add install" in out.stderr


def test_a_row_written_before_the_cpu_column_gets_a_dash(ci_time, tmp_path):
    doc = tmp_path / "BENCHMARKS.md"
    old = f"| standalone | {ci_time.IDLE} | 174 | 2.9 | `.ci/standalone`: x | 2026-11-29; machine |"
    ci_time.write_section(doc, ci_time.SECTION, "\n".join(["## CI time", "", "| part |", "|---|", old]))
    assert ci_time.existing_rows(doc)[("standalone", ci_time.IDLE)] == (
        f"| standalone | {ci_time.IDLE} | 174 | 2.9 | - | `.ci/standalone`: x | 2026-11-29; machine |")


def test_the_busy_share_of_two_readings(ci_time):
    assert ci_time.busy_share((100, 1000), (250, 1200)) == 0.75
    assert ci_time.busy_share((100, 1000), (100, 1000)) is None and ci_time.busy_share(None, (1, 2)) is None
    busy, total = ci_time.cpu_times()
    assert 0 <= busy <= total


def test_the_slowest_files_from_a_junit_report(ci_time, tmp_path):
    """Seconds summed per file (a class's tests under its file), ranked, with the workers' share in tests."""
    (tmp_path / "tests" / "unit").mkdir(parents=True)
    for name in ("test_a.py", "test_b.py"):
        (tmp_path / "tests" / "unit" / name).write_text("")
    junit = tmp_path / "junit.xml"
    junit.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.unit.test_a" name="t1" time="10.0"/>'
        '<testcase classname="tests.unit.test_a.TestX" name="t2" time="5.5"/>'
        '<testcase classname="tests.unit.test_b" name="t3" time="30.0"/>'
        '</testsuite></testsuites>')
    by_file = ci_time.seconds_by_file(junit, tmp_path)
    assert by_file == {"tests/unit/test_a.py": (2, 15.5), "tests/unit/test_b.py": (1, 30.0)}
    lines = ci_time.files_table(by_file, wall_s=50, workers=2, label="test")
    assert lines[0].startswith("`test`: 3 tests, 46 s of test time on 2 workers in 50 s of wall time (46% of")
    assert lines[4:] == ["| `tests/unit/test_b.py` | 1 | 30 | 65.9% |", "| `tests/unit/test_a.py` | 2 | 16 | 34.1% |"]
    log = tmp_path / "test.log"
    log.write_text(".venv/bin/python -m pytest -q -n 2 --dist loadfile\n")
    assert ci_time.workers_of(log) == 2 and ci_time.workers_of(tmp_path / "none.log") is None


def test_the_slowest_files_part_is_kept_by_a_run_that_times_no_test(ci_time, tmp_path):
    doc = tmp_path / "BENCHMARKS.md"
    files = f"{ci_time.FILES_HEADING}\n\nMeasured 2026-11-29.\n\n| file | tests |\n|---|---:|\n| `tests/x.py` | 3 |"
    ci_time.write_section(doc, ci_time.SECTION, "\n".join(["## CI time", "", "| part |", "|---|", "", files]))
    assert ci_time.previous_files(doc) == files
    assert ci_time.previous_files(tmp_path / "missing.md") == ""
