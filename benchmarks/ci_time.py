"""CI's time, part by part (issue 53), on a fresh clone of this checkout's HEAD as .ci/run gets it:

    .venv/bin/python benchmarks/ci_time.py --parts install --write docs/BENCHMARKS.md   # a few minutes
    .venv/bin/python benchmarks/ci_time.py --write docs/BENCHMARKS.md                   # every part: about an hour
    .venv/bin/python benchmarks/ci_time.py --load --write docs/BENCHMARKS.md            # the same under load

Parts, in .ci/run's order and in one clone (a part after `install` needs it): `install` (`make install` in the fresh
clone with an empty uv cache, then `make install` of a second fresh clone with the cache the first one filled),
`test` (`make test`), `test-scale` (`make test-scale`, its own environment's install included), `standalone`
(`.ci/standalone`). The clone has nothing beside it, as a user's. ``--load``: a second `make test` in another clone
(installed first, not timed) runs beside the measured parts. Each part's row of the "CI time"
section is replaced, the other rows are kept (parts measured on other days say when).

Each row also says how busy the machine's CPUs were during the part (``/proc/stat``: a part far below 100% waits on
something, start-ups, sensor ticks, sleeps, and more workers would fill it), and the `test` part's JUnit report
(``--junitxml``, through ``PYTEST_ADDOPTS``) gives the files that take longest (sum of their tests' setup, call
and teardown on one worker) with the share of the workers' time spent in tests: what
``tests/support/slow_files.py`` orders by.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import machine, write_section

ROOT = Path(__file__).resolve().parent.parent
SECTION = "ci-time"
PARTS = {  # part -> (what runs in the clone, what it is)
    "install": (["make", "install"], "`make install`: the venv, uv, then `uv sync --locked --compile-bytecode` from uv.lock"),
    "test": (["make", "test"], "`make test`: lint, then the suite on 2 workers"),
    "test-scale": (["make", "test-scale"], "`make test-scale`: the scale environment's install, then `-m scale`"),
    "standalone": ([".ci/standalone"], "`.ci/standalone`: the demo's data and a one-segment run in a bare copy"),
}
IDLE, LOADED = "no load added", "beside a second `make test`"
ROW = re.compile(rf"^\| (?P<part>[^|]+?) \| (?P<load>{re.escape(IDLE)}|{re.escape(LOADED)}) \|")
JUNIT_PARTS = ("test", "test-scale")
"""Parts run by pytest: their JUnit report gives each test's seconds."""
SLOWEST_FILES = 15
FILES_HEADING = "### Where the test time went"
"""The heading of the section's last part, the slowest files (kept as it was by a run that times no test part)."""


def cpu_times() -> tuple[int, int] | None:
    """(busy, total) jiffies of every CPU since boot, from /proc/stat (None where there is none)."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError, IndexError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    total = sum(fields[:8])  # user nice system idle iowait irq softirq steal (guest is inside user)
    return total - idle, total


def busy_share(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    """The share of the machine's CPU time that was busy between two :func:`cpu_times` readings."""
    if before is None or after is None or after[1] <= before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1])


def test_file(classname: str, repo: Path) -> str:
    """The test file of a JUnit ``classname`` (``tests.unit.x.test_y`` or ``tests.unit.x.test_y.TestClass``)."""
    parts = classname.split(".")
    for end in range(len(parts), 0, -1):
        candidate = "/".join(parts[:end]) + ".py"
        if (repo / candidate).is_file():
            return candidate
    return "/".join(parts) + ".py"


def seconds_by_file(junit: Path, repo: Path) -> dict[str, tuple[int, float]]:
    """{test file: (tests, seconds)} from a pytest JUnit report (a test's time there is its setup, call and
    teardown)."""
    out: dict[str, list] = defaultdict(lambda: [0, 0.0])
    for case in ET.parse(junit).getroot().iter("testcase"):
        entry = out[test_file(case.get("classname", ""), repo)]
        entry[0] += 1
        entry[1] += float(case.get("time") or 0.0)
    return {f: (n, s) for f, (n, s) in out.items()}


def workers_of(log: Path) -> int | None:
    """The pytest-xdist workers a part's log says it ran (``-n N``), None when not parallel."""
    m = re.search(r"pytest .*?-n (\d+)", log.read_text(errors="replace")) if log.exists() else None
    return int(m.group(1)) if m and int(m.group(1)) > 0 else None


def files_table(by_file: dict[str, tuple[int, float]], wall_s: float, workers: int | None, label: str) -> list[str]:
    """The slowest files of a part, and the share of its workers' time that tests took."""
    total = sum(s for _, s in by_file.values())
    ranked = sorted(by_file.items(), key=lambda kv: -kv[1][1])[:SLOWEST_FILES]
    lanes = workers or 1
    lines = [f"`{label}`: {sum(n for n, _ in by_file.values())} tests, {total:.0f} s of test time on {lanes} "
             f"worker{'s' if lanes > 1 else ''} in {wall_s:.0f} s of wall time ({total / (wall_s * lanes):.0%} of the "
             "workers' time in tests; the rest is start-up, collection and waiting for the last file). The slowest "
             "files:",
             "",
             "| file | tests | seconds | share of test time |",
             "|---|---:|---:|---:|"]
    lines += [f"| `{f}` | {n} | {s:.0f} | {s / total:.1%} |" for f, (n, s) in ranked]
    return lines


def fresh_clone(dest: Path) -> Path:
    """A clone of HEAD (committed files only, as CI's) at ``dest/pc-pipelines``, nothing beside it."""
    repo = dest / "pc-pipelines"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(repo)], check=True)
    return repo


def timed(cmd: list[str], cwd: Path, env: dict[str, str], log: Path) -> float:
    """Seconds ``cmd`` took in ``cwd``; its output goes to ``log``; a failure stops the measurement, saying where."""
    t0 = time.perf_counter()
    with log.open("w") as out:
        rc = subprocess.run(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, check=False).returncode
    seconds = time.perf_counter() - t0
    if rc != 0:
        tail = "".join(log.read_text().splitlines(keepends=True)[-30:])
        raise SystemExit(f"ci_time: `{' '.join(cmd)}` failed in {cwd} (exit {rc}) after {seconds:.0f} s; its log: "
                         f"{log}\n{tail}\nFix it, then measure again.")
    return seconds


def start_load(dest: Path, env: dict[str, str]) -> subprocess.Popen:
    """A second `make test` in its own clone (installed first, not timed), in a process group of its own."""
    repo = fresh_clone(dest)
    timed(["make", "install"], repo, env, dest / "load-install.log")
    with (dest / "load-test.log").open("w") as out:
        return subprocess.Popen(["make", "test"], cwd=repo, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def existing_rows(path: Path | None) -> dict[tuple[str, str], str]:
    """The rows of the section already in ``path`` by (part, idle / under load)."""
    if path is None or not path.exists():
        return {}
    text = path.read_text()
    m = re.search(rf"<!-- {SECTION}:begin -->(.*?)<!-- {SECTION}:end -->", text, re.S)
    rows = {}
    for line in (m.group(1).splitlines() if m else []):
        if r := ROW.match(line):
            cells = line.split(" | ")
            if len(cells) == 6:  # a row written before the CPU busy column: none measured
                line = " | ".join([*cells[:4], "-", *cells[4:]])
            rows[(r["part"], r["load"])] = line
    return rows


def previous_files(path: Path | None) -> str:
    """The slowest-files part of the section already in ``path`` (kept when this run timed no test part)."""
    if path is None or not path.exists():
        return ""
    m = re.search(rf"{re.escape(FILES_HEADING)}.*?(?=\n?<!-- {SECTION}:end -->)", path.read_text(), re.S)
    return m.group(0).rstrip("\n") if m else ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--parts", nargs="+", choices=list(PARTS), default=list(PARTS),
                    help="which parts to time (default all; a part after install needs install)")
    ap.add_argument("--load", action="store_true", help="a second `make test` runs beside the measured parts")
    ap.add_argument("--keep", action="store_true", help="keep the clones (printed) instead of removing them")
    ap.add_argument("--write", type=Path, default=None, help="update this BENCHMARKS.md section")
    args = ap.parse_args()
    parts = [p for p in PARTS if p in args.parts]
    if parts and parts[0] != "install":
        ap.error(f"--parts {' '.join(parts)}: the parts after install run in the clone `install` made; add install")
    load_word = LOADED if args.load else IDLE
    flags = ("" if parts == list(PARTS) else " --parts " + " ".join(parts)) + (" --load" if args.load else "")
    tmp = Path(tempfile.mkdtemp(prefix="ci-time-"))
    env = {**os.environ, "UV_CACHE_DIR": str(tmp / "uv-cache"), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("VIRTUAL_ENV", None)
    load = start_load(tmp / "load", env) if args.load else None
    measured: list[tuple[str, str, float, str, float | None]] = []  # (part, what, seconds, machine, CPU busy)
    file_tables: list[str] = []
    try:
        repo = fresh_clone(tmp / "main")
        for part in parts:
            cmd, what = PARTS[part]
            at, cpu0 = machine(), cpu_times()
            junit = tmp / f"{part}-junit.xml"
            part_env = {**env, "PYTEST_ADDOPTS": f"--junitxml={junit}"} if part in JUNIT_PARTS else env
            seconds = timed(cmd, repo, part_env, tmp / f"{part}.log")
            busy = busy_share(cpu0, cpu_times())
            print(f"ci_time: {part}: {seconds:.0f} s", flush=True)
            measured.append(("install, empty uv cache" if part == "install" else part, what, seconds, at, busy))
            if junit.is_file():
                file_tables += ["", *files_table(seconds_by_file(junit, repo), seconds,
                                                 workers_of(tmp / f"{part}.log"), part)]
            if part == "install":  # the same install again in a second clone, the uv cache now filled
                again = fresh_clone(tmp / "again")
                at, cpu0 = machine(), cpu_times()
                seconds = timed(cmd, again, env, tmp / "install-again.log")
                print(f"ci_time: install, uv cache filled: {seconds:.0f} s", flush=True)
                measured.append(("install, uv cache filled", what + " (a second fresh clone)", seconds, at,
                                 busy_share(cpu0, cpu_times())))
    finally:
        if load is not None:
            os.killpg(load.pid, signal.SIGTERM)
            load.wait()
        if args.keep:
            print(f"ci_time: the clones and logs are in {tmp}", file=sys.stderr)
        else:
            subprocess.run(["rm", "-rf", str(tmp)], check=False)

    day = time.strftime("%Y-%m-%d")
    rows = existing_rows(args.write)
    for label, what, seconds, at, busy in measured:
        cpu = "-" if busy is None else f"{busy:.0%}"
        rows[(label, load_word)] = (f"| {label} | {load_word} | {seconds:.0f} | {seconds / 60:.1f} | {cpu} | {what} | "
                                    f"{day}, `ci_time.py{flags}`; {at} |")
    order = ["install, empty uv cache", "install, uv cache filled", *list(PARTS)[1:]]
    ordered = sorted(rows.items(), key=lambda kv: (kv[0][1] != IDLE, order.index(kv[0][0])
                                                   if kv[0][0] in order else len(order)))
    lines = [
        "## CI time",
        "",
        "Command: `.venv/bin/python benchmarks/ci_time.py --write docs/BENCHMARKS.md` (every part, about an hour; "
        "`--parts install ...` times some, `--load` beside a second `make test`; a run replaces the rows of the parts "
        "it timed and keeps the others, each row says which run measured it)",
        "",
        ".ci/run's parts on a fresh clone of HEAD (`git clone`, nothing beside it), one after the other in one clone. "
        "The install's first row starts with an empty uv cache (every wheel downloaded, torch from /opt/wheels); "
        "the second is another fresh clone with the cache the first filled (what a machine that installed once "
        "gets). The machine's load average at each part's start is in its row; CPU busy: the share of the "
        "machine's CPU time that was busy during the part (all processes, the load's included). Targets (issue 53): "
        "install under 3 minutes; .ci/run under 25 minutes idle, under 50 beside a second `make test`.",
        "",
        "| part | load | seconds | minutes | CPU busy | what runs | measured; machine |",
        "|---|---|---:|---:|---:|---|---|",
        *[line for _, line in ordered],
    ]
    if {label for label, *_ in measured} >= {"install, empty uv cache", *list(PARTS)[1:]}:
        total = sum(sec for label, _, sec, _, _ in measured if label != "install, uv cache filled")
        lines += ["", f"In all ({day}, {load_word}): {total:.0f} s ({total / 60:.1f} min) for install (empty uv cache), "
                      "`make test`, `make test-scale` and `.ci/standalone` one after the other, as `.ci/run` runs them."]
    old_files = previous_files(args.write)
    if file_tables:  # this run's slowest files replace the last run's
        lines += ["", FILES_HEADING, "", f"Measured {day}, `ci_time.py{flags}`, {load_word}.", *file_tables]
    elif old_files:
        lines += ["", old_files]
    text = "\n".join(lines)
    print(text)
    if args.write:
        write_section(args.write, SECTION, text)
        print(f"\nwritten to {args.write}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
