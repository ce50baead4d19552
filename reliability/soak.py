"""The soak (issue 18): concurrent real runs writing one store, a reader in a loop, a writer SIGKILLed at random
every ~30 s and resumed; afterwards every run's steps must be complete and exactly once. Run: ``make soak`` or

    .venv/bin/python reliability/soak.py --minutes 30 --write docs/RELIABILITY.md

Writers are ``pilot-commit train`` processes (tiny config, a checkpoint every step) of four runs: PC seeds 0 and 1,
GRPO and DAPO, all in one store. Every ``--kill-every`` seconds on average (uniform in [0.5x, 1.5x], seeded) one live
writer gets SIGKILL and is restarted at once with ``--resume``. A reader thread queries the store the whole time
(``runs`` and a duplicate / gap check over ``steps``). At the end every writer gets SIGTERM (a clean stop, status
``stopped``), then the store is checked:

* each run's steps are 0..k, each exactly once, and each row's values are the ones its writer printed last for
  that step (a replayed step must print the same values as its first attempt: the resume is deterministic);
* no eval row twice; ``pilot-commit check`` finds nothing; no writer ended other than by our signals;
* the reader never failed and never saw a duplicated step or a gap.

The figures go to the ``soak`` section of docs/RELIABILITY.md (``--write ''`` prints them only).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # _report.py: the docs sections
from _report import RELIABILITY_HEADER, machine, write_section

from pc_pipelines.store import Store

ROOT = Path(__file__).resolve().parent.parent
EXE = [sys.executable, "-m", "pc_pipelines.cli"]
RUNS = {"soak-pc-s0": ("pc", 0), "soak-pc-s1": ("pc", 1), "soak-grpo-s0": ("grpo", 0), "soak-dapo-s0": ("dapo", 0)}
# A tiny run: a step takes a second or two on one core, so a 30-minute soak writes hundreds of steps per run.
TRAIN = ["--set", "allocator.train_batch=8", "--set", "allocator.n=8", "--set", "allocator.pilot_wave=1", "--set", "allocator.commit_mean=6", "--set", "task.num_prompts=200",
         "--set", "training.ppo_minibatch=4",
         "--set", "training.eval_every=20", "--set", "training.eval_samples=1",
         "--set", "training.checkpoint_every=1", "--set", "training.keep_checkpoints=3"]
STEPS = 100_000  # never reached: the soak ends every writer with SIGTERM


@dataclass
class Writer:
    run_id: str
    method: str
    seed: int
    out: Path
    logs: Path
    proc: subprocess.Popen | None = None
    incarnation: int = 0
    kills: int = 0
    unexpected: list[str] = field(default_factory=list)
    final_exit: int | None = None

    def log(self, i: int, kind: str) -> Path:
        return self.logs / f"{self.run_id}.{i:03d}.{kind}"

    def start(self, resume: bool) -> None:
        self.incarnation += 1
        i = self.incarnation
        cmd = [*EXE, "train", "--method", self.method, "--seed", str(self.seed), "--steps", str(STEPS), "--out",
               str(self.out), "--run-name", self.run_id, "--json", "--quiet", *TRAIN,
               *(["--set", "allocator.n_pilot=2"] if self.method == "pc" else []), *(["--resume"] if resume else [])]
        with self.log(i, "out").open("w") as out, self.log(i, "err").open("w") as err:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True)

    def printed(self) -> list[dict]:
        """Every step line printed, in order of incarnation."""
        lines = []
        for i in range(1, self.incarnation + 1):
            for ln in self.log(i, "out").read_text().splitlines():
                with contextlib.suppress(json.JSONDecodeError):  # a SIGKILL may cut the last line
                    lines.append(json.loads(ln))
        return lines


class Reader(threading.Thread):
    """Queries the store in a loop until stopped; counts queries, failures, duplicated steps and gaps seen."""

    def __init__(self, store: Path) -> None:
        super().__init__(daemon=True)
        self.store, self.halt = Store(store), threading.Event()
        self.queries = self.errors = self.duplicates = self.gaps = 0
        self.first_error = ""

    def run(self) -> None:
        while not self.halt.is_set():
            try:
                if not self.store.path.exists():
                    time.sleep(0.2)
                    continue
                self.store.list_runs()
                rows = self.store.query("SELECT run_id, count(*) AS n, count(DISTINCT step) AS d, min(step) AS lo, "
                                        "max(step) AS hi FROM steps GROUP BY run_id")
                self.queries += 2
                self.duplicates += sum(r["n"] != r["d"] for r in rows)
                self.gaps += sum(r["lo"] != 0 or r["hi"] - r["lo"] + 1 != r["d"] for r in rows)
            except Exception as exc:  # every failure is a finding, counted and reported
                self.errors += 1
                self.first_error = self.first_error or f"{type(exc).__name__}: {exc}"[:500]
            time.sleep(0.05)


def soak(minutes: float, kill_every: float, seed: int, out: Path, progress: bool = True) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    if any(out.iterdir()):
        raise SystemExit(f"{out} is not empty. Fix: pass a fresh --out (the soak starts its runs from scratch).")
    logs = out / "logs"
    logs.mkdir()
    store = out / "pc.duckdb"
    writers = [Writer(run, m, s, out, logs) for run, (m, s) in RUNS.items()]
    for w in writers:
        w.start(resume=False)
    reader = Reader(store)
    reader.start()
    rng = random.Random(seed)
    t0 = time.monotonic()
    end = t0 + minutes * 60
    next_kill = t0 + kill_every * rng.uniform(0.5, 1.5)
    last_report = t0
    while time.monotonic() < end:
        time.sleep(0.2)
        for w in writers:  # a writer that ended on its own is a finding: recorded, then resumed
            if w.proc.poll() is not None:
                w.unexpected.append(f"incarnation {w.incarnation} exited {w.proc.returncode}: "
                                    + w.log(w.incarnation, "err").read_text()[-400:])
                w.start(resume=True)
        now = time.monotonic()
        if now >= next_kill:
            w = rng.choice(writers)
            w.proc.send_signal(signal.SIGKILL)
            w.proc.wait()
            w.kills += 1
            w.start(resume=True)
            next_kill = now + kill_every * rng.uniform(0.5, 1.5)
        if progress and now - last_report >= 60:
            last_report = now
            print(f"soak {(now - t0) / 60:5.1f}/{minutes:g} min: kills {sum(w.kills for w in writers)}, reader "
                  f"queries {reader.queries}, errors {reader.errors}", flush=True)
    for w in writers:
        w.proc.send_signal(signal.SIGTERM)
    for w in writers:
        try:
            rc = w.proc.wait(timeout=300)
        except subprocess.TimeoutExpired:
            w.proc.kill()
            rc = w.proc.wait()
        w.final_exit = rc
        # 143: stopped cleanly by its handler; -15: still starting up (handlers not installed yet, nothing written)
        if rc not in (143, -signal.SIGTERM):
            w.unexpected.append(f"final SIGTERM: exit {rc}: " + w.log(w.incarnation, "err").read_text()[-400:])
    reader.halt.set()
    reader.join(timeout=120)
    wall = time.monotonic() - t0
    return verify(Store(store), writers, reader, wall)


def values(row: dict) -> tuple:
    """What a step row and its printed line must agree on."""
    return row["sampled_rollouts"], row["trained_rollouts"], row["loss"]


def verify(store: Store, writers: list[Writer], reader: Reader, wall: float) -> dict:
    runs = {r["run_id"]: r for r in store.list_runs()}
    per_run = []
    for w in writers:
        rows = store.query("SELECT step, sampled_rollouts, trained_rollouts, loss FROM steps WHERE run_id = ? "
                           "ORDER BY step", [w.run_id])
        steps = [r["step"] for r in rows]
        printed: dict[int, list[dict]] = {}
        for p in w.printed():
            printed.setdefault(p["step"], []).append(p)
        replayed = [s for s, ps in printed.items() if len(ps) > 1]
        differing = [s for s in replayed if len({values(p) for p in printed[s]}) > 1]
        mismatched = [r["step"] for r in rows if r["step"] in printed and values(r) != values(printed[r["step"]][-1])]
        evals = store.query("SELECT count(*) AS n, count(DISTINCT (step, benchmark)) AS d FROM eval_results "
                            "WHERE run_id = ?", [w.run_id])[0]
        per_run.append({
            "run_id": w.run_id, "method": w.method, "steps": len(steps),
            "exactly_once": steps == list(range(1, len(steps) + 1)),
            "unprinted": sum(s not in printed for s in steps),
            "values_match": not mismatched, "incarnations": w.incarnation, "kills": w.kills,
            "replayed": len(replayed), "replays_differing": len(differing),
            "eval_rows": evals["n"], "eval_duplicates": evals["n"] - evals["d"],
            "status": runs.get(w.run_id, {}).get("status"), "unexpected": w.unexpected, "final_exit": w.final_exit,
        })
    check = subprocess.run([*EXE, "check", "--store", str(store.path), "--json"], capture_output=True, text=True,
                           check=False)
    problems = json.loads(check.stdout)["problems"] if check.stdout.strip() else [{"error": check.stderr[-500:]}]
    ok = (all(r["exactly_once"] and r["values_match"] and not r["replays_differing"] and not r["eval_duplicates"]
              and not r["unexpected"] and (r["status"] == "stopped" or r["final_exit"] != 143) for r in per_run)
          and not problems and reader.errors == 0 and reader.duplicates == 0 and reader.gaps == 0)
    return {"ok": ok, "wall_s": wall, "runs": per_run, "check_problems": problems,
            "reader": {"queries": reader.queries, "errors": reader.errors, "duplicates_seen": reader.duplicates,
                       "gaps_seen": reader.gaps, "first_error": reader.first_error}}


def section(res: dict, cmd: str) -> str:
    rd = res["reader"]
    lines = [
        "## Soak (`reliability/soak.py`)",
        "",
        f"Command: `{cmd}`. Machine: {machine()}. Wall time: {res['wall_s'] / 60:.1f} min. Verdict: "
        f"**{'every run complete, each step exactly once' if res['ok'] else 'FAILED (see below)'}**.",
        "",
        "| run | steps | exactly once | values = last printed | kills (SIGKILL + `--resume`) | replayed steps "
        "(identical) | eval rows (duplicates) | final SIGTERM: exit, status | unexpected exits |",
        "|---|---:|---|---|---:|---:|---:|---|---:|",
    ]
    for r in res["runs"]:
        lines.append(f"| {r['run_id']} | {r['steps']} | {'yes' if r['exactly_once'] else 'NO'} | "
                     f"{'yes' if r['values_match'] else 'NO'} | {r['kills']} | {r['replayed']} "
                     f"({r['replayed'] - r['replays_differing']}) | {r['eval_rows']} ({r['eval_duplicates']}) | "
                     f"{r['final_exit']}, {r['status']} | {len(r['unexpected'])} |")
    lines += [
        "",
        f"Reader (a thread querying `runs` and the steps' duplicate / gap check in a loop): {rd['queries']} queries, "
        f"{rd['errors']} failed, {rd['duplicates_seen']} saw a duplicated step, {rd['gaps_seen']} saw a gap. "
        f"`pilot-commit check` afterwards: {len(res['check_problems'])} problems.",
    ]
    if any(r["final_exit"] == -signal.SIGTERM for r in res["runs"]):
        lines.append("Exit -15: the final SIGTERM reached a writer still starting up (a `--resume` after a SIGKILL, "
                     "before it installs its handler): it ends at once having written nothing, and the run keeps the "
                     "status its SIGKILLed predecessor left (`running`), as after any SIGKILL.")
    if rd["first_error"]:
        lines.append(f"First reader error: `{rd['first_error']}`.")
    for r in res["runs"]:
        for u in r["unexpected"]:
            lines.append(f"- {r['run_id']}: {u!r}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=30.0, help="how long the writers run (default 30)")
    ap.add_argument("--kill-every", type=float, default=30.0, help="mean seconds between SIGKILLs (default 30)")
    ap.add_argument("--seed", type=int, default=0, help="seeds which writer is killed when")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/out/soak"), help="a fresh directory for runs and store")
    ap.add_argument("--write", default=str(ROOT / "docs/RELIABILITY.md"), help="the Markdown file ('' = none)")
    ap.add_argument("--fresh", action="store_true", help="delete --out first")
    ap.add_argument("--render", action="store_true", help="re-render the section from <out>/soak.json, run nothing")
    args = ap.parse_args(argv)
    out = Path(args.out)
    if args.render:
        saved = json.loads((out / "soak.json").read_text())
        body = section(saved["result"], saved["command"])
        print(body)
        if args.write:
            write_section(Path(args.write), "soak", body, RELIABILITY_HEADER)
        return 0 if saved["result"]["ok"] else 1
    if args.fresh and out.exists():
        shutil.rmtree(out)
    res = soak(args.minutes, args.kill_every, args.seed, out)
    cmd = f"python reliability/soak.py --minutes {args.minutes:g} --kill-every {args.kill_every:g} --seed {args.seed}"
    body = section(res, cmd)
    print(body)
    (out / "soak.json").write_text(json.dumps({"command": cmd, "result": res}, indent=1))
    if args.write:
        write_section(Path(args.write), "soak", body, RELIABILITY_HEADER)
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
