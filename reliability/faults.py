"""The fault-injection suite's summary for docs/RELIABILITY.md (issue 18). Run: ``make faults`` or

    .venv/bin/python reliability/faults.py --write docs/RELIABILITY.md

Runs ``tests/integration/faults`` (real processes, real files, real DuckDB) through pytest with a JUnit report and
counts, per file: cases tried, held (passed), and not held. Every case asserts that no step is lost or duplicated,
that no other run is touched, that the message names the fix and that a user error prints no traceback, so a held
case lost nothing; a case that does not hold is listed by name (inspect it: it may have lost data).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # _report.py: the docs sections
from _report import RELIABILITY_HEADER, machine, write_section

ROOT = Path(__file__).resolve().parent.parent
SUITE = "tests/integration/faults"
AREAS = {"test_faults_inputs": "inputs, configs, --set values, store paths",
         "test_faults_runs": "writers, checkpoints, stops",
         "test_faults_segments": "Dagster segment state, the sensor",
         "test_faults_store": "names, damaged / swapped steps, sql, links, stale status",
         "test_faults_tampering": "tampered checkpoints, custom model code, full disk in torch.save",
         "test_faults_paste": "printed commands pasted into bash under hostile paths",
         "test_faults_outputs": "user-named outputs (devices, FIFOs, links), payload conversion",
         "test_faults_loads": "loads bounded by the manifest (allocating pickles, deflated entries, storages)",
         "test_faults_tampered_data": "tampered plain data (RNG states, trainer state, safetensors, meta.json)",
         "test_faults_disk_schema": "full disks (blocks, inodes), hand-altered schema versions",
         "test_faults_hostile_inputs": "huge values, schedule windows, ignored settings, bad step counts",
         "test_faults_planner": "sim-fit / plan on untrained runs, odd but legal rows, a run being written"}


def run_suite(workers: int) -> tuple[list[dict], float]:
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "faults.xml"
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-m", "pytest", "-q", SUITE, f"--junitxml={xml}", "-p", "no:cacheprovider",
                        *(["-n", str(workers), "--dist", "loadfile"] if workers > 1 else [])], cwd=ROOT, check=False)
        wall = time.monotonic() - t0
        cases = []
        for tc in ET.parse(xml).getroot().iter("testcase"):
            outcome = "held"
            if tc.find("failure") is not None or tc.find("error") is not None:
                outcome = "not held"
            elif tc.find("skipped") is not None:
                outcome = "skipped"
            cases.append({"file": tc.get("classname", "").rsplit(".", 1)[-1], "name": tc.get("name"),
                          "outcome": outcome})
    return cases, wall


def section(cases: list[dict], wall: float, cmd: str) -> str:
    lines = [
        "## Fault-injection summary (`reliability/faults.py`)",
        "",
        f"Command: `{cmd}`. Machine: {machine()}. Wall time: {wall / 60:.1f} min.",
        "",
        "| suite | area | cases tried | held | not held | skipped | data lost | code run | outside the store touched |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    files = sorted({c["file"] for c in cases})
    for f in [*files, None]:
        sub = [c for c in cases if f is None or c["file"] == f]
        n = {k: sum(c["outcome"] == k for c in sub) for k in ("held", "not held", "skipped")}
        lost = "0" if not n["not held"] else "see below"  # a held case asserts both; a failed one: inspect it
        name = f"`{f}`" if f else "**all**"
        lines.append(f"| {name} | {AREAS.get(f, '') if f else ''} | {len(sub)} | {n['held']} | {n['not held']} | "
                     f"{n['skipped']} | {lost} | {lost} | {lost} |")
    bad = [c for c in cases if c["outcome"] != "held"]
    if bad:
        lines += ["", "Not held or skipped:", ""] + [f"- `{c['file']}::{c['name']}`: {c['outcome']}" for c in bad]
    lines += ["", "A held case asserts its steps whole (each exactly once), the other runs untouched and, for a user "
              "error, the fix named without a traceback: data lost is 0 for every held case. A case that plants code "
              "(a pickle payload, custom model code, a YAML tag) asserts that its marker file was never created: code "
              "run is 0 for every held case. A case whose risk is a path outside the store (a pasted fix text, an output onto a "
              "device node or a link, a conversion) asserts that the decoy files and nodes beside it are unchanged: outside "
              "the store touched is 0 for every held case."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=2, help="pytest-xdist workers (default 2)")
    ap.add_argument("--write", default=str(ROOT / "docs/RELIABILITY.md"), help="the Markdown file ('' = none)")
    args = ap.parse_args(argv)
    cases, wall = run_suite(args.workers)
    body = section(cases, wall, f"python reliability/faults.py --workers {args.workers}")
    print(body)
    if args.write:
        write_section(Path(args.write), "faults-summary", body, RELIABILITY_HEADER)
    return 0 if all(c["outcome"] == "held" for c in cases) else 1


if __name__ == "__main__":
    raise SystemExit(main())
