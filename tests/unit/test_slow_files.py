"""tests/support/slow_files.py: `make test` hands its workers the slowest files first (issue 53), so every file it
names exists, the Makefile keeps xdist from reordering the files, and the sort puts them first in order."""

import re
from pathlib import Path

import slow_files

ROOT = Path(__file__).resolve().parents[2]


def test_every_slow_file_exists():
    assert [p for p in slow_files.SECONDS if not (ROOT / p).is_file()] == []


def test_make_test_hands_out_files_in_collection_order():
    line = re.search(r"^test: .*\n\t(.*)$", (ROOT / "Makefile").read_text(), re.M).group(1)
    assert "--dist loadfile" in line and "--no-loadscope-reorder" in line, line


def test_the_slowest_files_sort_first_and_the_rest_keep_their_order():
    files = ["tests/unit/test_a.py", "tests/e2e/test_demo_stop.py", "tests/unit/test_b.py",
             "tests/research/test_bench_study_e2e.py", "tests/unit/test_a.py"]
    assert sorted(files, key=slow_files.order) == [
        "tests/research/test_bench_study_e2e.py", "tests/e2e/test_demo_stop.py", "tests/unit/test_a.py",
        "tests/unit/test_b.py", "tests/unit/test_a.py"]
