"""The CPU half of the verl recipe, with real verl ``DataProto``s and the real allocator: a PC round's pilot and
commit requests go to ONE generation batch, come back split by request, rewards flow back as allocator feedback,
and the trained groups (pilot rows + commit rows) share a ``uid`` so verl's GRPO advantage normalizes exactly them.

The engine here is a fake (this file tests the code that talks to verl's rollout manager, not an engine): it
answers each row with a deterministic right or wrong ``\\boxed{}`` answer, in shuffled row order, shaped like verl
0.9's agent-loop output (left-padded prompts, right-padded responses, masks)."""

import numpy as np
import pytest
import torch
from verl import DataProto
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

from pc_pipelines.allocation import Allocator, AllocatorConfig, Stage
from pc_pipelines.rewards import MathGrader
from pc_pipelines.training.verl_batch import (
    PROMPT_ID,
    ROLLOUT_ID,
    STAGE,
    UID,
    BatchError,
    PayloadStore,
    decode_responses,
    feedback,
    prompt_row,
    round_batch,
    split_by_request,
    step_metrics,
    training_batch,
    with_request_columns,
)

EOS, PAD, P_WIDTH, R_WIDTH = 1, 0, 6, 16
GOLDS = [str(10 + p) for p in range(40)]
ROWS = [prompt_row(p, f"What is {p} + 10?", GOLDS[p]) for p in range(40)]


def decode(tokens):
    return "".join(chr(t) for t in tokens if t > EOS)


def fake_generate(gen: DataProto, rng: np.random.Generator) -> DataProto:
    """One row per input row: right iff (rollout id + prompt id) % 3 == 0; every 11th rollout runs out of room."""
    ids = gen.non_tensor_batch[ROLLOUT_ID]
    prompts = gen.non_tensor_batch[PROMPT_ID]
    n = len(gen)
    responses = torch.full((n, R_WIDTH), PAD, dtype=torch.long)
    rmask = torch.zeros((n, R_WIDTH), dtype=torch.long)
    for i, (rid, p) in enumerate(zip(ids.tolist(), prompts.tolist())):
        answer = GOLDS[p] if (rid + p) % 3 == 0 else "0"
        toks = [ord(c) for c in f"\\boxed{{{answer}}}"] + [EOS]
        if rid % 11 == 0:
            toks = [ord("x")] * R_WIDTH  # cut at the width, no end token: overlong
        responses[i, : len(toks)] = torch.tensor(toks)
        rmask[i, : len(toks)] = 1
    prompt_ids = torch.randint(2, 100, (n, P_WIDTH))
    attn = torch.cat([torch.ones((n, P_WIDTH), dtype=torch.long), rmask], dim=1)
    out = DataProto.from_dict(
        tensors={"prompts": prompt_ids, "responses": responses, "response_mask": rmask, "attention_mask": attn,
                 "input_ids": torch.cat([prompt_ids, responses], dim=1)},
        non_tensors=dict(gen.non_tensor_batch),
    )
    return out.select_idxs(rng.permutation(n))  # workers may return rows in any order


def test_rounds_go_to_one_batch_and_trained_groups_share_a_uid():
    cfg = AllocatorConfig(method="pc", train_batch=4, n=8, n_pilot=4, oversample=2.0, seed=0)
    alloc = Allocator(cfg, len(ROWS))
    payloads = PayloadStore()
    rng = np.random.default_rng(0)
    mixed_rounds = trained = 0
    with MathGrader() as grader:
        for step in range(3):
            session = alloc.begin_step()
            generated = 0
            while (call := session.next_call()) is not None:
                gen, layout = round_batch(call, ROWS.__getitem__)
                assert len(gen) == call.total_rollouts
                stages = set(gen.non_tensor_batch[STAGE].tolist())
                mixed_rounds += stages == {int(Stage.PILOT), int(Stage.COMMIT)}
                # uneven chunks for the agent-loop workers: no padding rollouts
                assert sum(len(c) for c in gen.chunk(3)) == len(gen)
                parts = split_by_request(fake_generate(gen, rng), layout)
                for req, part in zip(call, parts):
                    assert part.non_tensor_batch[ROLLOUT_ID].tolist() == req.rollout_ids.tolist()
                    assert set(part.non_tensor_batch[PROMPT_ID].tolist()) == {req.prompt_id}
                    assert part.non_tensor_batch["raw_prompt"][0][0]["content"] == f"What is {req.prompt_id} + 10?"
                payloads.put(parts, layout)
                flat = DataProto.concat(parts)
                texts, truncated = decode_responses(flat, decode, EOS)
                rewards = grader.rewards(texts, [GOLDS[p] for p in flat.non_tensor_batch[PROMPT_ID]], truncated)
                expect = [float((r + p) % 3 == 0 and r % 11 != 0) for r, p in
                          zip(flat.non_tensor_batch[ROLLOUT_ID].tolist(), flat.non_tensor_batch[PROMPT_ID].tolist())]
                assert list(rewards) == expect
                session.observe(feedback(layout, rewards))
                generated += len(gen)
            outcome = session.finish()
            if step == 0:
                assert outcome.ledger.rounds >= 2  # empty buffer: pilots first, commits in a later round
            metrics = step_metrics(outcome, alloc_total := generated)
            assert metrics["pc/sampled_rollouts"] == generated == alloc_total
            batch = training_batch(outcome, payloads)
            trained += len(outcome.groups)
            if not outcome.groups:
                assert batch is None
                continue
            assert metrics["pc/trained_rollouts"] == len(batch)
            uids = batch.non_tensor_batch[UID]
            assert len(set(uids.tolist())) == len(outcome.groups)
            scores = batch.batch["token_level_scores"].sum(-1).numpy()
            for g in outcome.groups:
                rows = np.flatnonzero(uids == f"s{step}-p{g.prompt_id}")
                assert rows.shape[0] == cfg.n == g.n_pilot + g.n_commit  # one GRPO group: pilots + commits
                assert batch.non_tensor_batch[ROLLOUT_ID][rows].tolist() == g.rollout_ids.tolist()
                assert (batch.non_tensor_batch[STAGE][rows] == int(Stage.PILOT)).sum() == cfg.n_pilot
                np.testing.assert_allclose(scores[rows], g.rewards)
            # verl's GRPO groups by uid: per group (r - mean) / (unbiased std + eps), on every valid token
            adv, _ = compute_grpo_outcome_advantage(batch.batch["token_level_rewards"], batch.batch["response_mask"],
                                                    uids)
            for g in outcome.groups:
                rows = np.flatnonzero(uids == f"s{step}-p{g.prompt_id}")
                r = g.rewards
                want = (r - r.mean()) / (r.std(ddof=1) + 1e-6)
                last = batch.batch["response_mask"][rows].sum(-1) - 1
                got = adv[rows][torch.arange(len(rows)), last].double().numpy()
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
            payloads.keep_only(alloc.live_rollout_ids())
            live = set(alloc.live_rollout_ids().tolist())
            assert len(payloads) >= len(live)  # buffered pilots stay for a later commit
            for rid in live:
                payloads.rows(rid, 1)
    assert trained >= 8  # the band kept enough pilots to train full batches
    assert mixed_rounds >= 1  # a round holding both buffer commits and fresh pilots went out as ONE batch


def test_split_refuses_a_batch_with_missing_rows():
    cfg = AllocatorConfig(method="grpo", train_batch=2, n=4, seed=0)
    call = Allocator(cfg, len(ROWS)).begin_step().next_call()
    gen, layout = round_batch(call, ROWS.__getitem__)
    out = fake_generate(gen, np.random.default_rng(1))
    with pytest.raises(BatchError, match="asked for 8 rollouts; 7 came back"):
        split_by_request(out.slice(0, 7), layout)
    with pytest.raises(BatchError, match="one reward per row"):
        feedback(layout, np.zeros(3))


def agent_loop_with_reward_workers(gen: DataProto, step: int) -> DataProto:
    """What verl 0.9.1's agent loop returns with reward-loop workers running (seen with verl's real trainer on CPU):
    rows in request order, its own columns (``global_steps`` per row, score extras), none of the request's."""
    out = fake_generate(gen, np.random.default_rng(0))
    out = out.select_idxs(np.argsort(out.non_tensor_batch[ROLLOUT_ID], kind="stable"))  # back in request order
    n = len(out)
    out.non_tensor_batch = {"global_steps": np.full(n, step, dtype=object), "extras": np.array([{}] * n, dtype=object)}
    out.meta_info = {"global_steps": step}
    return out


def one_step_batch(cfg: AllocatorConfig, generate) -> DataProto:
    """One allocator step whose rounds ``generate(gen, layout)`` turns into split parts; its training batch."""
    alloc = Allocator(cfg, len(ROWS))
    payloads = PayloadStore()
    session = alloc.begin_step()
    with MathGrader() as grader:
        while (call := session.next_call()) is not None:
            gen, layout = round_batch(call, ROWS.__getitem__)
            parts = generate(gen, layout)
            payloads.put(parts, layout)
            flat = DataProto.concat(parts)
            texts, truncated = decode_responses(flat, decode, EOS)
            golds = [GOLDS[p] for p in flat.non_tensor_batch[PROMPT_ID]]
            session.observe(feedback(layout, grader.rewards(texts, golds, truncated)))
    return training_batch(session.finish(), payloads)


def test_rows_verl_strips_of_their_request_columns_still_split_and_train():
    def generate(gen, layout):
        raw = agent_loop_with_reward_workers(gen, step=0)
        with pytest.raises(BatchError, match="no 'pc_rollout_id' column"):
            split_by_request(raw, layout)  # the failure the probe hit
        out = with_request_columns(gen, raw)
        assert out.non_tensor_batch[ROLLOUT_ID].tolist() == gen.non_tensor_batch[ROLLOUT_ID].tolist()
        assert out.non_tensor_batch["global_steps"].tolist() == [0] * len(gen)  # verl's own columns stay
        with pytest.raises(BatchError, match="cannot be put back by position"):
            with_request_columns(gen, raw.slice(0, len(raw) - 1))
        return split_by_request(out, layout)

    batch = one_step_batch(AllocatorConfig(method="grpo", train_batch=4, n=4, seed=0), generate)
    assert "global_steps" in batch.non_tensor_batch and "global_steps" not in batch.meta_info
    assert set(batch.to_tensordict().keys()) >= {"token_level_rewards", UID, ROLLOUT_ID}  # verl asserted here


def test_a_batch_without_verl_step_columns_carries_the_step_in_meta_info():
    batch = one_step_batch(AllocatorConfig(method="grpo", train_batch=2, n=4, seed=0),
                           lambda gen, layout: split_by_request(fake_generate(gen, np.random.default_rng(1)), layout))
    assert batch.meta_info["global_steps"] == 0 and "global_steps" not in batch.non_tensor_batch


def test_payloads_round_trip_without_pickles_and_old_pickles_are_refused(tmp_path):
    """Issue 31: a checkpoint's payloads are tensors (read with weights_only=True) and JSON; restoring runs nothing.
    The pickled format verl's save_to_disk writes is refused with the way to convert it, and converts exactly."""
    import json

    from pc_pipelines.training.verl_batch import convert_pickled_payloads

    alloc = Allocator(AllocatorConfig(method="grpo", train_batch=2, n=4, seed=0), len(ROWS))
    session = alloc.begin_step()
    call = session.next_call()
    gen, layout = round_batch(call, ROWS.__getitem__)
    out = fake_generate(gen, np.random.default_rng(3))
    n = len(out)
    out.non_tensor_batch["extras"] = np.array([{"acc": i % 2, "tags": ["a", i]} for i in range(n)], dtype=object)
    out.non_tensor_batch["messages"] = np.empty(n, dtype=object)
    for i in range(n):
        out.non_tensor_batch["messages"][i] = [{"role": "user", "content": f"q{i}"}]
    payloads = PayloadStore()
    payloads.put(split_by_request(out, layout), layout)
    written = payloads.save(tmp_path / "payloads")
    assert not [f for f in written if f.endswith(".pkl")]
    back = PayloadStore.load(tmp_path / "payloads")
    assert len(back) == len(payloads) == n
    for start in payloads._starts:
        a, b = payloads._parts[start], back._parts[start]
        assert sorted(a.batch.keys()) == sorted(b.batch.keys())
        for k in sorted(a.batch.keys()):
            assert torch.equal(a.batch[k], b.batch[k]) and a.batch[k].dtype == b.batch[k].dtype, k
        assert sorted(a.non_tensor_batch) == sorted(b.non_tensor_batch)
        for k, col in a.non_tensor_batch.items():
            assert col.dtype == b.non_tensor_batch[k].dtype and col.tolist() == b.non_tensor_batch[k].tolist(), k
        assert a.meta_info == b.meta_info

    # the old format: verl's pickles (here with a payload that would create a marker) are never unpickled
    old = tmp_path / "old"
    old.mkdir()
    for start in payloads._starts:
        payloads._parts[start].save_to_disk(old / f"{start}.pkl")
    (old / "index.json").write_text(json.dumps({"starts": payloads._starts}))
    with pytest.raises(BatchError, match="convert_pickled_payloads"):
        PayloadStore.load(old)
    assert convert_pickled_payloads(old) == len(payloads._starts)  # the trusted path, on our own files
    assert not list(old.glob("*.pkl"))
    assert len(PayloadStore.load(old)) == n


def test_converting_pickles_that_fails_on_a_disk_error_leaves_every_old_byte(tmp_path, monkeypatch):
    """Issue 40: the conversion writes, verifies and renames in the new files before it touches an old one; a write
    failing half-way (here the second rename, after one new file is in place) removes what it added, leaves each
    .pkl and the index byte for byte, names the fix, and the conversion then runs."""
    import hashlib
    import json
    import os

    from pc_pipelines.training import verl_batch
    from pc_pipelines.training.verl_batch import convert_pickled_payloads

    alloc = Allocator(AllocatorConfig(method="grpo", train_batch=2, n=4, seed=0), len(ROWS))
    call = alloc.begin_step().next_call()
    gen, layout = round_batch(call, ROWS.__getitem__)
    payloads = PayloadStore()
    payloads.put(split_by_request(fake_generate(gen, np.random.default_rng(3)), layout), layout)
    old = tmp_path / "old"
    old.mkdir()
    for start in payloads._starts:
        payloads._parts[start].save_to_disk(old / f"{start}.pkl")
    (old / "index.json").write_text(json.dumps({"starts": payloads._starts}))

    def digest():
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(old.iterdir())}

    before = digest()
    real_replace, calls = os.replace, []

    def failing_replace(src, dst):
        calls.append(dst)
        if len(calls) == 2:
            raise OSError(28, "No space left on device", str(dst))
        return real_replace(src, dst)

    monkeypatch.setattr(verl_batch.os, "replace", failing_replace)
    with pytest.raises(BatchError, match=r"writing the new files failed \(No space left on device\); the \.pkl files "
                                         r"and index\.json are unchanged\. Fix: free space"):
        convert_pickled_payloads(old)
    monkeypatch.setattr(verl_batch.os, "replace", real_replace)
    assert len(calls) == 2 and digest() == before  # the one new file renamed in is gone again, no staging left
    assert convert_pickled_payloads(old) == len(payloads._starts)
    assert len(PayloadStore.load(old)) == len(payloads) and not list(old.glob("*.pkl"))
