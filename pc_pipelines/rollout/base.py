"""The rollout engine protocol: one call generates every request of a generation round.

An engine takes batched requests ``(prompt, n)`` with one set of sampling parameters and returns, per request,
the prompt's token ids and ``n`` rollouts (token ids, text, per-token log-probs under the sampling distribution,
finish reason). The allocator charges every returned rollout to the ledger, so an engine must return exactly
``n`` rollouts per request. Implementations: :class:`~.transformers_engine.TransformersEngine` (CPU and GPU,
KV-cached batched ``generate``), :class:`~.ray_engine.RayRolloutEngine` (its rounds spread over Ray actors, equal to
``TransformersEngine``'s); the vLLM engine belongs to the scale path.

Determinism: ``SamplingParams.seed`` fixes the call's sampling (the loop derives it from the run seed, the step
and the call index, so a resumed run draws what the uninterrupted run drew).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

FINISH_STOP = "stop"  # the response ended with the end-of-sequence token
FINISH_LENGTH = "length"  # cut at max_new_tokens: an overlong (truncated) response


def derive_seed(*parts: int) -> int:
    """A 31-bit sampling seed from a run seed and a draw's coordinates (each >= -1: the allocator's 0-based step
    index, -1 for the evaluation before training, step 0), e.g. ``derive_seed(run_seed, salt, step, call)``: the
    same coordinates always give the same seed."""
    return int(np.random.SeedSequence([int(p) + 1 for p in parts]).generate_state(1)[0] & 0x7FFFFFFF)


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    """0 means greedy decoding."""
    top_p: float = 1.0
    """Nucleus sampling mass (1.0 disables it)."""
    max_new_tokens: int = 16
    """Responses longer than this are cut and reported with finish reason ``length``."""
    seed: int = 0
    """Fixes the sampling of this call."""

    def __post_init__(self) -> None:
        for name in ("temperature", "top_p"):
            if not math.isfinite(getattr(self, name)):  # NaN passes the range checks below (comparisons are False)
                raise ValueError(f"SamplingParams.{name}={getattr(self, name)}: must be a finite number. Fix: use "
                                 f"{'1.0 (or 0 for greedy)' if name == 'temperature' else '1.0 to disable it'}.")
        if self.temperature < 0:
            raise ValueError(f"SamplingParams.temperature={self.temperature}: must be >= 0. Fix: use 1.0, or 0 for greedy.")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"SamplingParams.top_p={self.top_p}: must lie in (0, 1]. Fix: use 1.0 to disable.")
        if self.max_new_tokens < 1:
            raise ValueError(f"SamplingParams.max_new_tokens={self.max_new_tokens}: must be >= 1.")


@dataclass(frozen=True)
class RolloutRequest:
    prompt: str
    n: int


@dataclass(frozen=True)
class Rollout:
    token_ids: list[int]  # response tokens, including the end-of-sequence token when finish_reason == "stop"
    text: str  # decoded response without special tokens
    logprobs: list[float]  # per response token, under the sampling distribution (temperature / top_p applied)
    finish_reason: str  # FINISH_STOP or FINISH_LENGTH

    @property
    def truncated(self) -> bool:
        return self.finish_reason == FINISH_LENGTH


@dataclass(frozen=True)
class RequestOutput:
    prompt_ids: list[int]
    rollouts: list[Rollout] = field(default_factory=list)


@runtime_checkable
class RolloutEngine(Protocol):
    """Anything that turns a round's requests into rollouts (see module docstring)."""

    def generate(self, requests: Sequence[RolloutRequest], params: SamplingParams) -> list[RequestOutput]: ...


EngineFactory = Callable[[Any, Any], RolloutEngine]
"""(model, tokenizer) -> an engine bound to that policy: how a run chooses its engine for the policy it loads."""


def sampling_plan(engine: RolloutEngine | None) -> dict | None:
    """What decides ``engine``'s draws besides the seed, the prompts and the weights (its ``sampling_plan()``: the
    transformers engine's chunk size and device, say), or None when it does not say. Two engines with equal plans
    draw the same rollouts (the Ray engine's plan is the single engine's), so a run may switch between them."""
    plan = getattr(engine, "sampling_plan", None)
    return plan() if callable(plan) else None


def close_engine(engine: RolloutEngine | None) -> None:
    """Let an engine's processes go when its user is done with it: an engine that holds some (Ray actors, and the
    local Ray it started) has ``close()``; in-process engines need nothing."""
    close = getattr(engine, "close", None)
    if callable(close):
        close()


def check_outputs(requests: Sequence[RolloutRequest], outputs: Sequence[RequestOutput]) -> None:
    """The contract every engine keeps: one output per request, exactly ``n`` rollouts each, aligned fields."""
    if len(outputs) != len(requests):
        raise RuntimeError(f"engine returned {len(outputs)} outputs for {len(requests)} requests")
    for i, (req, out) in enumerate(zip(requests, outputs)):
        if len(out.rollouts) != req.n:
            raise RuntimeError(f"request {i}: engine returned {len(out.rollouts)} rollouts, {req.n} were asked")
        for r in out.rollouts:
            if len(r.logprobs) != len(r.token_ids) or r.finish_reason not in (FINISH_STOP, FINISH_LENGTH):
                raise RuntimeError(f"request {i}: malformed rollout {r!r}")
