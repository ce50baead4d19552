"""Test doubles for the allocator unit tests: a fake rollout engine that records everything it returned.

Not a test module (no ``test_`` prefix). The fake engine stands in for vLLM/transformers: it receives each
:class:`EngineCall`, produces one reward array per request and keeps its own books (per-stage counts, the rollout
ids it was asked for, the rewards it returned), so the tests can compare the allocator's ledger and trained
groups against what the engine actually did rather than against arithmetic on the config.

Rewards are a pure function of the rollout id (a splitmix64 hash of ``(seed, rollout_id)``) and the prompt's pass
rate, so two allocators that ask for the same rollout ids get the same rewards whatever order they ask in; that
is what makes the determinism and checkpoint round-trip tests meaningful.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

from pc_pipelines.allocation import Allocator, AllocatorConfig, EngineCall, Stage, StepOutcome

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.uint64).copy()
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return x


def hashed_uniforms(seed: int, rollout_ids: np.ndarray) -> np.ndarray:
    """Deterministic U[0, 1) per rollout id (vectorized, wraps mod 2**64 on purpose)."""
    ids = np.asarray(rollout_ids, dtype=np.int64).astype(np.uint64)
    with np.errstate(over="ignore"):
        x = _splitmix64(ids * _GOLDEN + _splitmix64(np.array([seed], dtype=np.uint64)))
    return (x >> np.uint64(11)).astype(np.float64) / float(2**53)


def flat_ids(call: EngineCall) -> np.ndarray:
    """The rollout ids a call asks for, in request order (from rollout_starts and n only)."""
    if len(call) == 0:
        return np.zeros(0, np.int64)
    return np.concatenate([np.arange(s, s + k, dtype=np.int64) for s, k in zip(call.rollout_starts.tolist(), call.n.tolist())])


# A reward rule maps (call, per-rollout prompt ids, per-rollout stages, per-rollout ids, per-rollout index within
# its request) to one reward per rollout.
RewardRule = Callable[[EngineCall, np.ndarray, np.ndarray, np.ndarray, np.ndarray], np.ndarray]


def bernoulli_rule(rates: np.ndarray, seed: int = 0) -> RewardRule:
    rates = np.asarray(rates, dtype=np.float64)

    def rule(call, prompts, stages, ids, within):
        return (hashed_uniforms(seed, ids) < rates[prompts]).astype(np.float64)

    return rule


def fraction_rule(frac: float) -> RewardRule:
    """Exactly round(frac * n) correct in every request (the first ones): deterministic pass rates."""

    def rule(call, prompts, stages, ids, within):
        n_per = np.repeat(call.n, call.n)
        return (within < np.round(frac * n_per)).astype(np.float64)

    return rule


def constant_rule(value: float) -> RewardRule:
    def rule(call, prompts, stages, ids, within):
        return np.full(ids.shape[0], float(value))

    return rule


@dataclass
class CallRecord:
    global_index: int  # engine call number over the engine's whole life
    step: int
    round: int
    index: int
    prompt_ids: np.ndarray
    n: np.ndarray
    stages: np.ndarray
    rollout_starts: np.ndarray
    rewards: list[np.ndarray]  # exactly what was returned, one array per request (copies kept by the engine)


class FakeEngine:
    """Callable engine: ``engine(call) -> rewards``; records every rollout it returned.

    ``fmt``: ``"list"`` returns one fresh array per request, ``"flat"`` one fresh flat array, ``"2d"`` a 2-D
    array when every request has the same n (else a list). Fresh arrays every call: the engine never reuses
    memory it handed out.
    """

    def __init__(self, rule: RewardRule, fmt: str = "list", on_call: Callable[[EngineCall], None] | None = None):
        self.rule = rule
        self.fmt = fmt
        self.on_call = on_call
        self.records: list[CallRecord] = []
        self._index_cache: tuple | None = None

    def __call__(self, call: EngineCall):
        if self.on_call is not None:
            self.on_call(call)
        ids = flat_ids(call)
        n = call.n.astype(np.int64)
        prompts = np.repeat(call.prompt_ids, n)
        stages = np.repeat(call.stages, n)
        starts_rep = np.repeat(call.rollout_starts, n)
        within = ids - starts_rep
        flat = np.asarray(self.rule(call, prompts, stages, ids, within), dtype=np.float64)
        assert flat.shape == ids.shape
        offsets = np.concatenate([[0], np.cumsum(n)])
        parts = [flat[offsets[i] : offsets[i + 1]].copy() for i in range(len(call))]
        self.records.append(
            CallRecord(
                global_index=len(self.records),
                step=call.step,
                round=call.round,
                index=call.index,
                prompt_ids=call.prompt_ids.copy(),
                n=n.copy(),
                stages=call.stages.copy(),
                rollout_starts=call.rollout_starts.copy(),
                rewards=[p.copy() for p in parts],
            )
        )
        self._index_cache = None
        if self.fmt == "flat":
            return flat.copy()
        if self.fmt == "2d" and len(call) and np.all(n == n[0]):
            return flat.reshape(len(call), int(n[0])).copy()
        return parts

    # ---- the engine's own books ---------------------------------------------------------------------------
    def calls_of_step(self, step: int) -> list[CallRecord]:
        return [r for r in self.records if r.step == step]

    def rollouts_by_stage(self, step: int) -> dict[Stage, int]:
        """Number of rewards the engine returned in ``step``, per stage (counted from the arrays it returned)."""
        out = {s: 0 for s in Stage}
        for r in self.calls_of_step(step):
            for stage_code, arr in zip(r.stages.tolist(), r.rewards):
                out[Stage(stage_code)] += int(arr.shape[0])
        return out

    def _index(self):
        if self._index_cache is None:
            ids, call_no, stage, prompt, reward = [], [], [], [], []
            for r in self.records:
                for p, k, s, st, arr in zip(r.prompt_ids.tolist(), r.n.tolist(), r.rollout_starts.tolist(), r.stages.tolist(), r.rewards):
                    ids.append(np.arange(s, s + k, dtype=np.int64))
                    call_no.append(np.full(k, r.global_index, np.int64))
                    stage.append(np.full(k, st, np.int64))
                    prompt.append(np.full(k, p, np.int64))
                    reward.append(arr)
            if ids:
                cols = [np.concatenate(c) for c in (ids, call_no, stage, prompt, reward)]
            else:
                cols = [np.zeros(0, np.int64)] * 4 + [np.zeros(0)]
            order = np.argsort(cols[0], kind="stable")
            self._index_cache = tuple(c[order] for c in cols)
        return self._index_cache

    def lookup(self, rollout_ids: np.ndarray):
        """(found, call_no, stage, prompt, reward) per rollout id, from the engine's records."""
        ids, call_no, stage, prompt, reward = self._index()
        q = np.asarray(rollout_ids, np.int64)
        pos = np.clip(np.searchsorted(ids, q), 0, max(ids.shape[0] - 1, 0))
        if ids.shape[0] == 0:
            return np.zeros(q.shape[0], bool), q * 0, q * 0, q * 0, np.zeros(q.shape[0])
        return ids[pos] == q, call_no[pos], stage[pos], prompt[pos], reward[pos]

    def all_requested_ids(self) -> np.ndarray:
        return self._index()[0]


def drive_step(alloc: Allocator, engine: FakeEngine, use_session: bool = True) -> StepOutcome:
    """One step through the session interface by hand (default) or the run layer's step loop."""
    if not use_session:
        from pc_pipelines.run.step_loop import allocator_step

        return allocator_step(alloc, engine)
    session = alloc.begin_step()
    while (call := session.next_call()) is not None:
        session.observe(engine(call))
    return session.finish()


def run_steps(alloc: Allocator, engine: FakeEngine, steps: int, use_session: bool = True) -> list[StepOutcome]:
    return [drive_step(alloc, engine, use_session=use_session) for _ in range(steps)]


def make_rates(m: int, seed: int, p_zero: float, p_one: float) -> np.ndarray:
    """Per-prompt pass rates: a share exactly 0, a share exactly 1, the rest uniform in (0, 1)."""
    rng = np.random.default_rng(seed)
    rates = rng.uniform(0.05, 0.95, size=m)
    u = rng.random(m)
    rates[u < p_zero] = 0.0
    rates[(u >= p_zero) & (u < p_zero + p_one)] = 1.0
    return rates


def ledger_key(outcome: StepOutcome) -> str:
    """Ledger as canonical JSON (NaN band edges of GRPO/DAPO compare equal this way)."""
    return json.dumps(outcome.ledger.to_dict(), sort_keys=True)


def groups_key(outcome: StepOutcome) -> list:
    return [
        (g.prompt_id, g.rollout_ids.tolist(), g.rewards.tolist(), g.lag, g.born, g.n_pilot, g.n_commit, g.spans)
        for g in outcome.groups
    ]


def observations_key(outcome: StepOutcome) -> dict:
    o = outcome.observations
    return {
        name: getattr(o, name).tolist()
        for name in ("prompt_id", "round", "call", "stage", "n", "n_correct", "decision", "evicted", "lag", "wave",
                     "rule", "returned")
    }


def outcome_key(outcome: StepOutcome) -> tuple:
    return (
        outcome.step,
        ledger_key(outcome),
        groups_key(outcome),
        observations_key(outcome),
        list(outcome.expired),
        list(outcome.evicted_prompts),
    )


def pc_config(**kw) -> AllocatorConfig:
    base = dict(method="pc", train_batch=4, n=8, n_pilot=4, oversample=3.0, max_rounds=10, max_age=4, seed=0)
    base.update(kw)
    return AllocatorConfig(**base)


# ---- hypothesis strategies -----------------------------------------------------------------------------------

@st.composite
def scenarios(draw, methods=("pc", "grpo", "dapo"), max_pool=300, evict=None, binding=None, max_steps=8,
              strategies=False):
    """A small allocator config, a pool size, per-prompt pass rates and a step count. ``strategies``: PC also
    draws its band / sampling / pilot / commit strategies (the paper's otherwise)."""
    method = draw(st.sampled_from(methods))
    pool = draw(st.integers(20, max_pool))
    b_t = draw(st.integers(1, 16))
    n = draw(st.integers(2, 16))
    kw = dict(
        method=method,
        train_batch=b_t,
        n=n,
        oversample=draw(st.sampled_from([1.0, 1.5, 2.0, 3.0])),
        max_rounds=draw(st.integers(2, 6)),
        max_age=draw(st.integers(0, 4)),
        seed=draw(st.integers(0, 2**16)),
        selection=draw(st.sampled_from(["max_variance", "most_recent", "random"])),
        binding=draw(st.booleans()) if binding is None else binding,
        evict=draw(st.booleans()) if evict is None else evict,
    )
    if method == "pc":
        kw["n_pilot"] = draw(st.integers(1, n - 1))
        lo = draw(st.sampled_from([0.0, 0.125, 0.25]))
        kw["p_lower"] = lo
        kw["p_upper"] = draw(st.sampled_from([0.5, 0.75, 1.0]))
        kw["p_solve"] = draw(st.sampled_from([0.75, 1.0]))
        if strategies:
            kw["band_strategy"] = draw(st.sampled_from(["static", "adaptive"]))
            kw["sampling_strategy"] = draw(st.sampled_from(["fixed", "survival"]))
            kw["survival_margin"] = draw(st.sampled_from([1.0, 1.25, 2.0]))
            if kw["n_pilot"] >= 2:
                kw["pilot_strategy"] = draw(st.sampled_from(["single", "sequential"]))
                kw["pilot_wave"] = draw(st.integers(1, kw["n_pilot"] - 1))
            kw["commit_strategy"] = draw(st.sampled_from(["uniform", "variance"]))
            if kw["commit_strategy"] == "variance":
                kw["commit_min"] = draw(st.integers(1, 4))
                kw["commit_mean"] = draw(st.integers(kw["commit_min"], 12))
                kw["commit_max"] = draw(st.one_of(st.none(), st.integers(kw["commit_mean"], 24)))
    rates = make_rates(
        pool,
        draw(st.integers(0, 2**16)),
        draw(st.sampled_from([0.0, 0.2, 0.5])),
        draw(st.sampled_from([0.0, 0.2, 0.5])),
    )
    steps = draw(st.integers(1, max_steps))
    return AllocatorConfig(**kw), pool, rates, steps


def graded_rule(rates: np.ndarray, seed: int = 0) -> RewardRule:
    """Non-binary rewards in [0, 1] (partial credit): a pass-rate-shifted uniform per rollout."""
    rates = np.asarray(rates, dtype=np.float64)

    def rule(call, prompts, stages, ids, within):
        u = hashed_uniforms(seed, ids)
        return np.clip(u + rates[prompts] - 0.5, 0.0, 1.0)

    return rule


def pooled_observations(obs):
    """``obs`` in the layout before every pilot wave had its own row (store v10): the ``continued`` first-wave rows
    dropped and each row's n / n_correct its decision's evidence (a later wave's row then pools every wave, as it
    did). The bit-for-bit tests hash this, so they show that the split changed what is recorded, nothing else."""
    from dataclasses import replace as _replace

    from pc_pipelines.allocation import Decision

    keep = obs.decision != Decision.CONTINUED
    cut = {f: getattr(obs, f)[keep] for f in obs.__dataclass_fields__}
    return _replace(obs, **{**cut, "n": cut["evidence_n"], "n_correct": cut["evidence_correct"]})
