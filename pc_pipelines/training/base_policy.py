"""The embedded default's base policy: a from-scratch tiny causal LM of a standard ``transformers`` architecture
(Qwen2, d=64, 3 layers, ~0.2M parameters), warm-started by supervised fine-tuning (SFT) on the synthetic addition
task and saved as a normal HF model directory that ``AutoModelForCausalLM`` / ``AutoTokenizer`` load.

:func:`ensure_base_policy` returns the shipped build (``pc_pipelines/warm_starts/``, verified) when the recipe
matches, and otherwise builds into the cache (``<cache>/base-policy-<recipe hash>``). SFT stops on a probe of the
long lengths rather than after a step count, so builds on different CPUs reach the same mean pass rate. The sizing,
the stop rule and the shipped artifact: docs/TRAINING.md, "The warm start".
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import pickle
import re
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from .. import durable
from ..config import ArithTaskConfig, PolicyConfig
from ..data.arith import ArithProblems, build_splits, probe_problems
from ..data.tokenizer import INSTRUCTION, build_tokenizer, load_tokenizer
from ..errors import RunError, shell_command

log = logging.getLogger(__name__)

META_FILE = "pc_base_policy.json"
SUMS_FILE = "SHA256SUMS"
WARM_START_SUMS = durable.Sha256Sums(SUMS_FILE)
RECIPE_VERSION = 2
SHIPPED_DIR = Path(__file__).resolve().parents[1] / "warm_starts"
"""Canonical warm starts that ship with the package, one ``base-policy-<recipe hash>`` directory each."""


class WarmStartError(RuntimeError):
    """A warm-start directory whose files do not match its ``SHA256SUMS``."""


def model_config(policy: PolicyConfig, vocab_size: int, pad_id: int, eos_id: int, max_positions: int = 128):
    from transformers import LlamaConfig, Qwen2Config

    common = dict(
        vocab_size=vocab_size,
        hidden_size=policy.hidden_size,
        intermediate_size=policy.intermediate_size,
        num_hidden_layers=policy.num_layers,
        num_attention_heads=policy.num_heads,
        num_key_value_heads=policy.num_heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        pad_token_id=pad_id,
        eos_token_id=eos_id,
        bos_token_id=None,
    )
    if policy.arch == "qwen2":
        return Qwen2Config(**common)
    return LlamaConfig(**common)


def new_model(policy: PolicyConfig, tokenizer, seed: int):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    cfg = model_config(policy, len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id)
    return AutoModelForCausalLM.from_config(cfg)


def recipe_hash(task: ArithTaskConfig, policy: PolicyConfig, template: str) -> str:
    """Everything the warm start depends on: the SFT fields of the task, the policy recipe and the prompt template."""
    blob = json.dumps(
        {"v": RECIPE_VERSION, "task": task.sft_fields(), "policy": policy.to_dict(), "template": template}, sort_keys=True
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def encode_sft(problems: ArithProblems, tokenizer, template: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids [N, T] and a loss mask [N, T] (1 on response tokens incl. eos) for teacher forcing.

    All problems of a split have the same width, so every sequence has the same length: no padding needed.
    """
    prompts = [template.format(question=q) for q in problems.questions()]
    p_ids = tokenizer(prompts, add_special_tokens=False)["input_ids"]
    r_ids = tokenizer([problems.target(i) for i in range(len(problems))], add_special_tokens=False)["input_ids"]
    seqs = [p + r + [tokenizer.eos_token_id] for p, r in zip(p_ids, r_ids)]
    lengths = {len(s) for s in seqs}
    if len(lengths) != 1:
        raise ValueError(f"SFT sequences differ in length {sorted(lengths)}: the template must tokenize uniformly")
    ids = torch.tensor(seqs, dtype=torch.long)
    mask = torch.zeros_like(ids)
    mask[:, len(p_ids[0]) :] = 1
    return ids, mask


def lr_share(policy: PolicyConfig, step: int, stop_rule: bool, onset: int | None) -> float:
    """The SFT learning rate at ``step`` as a share of ``sft_lr`` (see :func:`sft`). Worked example with
    sft_steps 1000 (warmup 100), sft_hold_lr 0.25, sft_decay_steps 100 and the stop rule: step 49 -> 0.5; step 400
    before the onset -> 1.0; onset at 430: step 430 -> 1.0, step 480 -> 0.625, steps >= 530 -> 0.25."""
    warm = policy.sft_warmup_steps
    hold = policy.sft_hold_lr
    if step < warm:
        return (step + 1) / warm
    if not stop_rule:
        start, length = warm, max(1, policy.sft_steps - warm)
    elif onset is None:
        return 1.0
    else:
        start, length = onset, max(1, policy.sft_decay_steps)
    frac = min(1.0, (step - start) / length)
    return hold + (1 - hold) * 0.5 * (1 + math.cos(math.pi * frac))


def sft(
    model,
    ids: torch.Tensor,
    mask: torch.Tensor,
    policy: PolicyConfig,
    seed: int,
    progress: Callable[[int, float], None] | None = None,
    probe: Callable[[], float] | None = None,
) -> dict:
    """Teacher-forced cross-entropy on response tokens.

    Without a stop rule (``sft_target`` None, or no ``probe``): linear warmup, then a cosine decay to ``sft_hold_lr``
    of the peak at ``sft_steps``, the end. With it: ``probe()`` (the mean pass rate on the probe problems) runs every
    ``sft_probe_every`` steps after the warmup; the rate stays at its peak until a probe reaches ``sft_onset``, then
    decays over ``sft_decay_steps`` to ``sft_hold_lr`` of it and is held; SFT ends at the first probe that reaches
    ``sft_target`` with the weights of that probe or of the one before, whichever is nearer the target.

    Returns the losses (every 50 steps), the steps run, the probe trajectory [(step, pass rate)], the step of the
    onset and the step whose weights were kept at the target (None: not reached).
    """
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=policy.sft_lr, weight_decay=0.01)
    warm = policy.sft_warmup_steps
    target = policy.sft_target if probe is not None else None
    budget = policy.sft_max_steps if target is not None else policy.sft_steps
    onset: int | None = None

    model.train()
    losses: list[float] = []
    probes: list[tuple[int, float]] = []
    reached: int | None = None
    prev: tuple[int, float, dict] | None = None  # the last probe below the target: (step, rate, weights)
    n = ids.shape[0]
    perm = torch.randperm(n, generator=gen)
    cursor = 0
    step = 0
    for step in range(budget):
        for g in opt.param_groups:
            g["lr"] = policy.sft_lr * lr_share(policy, step, target is not None, onset)
        if cursor + policy.sft_batch > n:
            perm, cursor = torch.randperm(n, generator=gen), 0
        idx = perm[cursor : cursor + policy.sft_batch]
        cursor += policy.sft_batch
        x, m = ids[idx], mask[idx]
        logits = model(input_ids=x).logits[:, :-1]
        target_ids = x[:, 1:]
        tok_loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), target_ids.reshape(-1), reduction="none")
        w = m[:, 1:].reshape(-1).float()
        loss = (tok_loss * w).sum() / w.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        value = float(loss.detach())
        if step % 50 == 0 or step == budget - 1:
            losses.append(value)
        if progress:
            progress(step, value)
        if target is None or step + 1 < warm or (step + 1) % policy.sft_probe_every:
            continue
        rate = probe()  # type: ignore[misc]
        model.train()
        probes.append((step + 1, rate))
        log.info("SFT step %d: probe pass rate %.3f (onset %.3f, stop rule %.3f)", step + 1, rate, policy.sft_onset, target)
        if onset is None and rate >= policy.sft_onset:
            onset = step + 1
        if rate >= target:
            # the path moves in jumps between two probes: keep whichever of the two is nearer the target
            if prev is not None and target - prev[1] < rate - target:
                model.load_state_dict(prev[2])
                reached = prev[0]
            else:
                reached = step + 1
            break
        prev = (step + 1, rate, {k: v.detach().clone() for k, v in model.state_dict().items()})
    model.eval()
    if target is not None and reached is None:
        log.warning("SFT ran all %d steps without the probe reaching sft_target=%.3f (last %.3f): the warm start is "
                    "weaker than the recipe intends. Fix: raise policy.sft_max_steps.", budget, target,
                    probes[-1][1] if probes else float("nan"))
    return {"losses": losses, "steps": step + 1, "probes": probes, "onset_at": onset, "target_reached_at": reached}


def sampled_pass_rates(engine, grader, problems: ArithProblems, template: str, samples: int, params) -> np.ndarray:
    """Per problem, the share of ``samples`` rollouts (sampled with ``params``) that the grader marks correct."""
    from ..rollout import RolloutRequest

    outs = engine.generate([RolloutRequest(template.format(question=q), samples) for q in problems.questions()], params)
    golds = [g for g in problems.golds() for _ in range(samples)]
    rolls = [r for o in outs for r in o.rollouts]
    return grader.rewards([r.text for r in rolls], golds, [r.truncated for r in rolls]).reshape(len(problems), samples).mean(1)


def probe_pass_rate(model, tokenizer, task: ArithTaskConfig, policy: PolicyConfig, template: str, grader,
                    max_new_tokens: int = 12) -> Callable[[], float]:
    """The stop rule's probe: mean pass rate of ``model`` (as it is when called) on the probe problems."""
    from ..rollout import SamplingParams
    from ..rollout.transformers_engine import TransformersEngine

    probs = probe_problems(task, policy.sft_probe_prompts)
    engine = TransformersEngine(model, tokenizer)
    params = SamplingParams(1.0, 1.0, max_new_tokens, policy.init_seed)
    return lambda: float(sampled_pass_rates(engine, grader, probs, template, policy.sft_probe_samples, params).mean())


def pass_rate_histogram(pass_rates: np.ndarray, digits: np.ndarray, lower: float = 0.125, upper: float = 0.75) -> dict:
    """Share of prompts below ``lower``, in ``[lower, upper]`` and above ``upper``, overall and per digit length."""

    def split(p: np.ndarray) -> dict:
        k = max(1, len(p))
        return {
            "n": int(len(p)),
            "below": float((p < lower).sum() / k),
            "between": float(((p >= lower) & (p <= upper)).sum() / k),
            "above": float((p > upper).sum() / k),
        }

    out = {"all": split(pass_rates)}
    for d in sorted(set(digits.tolist())):
        out[str(d)] = split(pass_rates[digits == d])
    return out


def build_base_policy(
    out_dir: str | Path,
    task: ArithTaskConfig,
    policy: PolicyConfig,
    template: str,
    progress: Callable[[int, float], None] | None = None,
    measure: Callable[[Path], dict] | None = None,
) -> Path:
    """SFT a fresh model and save it (atomically) as an HF directory at ``out_dir``.

    ``measure`` (optional) is called on the saved temporary directory and its result stored in the metadata
    (the CLI passes the warm-start evaluation: accuracy per digit length and the pass-rate histogram).
    """
    out_dir = Path(out_dir)
    torch.set_num_threads(policy.torch_threads)
    t0 = time.perf_counter()
    tokenizer = build_tokenizer()
    splits = build_splits(task)
    model = new_model(policy, tokenizer, policy.init_seed)
    ids, mask = encode_sft(splits.sft, tokenizer, template)
    from ..rewards import MathGrader

    with MathGrader() as grader:
        probe = probe_pass_rate(model, tokenizer, task, policy, template, grader) if policy.sft_target is not None else None
        run = sft(model, ids, mask, policy, policy.init_seed, progress, probe)
    stage = durable.Staging(out_dir, tmp=out_dir.with_name(f".{out_dir.name}.tmp-{os.getpid()}"))
    tmp = stage.path
    try:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
        model.generation_config.eos_token_id = tokenizer.eos_token_id
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        meta = {
            "recipe_version": RECIPE_VERSION,
            "recipe_hash": recipe_hash(task, policy, template),
            "task": task.to_dict(),
            "policy": policy.to_dict(),
            "template": template,
            "parameters": sum(p.numel() for p in model.parameters()),
            "sft_losses": run["losses"],
            "sft_steps_run": run["steps"],
            "sft_probes": run["probes"],
            "sft_onset_at": run["onset_at"],
            "sft_target_reached_at": run["target_reached_at"],
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "sft_seconds": time.perf_counter() - t0,
        }
        if measure is not None:
            meta["warm_start"] = measure(tmp)
        (tmp / META_FILE).write_text(json.dumps(meta, indent=1))
        stage.seal(WARM_START_SUMS)  # SHA256SUMS last
    except BaseException:
        stage.discard()
        raise
    stage.publish(aside=out_dir.with_name(f".{out_dir.name}.old-{os.getpid()}"))
    log.info("base policy built at %s in %.1f s", out_dir, meta["sft_seconds"])
    return out_dir


def read_meta(path: str | Path) -> dict:
    f = Path(path) / META_FILE
    return json.loads(f.read_text()) if f.exists() else {}


def default_cache_dir() -> Path:
    """``$PC_PIPELINES_CACHE`` or ``$XDG_CACHE_HOME/pc-pipelines`` or ``~/.cache/pc-pipelines`` (read at call time)."""
    env = os.environ.get("PC_PIPELINES_CACHE")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "pc-pipelines"


def write_sums(path: str | Path) -> None:
    """``SHA256SUMS`` (``sha256sum`` format) over every other file of the directory, written last (in place)."""
    durable.seal(path, WARM_START_SUMS)


def sums_problem(path: str | Path) -> str | None:
    """None when every file ``SHA256SUMS`` lists (the metadata among them) matches it; else what is wrong."""
    return durable.verify_dir(path, WARM_START_SUMS, expect=(META_FILE,),
                              messages={"sha256": "{name} does not match its sha256 in {manifest}"})


def verify_sums(path: str | Path) -> None:
    """Raise :class:`WarmStartError` naming the first file that is missing or differs from ``SHA256SUMS``."""
    path = Path(path)
    fix = (f"Fix: restore it (`{shell_command('git', 'checkout', '--', path)}` for the shipped one) or rebuild it "
           f"with `{shell_command('pilot-commit', 'base-policy', '--out', path)}`.")
    if not (path / SUMS_FILE).is_file():
        raise WarmStartError(f"warm start {path} has no {SUMS_FILE}, so its files cannot be verified. {fix}")
    problem = sums_problem(path)
    if problem:
        raise WarmStartError(f"warm start {path}: {problem}. {fix}")


def shipped_base_policy(task: ArithTaskConfig, policy: PolicyConfig, template: str) -> Path | None:
    """The canonical warm start shipped with the package for this recipe (verified), or None if none ships."""
    path = SHIPPED_DIR / f"base-policy-{recipe_hash(task, policy, template)}"
    if not (path / META_FILE).is_file():
        return None
    verify_sums(path)
    return path


def ensure_base_policy(
    task: ArithTaskConfig,
    policy: PolicyConfig,
    template: str,
    cache_dir: str | Path | None = None,
    progress: Callable[[int, float], None] | None = None,
    measure: Callable[[Path], dict] | None = None,
) -> Path:
    """The warm start for this recipe: the shipped one when the recipe is the shipped recipe (the same weights on
    every machine), else the cached build, built on first use (SFT results differ between CPUs' kernels: such a
    build is this machine's own). A cached build that does not match its ``SHA256SUMS`` is moved aside (to
    ``damaged-base-policy-<hash>``) and built again."""
    shipped = shipped_base_policy(task, policy, template)
    if shipped is not None:
        return shipped
    cache = Path(cache_dir) if cache_dir else default_cache_dir()
    path = cache / f"base-policy-{recipe_hash(task, policy, template)}"
    if path.exists():
        problem = sums_problem(path)
        if problem is None:
            return path
        moved = durable.quarantine(path)  # damaged-base-policy-<hash>, kept for inspection
        log.warning("the cached warm start %s is damaged (%s): moved to %s; building it again", path, problem, moved)
    log.info("building the embedded base policy (first use; no shipped warm start has this recipe) into %s", path)
    return build_base_policy(path, task, policy, template, progress, measure)


CUSTOM_CODE_FILES = ("config.json", "tokenizer_config.json")
"""Where a Hugging Face directory asks to run its own Python code (an ``auto_map``)."""


def refuse_custom_code(path: str | Path, what: str = "the policy") -> None:
    """Refuse (:class:`RunError`) a model directory whose ``config.json`` or ``tokenizer_config.json`` has an
    ``auto_map``: the model needs Python code shipped with it, which pc-pipelines never runs. Checked before
    transformers reads the directory (which, left to itself, could ask "run the custom code? [y/N]" on a terminal).
    A file that is missing or not JSON is left for the loader to report."""
    path = Path(path)
    for name in CUSTOM_CODE_FILES:
        try:
            data = json.loads((path / name).read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("auto_map"):
            raise RunError(
                f"{what} at {path} needs Python code of its own ({name} has an auto_map: "
                f"{json.dumps(data['auto_map'])[:200]}); pc-pipelines loads models and tokenizers of transformers' "
                "built-in architectures only and runs no code that comes with a model. Fix: use a model whose "
                "architecture transformers ships (qwen2, llama, ...), saved with `save_pretrained`."
            )


def _weights_only_refusal(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it wraps) is torch's weights-only loader refusing a pickle."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, pickle.UnpicklingError) or "weights only load failed" in str(e).lower():
            return True
        e = e.__cause__ or e.__context__
    return False


def _pickled_weights(path: Path, exc: BaseException, what: str) -> RunError:
    """The refusal of pickle-format weights (``pytorch_model.bin``) that hold more than tensors: torch's
    weights-only loader stopped them (its own message advises ``weights_only=False``, which would run them)."""
    found = re.findall(r"GLOBAL (\S+)|got <class '([^']+)'>", str(exc))
    held = ", ".join(dict.fromkeys(a or b for a, b in found)) or "objects torch's weights-only loader refuses"
    files = ", ".join(sorted(p.name for p in path.glob("*.bin"))) or "its weights"
    return RunError(
        f"{what} at {path}: its weights ({files}) are a pickle file holding objects other than tensors ({held}); "
        "loading them could run code, so pc-pipelines refuses them. Fix: convert them to safetensors with "
        "`model.save_pretrained(dir, safe_serialization=True)` in a trusted environment, and pass that dir."
    )


def load_policy(path: str | Path, device: str | torch.device = "cpu", dtype: str | None = None,
                what: str = "the policy"):
    """Model and tokenizer of an HF directory (ours or any causal LM with a fast tokenizer). ``dtype`` (``float32``
    / ``float64``, :attr:`TrainingConfig.dtype`) casts the weights after loading (None: as stored); the float32 warm
    start casts up to float64 exactly.

    Nothing in the directory runs: a model that needs its own code is refused (:func:`refuse_custom_code`), both
    load with ``trust_remote_code=False``, and pickle-format weights load with ``weights_only=True`` (tensors only;
    anything else is refused with the fix, :class:`RunError`)."""
    from transformers import AutoModelForCausalLM

    path = Path(path)
    if not (path / "config.json").exists():
        raise FileNotFoundError(
            f"{path} is not a Hugging Face model directory (no config.json). Fix: pass a directory written by "
            "`pilot-commit base-policy --out DIR` or any `save_pretrained` causal LM."
        )
    refuse_custom_code(path, what)
    try:
        model = AutoModelForCausalLM.from_pretrained(str(path), trust_remote_code=False, weights_only=True)
    except Exception as exc:
        if _weights_only_refusal(exc):
            raise _pickled_weights(path, exc, what) from None
        raise
    model = model.to(device)
    if dtype is not None:
        model = model.to(getattr(torch, dtype))
    model.eval()
    return model, load_tokenizer(path)


__all__ = [
    "INSTRUCTION",
    "PolicyConfig",
    "build_base_policy",
    "ensure_base_policy",
    "load_policy",
    "pass_rate_histogram",
    "refuse_custom_code",
    "read_meta",
]


def warm_start_report(path: str | Path, task: ArithTaskConfig, template: str, prompts: int = 640, samples: int = 16,
                      temperature: float = 1.0, max_new_tokens: int = 12, seed: int = 0) -> dict:
    """What the warm start leaves RL to learn: greedy held-out accuracy per digit length, and the pass-rate
    histogram of ``prompts`` RL prompts (``samples`` rollouts each at the training temperature), overall and per
    digit length (the embedded task wants at least a fifth below 0.125, a fifth above 0.75 and a fifth in between)."""
    from ..data.task import arith_eval_name, embedded_task
    from ..evaluation import evaluate_sets
    from ..rewards import MathGrader
    from ..rollout import SamplingParams
    from ..rollout.transformers_engine import TransformersEngine

    model, tok = load_policy(path)
    engine = TransformersEngine(model, tok)
    splits = build_splits(task)
    with MathGrader() as grader:
        # greedy: the training evaluation's per-digit held-out sets (arith_d1 ...) at k = 1, temperature 0
        sets = [s for s in embedded_task(task, template).eval_sets if s.prompts]
        res = evaluate_sets(engine, grader, sets, 1, 0.0, 1.0, max_new_tokens, seed)
        greedy = {str(d): res.accuracy[arith_eval_name(d)] for d in range(1, task.max_digits + 1)
                  if arith_eval_name(d) in res.accuracy}
        sub = splits.train.subset(np.arange(min(prompts, len(splits.train))))
        rates = sampled_pass_rates(engine, grader, sub, template, samples,
                                   SamplingParams(temperature, 1.0, max_new_tokens, seed + 1))
    return {
        "greedy_heldout_accuracy": greedy,
        "pass_rate_histogram": pass_rate_histogram(rates, sub.digits),
        "histogram_prompts": len(sub),
        "histogram_samples": samples,
    }
