"""The embedded default's data and policy assets: the synthetic addition task and its SFT warm start.

Thin: they resolve the preset, call ``pc_pipelines.data.arith`` / ``pc_pipelines.training.base_policy`` and
attach metadata (split sizes per digit length, the warm start's pass-rate histogram as a Markdown table).
"""


from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from dagster import AssetExecutionContext, Config, Failure, MaterializeResult, MetadataValue, asset
from pydantic import Field

from pc_pipelines.config import parse_overrides, resolve
from pc_pipelines.data.arith import ArithProblems, build_splits
from pc_pipelines.data.registry import EMBEDDED, get_dataset
from pc_pipelines_dagster.resources import DataResource


class EmbeddedConfig(Config):
    preset: str = Field(default="embedded", description="Preset holding the task and policy sections.")
    overrides: list[str] = Field(default_factory=list, description="--set style overrides, e.g. task.num_prompts=2000")
    cache_dir: str | None = Field(default=None, description="Base-policy cache (default ~/.cache/pc-pipelines).")
    policy_path: str | None = Field(
        default=None,
        description="A local Hugging Face causal LM directory to use instead of the embedded SFT warm start "
        "(nothing is downloaded). start_run takes the same path.",
    )


def _resolved(config: EmbeddedConfig):
    cfg = resolve(config.preset, parse_overrides(config.overrides), method="grpo")
    if cfg.task is None or cfg.policy is None:
        raise ValueError(f"preset {config.preset!r} has no task/policy section. Fix: use the `embedded` preset.")
    return cfg


def _table(p: ArithProblems, split: str) -> pa.Table:
    return pa.table(
        {
            "id": [f"arith-{split}-{i}" for i in p.ids.tolist()],
            "problem": p.questions(),
            "answer": p.golds(),
            "digits": p.digits.astype(np.int8),
            "split": [split] * len(p),
        }
    )


@asset(group_name="data", kinds={"parquet"})
def arith_task(context: AssetExecutionContext, config: EmbeddedConfig, data: DataResource) -> MaterializeResult:
    """Zero-padded addition: the RL pool, the held-out split (per digit length) and the SFT set, as Parquet."""
    cfg = _resolved(config)
    splits = build_splits(cfg.task)
    out = get_dataset(EMBEDDED).path(data.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    counts = {}
    for name, probs in (("train", splits.train), ("heldout", splits.heldout), ("sft", splits.sft)):
        pq.write_table(_table(probs, name), out / f"{name}.parquet")
        counts[name] = {str(d): int(c) for d, c in enumerate(np.bincount(probs.digits)) if c}
    context.log.info("arith task written to %s: %s", out, counts)
    return MaterializeResult(
        metadata={
            "path": MetadataValue.path(str(out.resolve())),
            "train_rows": len(splits.train),
            "heldout_rows": len(splits.heldout),
            "sft_rows": len(splits.sft),
            "rows_per_digit_length": MetadataValue.json(counts),
            "heldout_overlap": MetadataValue.json({str(k): v for k, v in splits.heldout_overlap.items()}),
        }
    )


@asset(group_name="policy", deps=[arith_task], kinds={"pytorch"})
def base_policy(context: AssetExecutionContext, config: EmbeddedConfig) -> MaterializeResult:
    """The SFT warm start as a Hugging Face directory (cached per recipe), with its warm-start report; or, with
    ``policy_path``, a configured local HF model checked for a causal LM config and a tokenizer."""
    from pc_pipelines.training.base_policy import ensure_base_policy, read_meta, warm_start_report  # torch: when built

    if config.policy_path is not None:
        return _configured_policy(context, Path(config.policy_path))
    cfg = _resolved(config)
    template = cfg.training.prompt_template

    def measure(p: Path) -> dict:
        return warm_start_report(p, cfg.task, template, max_new_tokens=cfg.training.max_response_length)

    path = ensure_base_policy(cfg.task, cfg.policy, template, cache_dir=config.cache_dir, measure=measure,
                              progress=lambda s, loss: s % 100 == 0 and context.log.info("SFT step %d loss %.4f", s, loss))
    meta = read_meta(path)
    # A fresh build stored its report; a policy cached by `pilot-commit train` (built without one) is measured here.
    report = meta.get("warm_start") or measure(path)
    rows = ["| prompts | below 0.125 | in band | above 0.75 |", "|---|---|---|---|"]
    for key, h in report["pass_rate_histogram"].items():
        rows.append(f"| {key if key == 'all' else key + '-digit'} (n={h['n']}) | {h['below']:.2f} | {h['between']:.2f} | {h['above']:.2f} |")
    return MaterializeResult(
        metadata={
            "path": MetadataValue.path(str(path)),
            "recipe_hash": meta.get("recipe_hash", ""),
            "parameters": meta.get("parameters", 0),
            "greedy_heldout_accuracy": MetadataValue.json(report["greedy_heldout_accuracy"]),
            "pass_rate_histogram": MetadataValue.md("\n".join(rows)),
        }
    )


def _configured_policy(context: AssetExecutionContext, path: Path) -> MaterializeResult:
    from transformers import AutoConfig, AutoTokenizer

    if not (path / "config.json").is_file():
        raise Failure(
            f"policy_path {str(path)!r} is not a Hugging Face model directory (no config.json). Fix: point it at a "
            "local directory saved with save_pretrained (model and tokenizer), or unset it for the embedded warm start."
        )
    from pc_pipelines.errors import RunError
    from pc_pipelines.training.base_policy import refuse_custom_code

    try:
        refuse_custom_code(path, what="policy_path")  # no "run the custom code?" and no code of the model run
    except RunError as exc:
        raise Failure(str(exc)) from None
    try:
        hf = AutoConfig.from_pretrained(path, trust_remote_code=False)
        tok = AutoTokenizer.from_pretrained(path, trust_remote_code=False)
    except Exception as exc:  # transformers raises many types; the message names the directory
        raise Failure(f"policy_path {str(path)!r} cannot be loaded: {type(exc).__name__}: {exc}. Fix: save the model "
                      "and its tokenizer with save_pretrained into that directory.") from exc
    context.log.info("configured policy %s (%s)", path, hf.model_type)
    return MaterializeResult(
        metadata={
            "path": MetadataValue.path(str(path.resolve())),
            "model_type": hf.model_type,
            "architectures": MetadataValue.json(list(getattr(hf, "architectures", None) or [])),
            "vocab_size": int(getattr(hf, "vocab_size", 0) or len(tok)),
        }
    )
