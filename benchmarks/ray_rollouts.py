"""Data-parallel rollouts: rollouts/s of the single TransformersEngine, a RayRolloutEngine with 1 actor and one with
2 actors, side by side in one run, on the embedded warm start.

    python benchmarks/ray_rollouts.py --write docs/BENCHMARKS.md

All three generate the same round (``--prompts`` embedded training prompts x ``--samples`` at the training
temperature, up to ``max_response_length`` new tokens) with the same ``--chunk`` (``max_batch_sequences``: the round
is cut into ceil(prompts x samples / chunk) chunks, dealt to the actors round-robin) and one torch thread per engine
(the single engine in this process, one per actor), so their outputs are identical, which the benchmark checks on
every repetition. The script starts a local Ray (no dashboard) with one CPU per actor of both Ray engines, so
both stay up and the three are timed in turn within each repetition (the order rotates between repetitions); an
idle engine's actors take no CPU. Each engine does one untimed warm-up round. Reported: the median over
``--repeats`` rounds, and the 2-actor / 1-actor and 2-actor / single throughput ratios. The machine's load average at
the start is reported too: on a shared machine other work takes cores from the actors.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import machine, write_section

log = logging.getLogger("benchmarks.ray_rollouts")


def bench(policy: Path, prompts: int, samples: int, chunk: int, repeats: int, actors: list[int]) -> dict:
    import ray
    import torch

    from pc_pipelines.config import resolve
    from pc_pipelines.data.task import embedded_task
    from pc_pipelines.rollout import RayRolloutEngine, RolloutRequest, SamplingParams
    from pc_pipelines.rollout.transformers_engine import TransformersEngine
    from pc_pipelines.training.base_policy import load_policy

    cfg = resolve("embedded", method="pc")
    torch.set_num_threads(1)
    task = embedded_task(cfg.task, cfg.training.prompt_template)
    if prompts > len(task.prompts):
        raise SystemExit(f"--prompts {prompts}: the embedded task has {len(task.prompts)} training prompts. Fix: "
                         "ask for at most that many.")
    model, tok = load_policy(policy)
    reqs = [RolloutRequest(p, samples) for p in task.prompts[:prompts]]
    params = lambda seed: SamplingParams(cfg.training.temperature, cfg.training.top_p,  # noqa: E731
                                         cfg.training.max_response_length, seed=seed)
    ray.init(address="local", num_cpus=sum(actors), include_dashboard=False, object_store_memory=200 * 1024**2,
             _node_ip_address="127.0.0.1")
    engines: dict[str, object] = {"single": TransformersEngine(model, tok, max_batch_sequences=chunk)}
    try:
        for n in actors:
            t0 = time.perf_counter()
            engines[f"{n} actor" + ("s" if n > 1 else "")] = RayRolloutEngine(model, tok, num_actors=n,
                                                                              max_batch_sequences=chunk)
            log.info("%d-actor engine ready in %.1f s", n, time.perf_counter() - t0)
        names = list(engines)
        for name in names:  # warm-up: lazy initialisation in every process
            engines[name].generate(reqs, params(10_000))
        seconds: dict[str, list[float]] = {k: [] for k in names}
        tokens: dict[str, int] = {}
        for r in range(repeats):
            outputs = {}
            for name in names[r % len(names):] + names[: r % len(names)]:
                t0 = time.perf_counter()
                outputs[name] = engines[name].generate(reqs, params(r))
                seconds[name].append(time.perf_counter() - t0)
                tokens[name] = sum(len(x.token_ids) for o in outputs[name] for x in o.rollouts)
                log.info("repeat %d/%d %-9s %.2f s", r + 1, repeats, name, seconds[name][-1])
            different = [k for k in names if outputs[k] != outputs["single"]]
            if different:
                raise SystemExit(f"repeat {r}: {different} returned other rollouts than the single engine (same seed, "
                                 f"same chunk {chunk}): the identity RayRolloutEngine promises is broken.")
    finally:
        for name, engine in engines.items():
            if name != "single":
                engine.close()
        ray.shutdown()
    n = prompts * samples
    med = {k: statistics.median(v) for k, v in seconds.items()}
    return {"rollouts": n, "chunks": -(-n // chunk), "median_s": med, "rps": {k: n / v for k, v in med.items()},
            "tps": {k: tokens[k] / med[k] for k in med}, "names": names}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--policy", help="HF model directory (default: the embedded warm start)")
    ap.add_argument("--prompts", type=int, default=48)
    ap.add_argument("--samples", type=int, default=16)
    ap.add_argument("--chunk", type=int, default=64, help="max_batch_sequences of all three engines")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--write", type=Path, help="write the section `ray-rollouts` into this Markdown file")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    from pc_pipelines.config import resolve
    from pc_pipelines.training.base_policy import ensure_base_policy

    cfg = resolve("embedded", method="pc")
    policy = Path(args.policy) if args.policy else ensure_base_policy(cfg.task, cfg.policy, cfg.training.prompt_template)
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    res = bench(policy, args.prompts, args.samples, args.chunk, args.repeats, [1, 2])
    wall = time.perf_counter() - t0
    single, one, two = (res["rps"][k] for k in res["names"])
    command = "python benchmarks/ray_rollouts.py" + "".join(
        f" --{k} {v}" for k, v in (("prompts", args.prompts), ("samples", args.samples), ("chunk", args.chunk),
                                   ("repeats", args.repeats)) if v != ap.get_default(k))
    lines = [
        "## Data-parallel rollouts over Ray actors (`benchmarks/ray_rollouts.py`)",
        "",
        f"Machine: {machine()}; load average {load:.1f} at the start. Command: `{command} --write docs/BENCHMARKS.md` "
        f"({wall:.0f} s, Ray start and actor start included). Model: the embedded warm start; one torch thread per "
        "engine (the single engine in the driver, one per actor).",
        "",
        f"One round of {res['rollouts']} rollouts ({args.prompts} prompts x {args.samples}, T={cfg.training.temperature}, "
        f"up to {cfg.training.max_response_length} new tokens) in {res['chunks']} chunks of at most {args.chunk} "
        f"sequences, median of {args.repeats}, the three timed in turn; every round's rollouts identical across the "
        "three (checked):",
        "",
        "| engine | seconds | rollouts/s | tokens/s |",
        "|---|---|---|---|",
    ]
    labels = {"single": "TransformersEngine (driver process)", "1 actor": "RayRolloutEngine, 1 actor",
              "2 actors": "RayRolloutEngine, 2 actors"}
    for k in res["names"]:
        lines.append(f"| {labels[k]} | {res['median_s'][k]:.2f} | {res['rps'][k]:,.0f} | {res['tps'][k]:,.0f} |")
    lines += [
        "",
        f"2 actors / 1 actor: **{two / one:.2f}x**; 2 actors / single engine: **{two / single:.2f}x**; 1 actor / "
        f"single engine: {one / single:.2f}x (the same work in another process, plus Ray's transfers of chunks and "
        "rollouts).",
    ]
    text = "\n".join(lines)
    log.info("\n%s", text)
    if args.write:
        write_section(args.write, "ray-rollouts", text)
        log.info("wrote section ray-rollouts of %s", args.write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
