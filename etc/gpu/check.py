"""The GPU check of the scale path, prepared for a lent GPU machine (issue 29 point 5): what can run there in a few
minutes, published as a JSON file and a table.

The lent machine has torch (CUDA), transformers and tokenizers; it has no vLLM (its wheel is far over the 64 MiB
that can be carried), no verl, DuckDB or Dagster. So this checks the part of the scale path those allow: the
rollout engine the local backend runs (``TransformersEngine``) on CUDA against the same engine on the CPU, on a
random fp32 Qwen2 of head_dim 32 with the embedded tokenizer (``pc_pipelines/data/tokenizer.py``):

1. greedy tokens on CUDA (TF32 off) equal the CPU's, request by request;
2. seeded sampling on CUDA repeats for one seed and differs for another;
3. rollouts/s on CUDA and on the CPU for one round (48 prompts x 16, up to 12 new tokens), side by side;
4. bf16 on CUDA: the share of greedy requests whose tokens equal fp32's (what serving in bf16 changes).

Run from the repository root: ``python etc/gpu/check.py --out DIR`` (on the device machine, ``--out $OUT``); ``--device
cpu`` runs the same checks on the CPU (how it is tested here, in an environment with only torch, transformers and
tokenizers). Exit status 1 when check 1 or 2 fails. About a minute on a GPU.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository's package, not an installed one


def tiny_policy(dtype):
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    from pc_pipelines.data.tokenizer import build_tokenizer

    tok = build_tokenizer()
    cfg = Qwen2Config(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=256,
                      tie_word_embeddings=True, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
                      bos_token_id=None)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg).to(dtype).eval()
    return model, tok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="directory for gpu-check.json")
    ap.add_argument("--device", default="cuda", help="cuda (the lent machine) or cpu (a dry run)")
    args = ap.parse_args()

    import torch
    import transformers

    from pc_pipelines.data.tokenizer import INSTRUCTION
    from pc_pipelines.rollout import RolloutRequest, SamplingParams
    from pc_pipelines.rollout.transformers_engine import TransformersEngine

    if args.device.startswith("cuda"):
        if not torch.cuda.is_available():
            print("gpu check: no CUDA device visible. Fix: run it on the lent GPU machine, or pass --device cpu.")
            return 2
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32: TF32 would part greedy tokens from the CPU's
        torch.backends.cudnn.allow_tf32 = False
    torch.set_num_threads(1)
    report: dict = {"device": args.device, "torch": torch.__version__, "transformers": transformers.__version__,
                    "gpu": torch.cuda.get_device_name(0) if args.device.startswith("cuda") else None}
    model, tok = tiny_policy(torch.float32)
    prompts = [f"{a:05d}+{b:05d}" + INSTRUCTION for a, b in zip(range(11, 9999, 211), range(7, 9999, 307))][:48]
    greedy = SamplingParams(0.0, 1.0, 12, seed=0)
    cpu = TransformersEngine(model, tok, device="cpu")
    dev_model = copy.deepcopy(model).to(args.device)  # its own copy: one module cannot sit on two devices
    dev = TransformersEngine(dev_model, tok, device=args.device)
    report["model_device"] = str(next(dev_model.parameters()).device)
    reqs1 = [RolloutRequest(p, 1) for p in prompts]

    def tokens(outs):
        return [[r.token_ids for r in o.rollouts] for o in outs]

    want = tokens(cpu.generate(reqs1, greedy))
    got = tokens(dev.generate(reqs1, greedy))
    report["greedy_equal_share"] = sum(a == b for a, b in zip(want, got)) / len(want)

    sample = [RolloutRequest(p, 4) for p in prompts[:8]]
    a, b = (tokens(dev.generate(sample, SamplingParams(1.0, 1.0, 12, seed=s))) for s in (5, 5))
    c = tokens(dev.generate(sample, SamplingParams(1.0, 1.0, 12, seed=6)))
    report["seeded_sampling_repeats"], report["other_seed_differs"] = a == b, a != c

    round_reqs = [RolloutRequest(p, 16) for p in prompts]
    for name, engine in (("cpu", cpu), (args.device, dev)):
        engine.generate(round_reqs[:2], SamplingParams(1.0, 1.0, 12, seed=0))  # warm-up
        t0 = time.perf_counter()
        engine.generate(round_reqs, SamplingParams(1.0, 1.0, 12, seed=1))
        report[f"rollouts_per_s_{name}"] = round(len(round_reqs) * 16 / (time.perf_counter() - t0), 1)

    if args.device.startswith("cuda"):
        bf16 = tiny_policy(torch.bfloat16)[0].to(args.device)
        report["bf16_greedy_equal_share"] = sum(
            x == y for x, y in zip(want, tokens(TransformersEngine(bf16, tok, device=args.device).generate(reqs1, greedy)))
        ) / len(want)

    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu-check.json").write_text(json.dumps(report, indent=1))
    for k, v in report.items():
        print(f"{k:28s} {v}")
    ok = report["greedy_equal_share"] == 1.0 and report["seeded_sampling_repeats"] and report["other_seed_differs"]
    print("gpu check:", "passed" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
