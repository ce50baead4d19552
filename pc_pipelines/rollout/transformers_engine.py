"""Rollouts with Hugging Face ``generate``: KV-cached, batched, CPU or GPU.

One :meth:`TransformersEngine.generate` call serves a whole generation round (pilot and commit requests
together, docs/DESIGN.md section 3). Internally each request is expanded into ``n`` sequences, sequences are sorted by
prompt length (less padding), cut into chunks of at most ``max_batch_sequences`` and generated with left padding
and a KV cache; results are put back in request order.

Per-token log-probs are those of the *processed* scores ``generate`` sampled from (temperature and top-p
applied): the behaviour policy's log-probs. The trainer recomputes old log-probs itself, as the paper's recipe
does, so these are for inspection and for engines' contract tests.

Sampling is seeded per call without touching the caller's global RNG (``torch.random.fork_rng``): chunk ``c`` of
a call draws from ``seed + c``, so a call's result depends only on its inputs, the model, the seed, the chunk size
and torch's thread count (CPU kernels split their reductions by thread: 1 and 2 threads differ in the last bits).

The cut itself (sequence order, chunks, per-chunk seeds) is :func:`plan_round`, a pure function of the prompts'
token ids, the rollout counts, ``max_batch_sequences`` and the seed: :class:`~.ray_engine.RayRolloutEngine` uses the
same plan and sends each chunk to :meth:`TransformersEngine.generate_chunk` in a Ray actor, which is how its rounds
equal this engine's.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from .base import FINISH_LENGTH, FINISH_STOP, RequestOutput, Rollout, RolloutRequest, SamplingParams, check_outputs

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RoundPlan:
    """How one round is generated: each request ``i`` expands into ``n_i`` sequences (request order), the sequences
    are sorted by prompt length, longest first (stable: ties keep request order), and cut into chunks of at most
    ``max_batch_sequences``; chunk ``c`` samples from ``seed + c``. Built by :func:`plan_round`."""

    prompt_ids: list[list[int]]
    """Per request, its prompt's token ids."""
    owner: np.ndarray
    """Per sequence, the request it belongs to."""
    chunks: list[np.ndarray]
    """Per chunk, the sequences it generates, in batch order."""
    seeds: list[int]
    """Per chunk, its sampling seed."""

    @property
    def num_chunks(self) -> int:
        return len(self.chunks)

    def chunk_prompts(self, c: int) -> list[list[int]]:
        """The prompts (token ids) of chunk ``c``, one per sequence, in batch order."""
        return [self.prompt_ids[self.owner[s]] for s in self.chunks[c]]

    def assemble(self, requests: Sequence[RolloutRequest], results: Sequence[Sequence[Rollout]]) -> list[RequestOutput]:
        """Request-ordered outputs from per-chunk results (``results[c]``: chunk ``c``'s rollouts in batch order)."""
        if len(results) != self.num_chunks:
            raise RuntimeError(f"{len(results)} chunk results for a plan of {self.num_chunks} chunks")
        rollouts: list[Rollout | None] = [None] * len(self.owner)
        for c, (chunk, res) in enumerate(zip(self.chunks, results)):
            if len(res) != len(chunk):
                raise RuntimeError(f"chunk {c}: {len(res)} rollouts for {len(chunk)} sequences")
            for seq, rollout in zip(chunk.tolist(), res):
                rollouts[seq] = rollout
        outputs, pos = [], 0
        for i, r in enumerate(requests):
            outputs.append(RequestOutput(prompt_ids=self.prompt_ids[i], rollouts=rollouts[pos : pos + r.n]))  # type: ignore[arg-type]
            pos += r.n
        check_outputs(requests, outputs)
        return outputs


def plan_round(prompt_ids: Sequence[list[int]], counts: Sequence[int], max_batch_sequences: int, seed: int) -> RoundPlan:
    """The plan of a round (see :class:`RoundPlan`): ``prompt_ids[i]`` and ``counts[i]`` are request ``i``'s prompt
    and rollout count."""
    if max_batch_sequences < 1:
        raise ValueError(f"max_batch_sequences={max_batch_sequences}: must be >= 1. Fix: use e.g. 4096 (the default).")
    owner = np.repeat(np.arange(len(prompt_ids)), np.asarray(counts, dtype=np.int64))  # sequence -> request
    lengths = np.array([len(prompt_ids[i]) for i in owner], dtype=np.int64)
    order = np.argsort(-lengths, kind="stable")
    chunks = [order[start : start + max_batch_sequences] for start in range(0, len(order), max_batch_sequences)]
    return RoundPlan(list(prompt_ids), owner, chunks, [seed + c for c in range(len(chunks))])


class TransformersEngine:
    def __init__(self, model, tokenizer, device: str | torch.device = "cpu", max_batch_sequences: int = 4096) -> None:
        if tokenizer.pad_token_id is None:
            raise ValueError("the tokenizer has no pad token. Fix: set tokenizer.pad_token (e.g. to the eos token).")
        self.device = torch.device(device)
        param = next(iter(model.parameters()), None) if hasattr(model, "parameters") else None
        if param is not None and param.device.type != self.device.type:
            raise ValueError(
                f"the model's weights are on {param.device.type} but the engine samples on {self.device.type}: "
                f"generation would run where the weights are, not on {self.device.type}. Fix: move the model first "
                f"(model.to({self.device.type!r})) or pass device={param.device.type!r}."
            )
        self.model = model
        self.tokenizer = tokenizer
        self.max_batch_sequences = int(max_batch_sequences)
        self.eos_id = tokenizer.eos_token_id
        self.pad_id = tokenizer.pad_token_id
        self._prompt_cache: dict[str, list[int]] = {}

    def sampling_plan(self) -> dict:
        """What decides this engine's draws besides the seed, the prompts and the weights (a run keeps it across
        resumes): the chunk size and the device."""
        return {"engine": "transformers", "max_batch_sequences": self.max_batch_sequences, "device": self.device.type}

    def encode(self, prompt: str) -> list[int]:
        ids = self._prompt_cache.get(prompt)
        if ids is None:
            ids = self.tokenizer(prompt, add_special_tokens=False)["input_ids"]
            if len(self._prompt_cache) < 200_000:
                self._prompt_cache[prompt] = ids
        return ids

    @torch.no_grad()
    def generate(self, requests: Sequence[RolloutRequest], params: SamplingParams) -> list[RequestOutput]:
        plan = plan_round([self.encode(r.prompt) for r in requests], [r.n for r in requests],
                          self.max_batch_sequences, params.seed)
        was_training = self.model.training
        self.model.eval()
        try:
            results = [self.generate_chunk(plan.chunk_prompts(c), params, plan.seeds[c]) for c in range(plan.num_chunks)]
        finally:
            self.model.train(was_training)
        return plan.assemble(requests, results)

    @torch.no_grad()
    def generate_chunk(self, prompts: list[list[int]], params: SamplingParams, seed: int) -> list[Rollout]:
        """One batch of prompts (token ids), one rollout each, sampled from ``seed``: one chunk of a round's plan.
        The model must be in eval mode (:meth:`generate` sets it)."""
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
            mask[i, width - len(p) :] = 1
        sample = params.temperature > 0
        kwargs = dict(
            input_ids=ids.to(self.device),
            attention_mask=mask.to(self.device),
            max_new_tokens=params.max_new_tokens,
            do_sample=sample,
            pad_token_id=self.pad_id,
            eos_token_id=self.eos_id,
            return_dict_in_generate=True,
            output_scores=True,
            use_cache=True,
        )
        if sample:
            kwargs.update(temperature=params.temperature, top_p=params.top_p, top_k=0)
        else:
            kwargs.update(temperature=None, top_p=None, top_k=None)
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed)
            out = self.model.generate(**kwargs)
        new = out.sequences[:, width:]
        steps = len(out.scores)
        if steps:
            scores = torch.stack(out.scores, dim=1).float()  # [B, steps, V], processed (what was sampled from)
            logp = torch.log_softmax(scores, dim=-1).gather(-1, new[:, :steps, None]).squeeze(-1).cpu()
        else:
            logp = torch.zeros(new.shape)
        new = new.cpu()
        is_eos = (new == self.eos_id).numpy()
        rollouts = []
        for i in range(new.shape[0]):
            hits = np.flatnonzero(is_eos[i])
            if hits.size:
                end, reason = int(hits[0]) + 1, FINISH_STOP
            else:
                end, reason = new.shape[1], FINISH_LENGTH
            toks = new[i, :end].tolist()
            text = self.tokenizer.decode(toks, skip_special_tokens=True)
            rollouts.append(Rollout(toks, text, logp[i, :end].tolist(), reason))
        return rollouts


def naive_generate(model, tokenizer, requests: Sequence[RolloutRequest], params: SamplingParams) -> list[RequestOutput]:
    """The baseline the benchmark compares against: one ``generate`` call per prompt (its ``n`` samples via
    ``num_return_sequences``), no batching across prompts."""
    outputs = []
    engine = TransformersEngine(model, tokenizer, max_batch_sequences=1 << 30)
    for k, r in enumerate(requests):
        outputs.extend(engine.generate([r], SamplingParams(params.temperature, params.top_p, params.max_new_tokens, params.seed + k)))
    return outputs
