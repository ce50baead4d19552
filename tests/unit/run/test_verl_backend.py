"""The verl backend through the segment driver, on CPU with verl's real ``DataProto``: everything of ours (the
allocator's rounds as generation batches, grading, feedback, the trained groups' batch, our state saved beside
verl's actor checkpoint and restored before it, evaluation on exported HF weights) is the production code; a test
trainer stands in for verl's Ray workers (the real ones: tests/integration/run/test_verl_backend_cpu.py).

The stand-in answers each generation row with a right or wrong ``\\boxed{}`` answer chosen by (rollout id, prompt
id), as verl 0.9's agent loop shapes its output (left-padded prompts, right-padded responses, masks), and its
"actor" is a running digest of every batch it was trained on, so a resumed run that trained anything differently
ends with another digest."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from verl import DataProto

from pc_pipelines.config import resolve
from pc_pipelines.run import evaluate_checkpoint, list_checkpoints, prepare_run, run_segment
from pc_pipelines.run.verl import VerlBackend
from pc_pipelines.store import Store
from pc_pipelines.training.verl_batch import PROMPT_ID, ROLLOUT_ID, PayloadStore

pytestmark = [pytest.mark.slow]

EOS, PAD, P_WIDTH, R_WIDTH = 1, 0, 6, 16
SETTINGS = {"allocator.train_batch": 4, "allocator.n": 8, "allocator.n_pilot": 4, "allocator.pilot_wave": 2,
            "allocator.commit_mean": 4, "task.num_prompts": 40, "task.heldout_per_length": 3,
            "training.eval_samples": 1, "training.checkpoint_every": 2, "training.eval_every": 3,
            "training.keep_checkpoints": 10}


class Crash(RuntimeError):
    pass


class CPUTrainer:
    """Stands in for verl's Ray trainer (see the module docstring)."""

    eos_token_id = EOS

    def __init__(self, policy: Path, golds: list[str], crash_after_updates: int | None = None) -> None:
        self.policy, self.golds, self.crash_after_updates = policy, golds, crash_after_updates
        self.actor = {"digest": "", "updates": 0, "syncs": 0}

    def decode(self, token_ids):
        return "".join(chr(t) for t in token_ids if t > EOS)

    def generate_sequences(self, gen: DataProto) -> DataProto:
        if self.actor["updates"] == self.crash_after_updates:
            raise Crash(f"the rollout workers died after {self.crash_after_updates} updates")
        ids, prompts = gen.non_tensor_batch[ROLLOUT_ID], gen.non_tensor_batch[PROMPT_ID]
        n = len(gen)
        responses = torch.full((n, R_WIDTH), PAD, dtype=torch.long)
        rmask = torch.zeros((n, R_WIDTH), dtype=torch.long)
        for i, (rid, p) in enumerate(zip(ids.tolist(), prompts.tolist())):
            answer = self.golds[p] if (rid * 7 + p) % 3 == 0 else "0"
            toks = [ord(c) for c in f"\\boxed{{{answer}}}"][: R_WIDTH - 1] + [EOS]
            responses[i, : len(toks)] = torch.tensor(toks)
            rmask[i, : len(toks)] = 1
        prompt_ids = torch.tensor([[2 + (p + j) % 90 for j in range(P_WIDTH)] for p in prompts.tolist()])
        attn = torch.cat([torch.ones((n, P_WIDTH), dtype=torch.long), rmask], dim=1)
        out = DataProto.from_dict(
            tensors={"prompts": prompt_ids, "responses": responses, "response_mask": rmask, "attention_mask": attn,
                     "input_ids": torch.cat([prompt_ids, responses], dim=1)},
            non_tensors=dict(gen.non_tensor_batch))
        return out.select_idxs(np.random.permutation(n))  # workers return rows in any order

    def sleep_replicas(self):
        pass

    def update_policy(self, batch: DataProto) -> dict[str, float]:
        h = hashlib.sha256(self.actor["digest"].encode())
        for key in ("responses", "attention_mask"):
            h.update(batch.batch[key].numpy().tobytes())
        h.update(json.dumps(sorted(batch.non_tensor_batch["uid"].tolist())).encode())
        self.actor = {**self.actor, "digest": h.hexdigest(), "updates": self.actor["updates"] + 1}
        return {"actor/pg_loss": float(batch.batch["attention_mask"].float().mean())}

    def sync_weights(self):
        self.actor["syncs"] += 1

    def save_actor(self, directory: Path):
        directory.mkdir(parents=True)
        (directory / "actor_state.json").write_text(json.dumps(self.actor))
        shutil.copytree(self.policy, directory / "huggingface")  # verl's hf_model content

    def load_actor(self, directory: Path):
        self.actor = json.loads((directory / "actor_state.json").read_text())

    def export_hf(self, directory: Path) -> Path:
        shutil.rmtree(directory, ignore_errors=True)
        shutil.copytree(self.policy, directory)  # the stand-in never changes its weights
        return directory


def verl_run(tmp_path: Path, name: str, policy: Path):
    cfg = resolve("embedded", dict(SETTINGS), method="pc", seed=3)
    return prepare_run(cfg, tmp_path / "runs", name, policy_path=policy)


def backend(run, policy, **kw) -> VerlBackend:
    return VerlBackend(run, trainer=CPUTrainer(policy, run.task.golds, **kw))


def final(run, store: Store) -> dict:
    step, ck = list_checkpoints(run.checkpoint_dir)[-1]
    payloads = PayloadStore.load(ck / "payloads")
    return {
        "step": step,
        "actor": json.loads((ck / "verl" / "actor" / "actor_state.json").read_text())["digest"],
        "allocator": json.loads((ck / "allocator.json").read_text()),
        "totals": json.loads((ck / "meta.json").read_text())["totals"],
        "payload_rows": len(payloads),
        "steps": store.query("SELECT step, rounds, sampled_rollouts, trained_rollouts, buffer_size, loss, mean_reward, "
                             f"mean_reward_std FROM steps WHERE run_id = '{run.run_id}' ORDER BY step"),
        "evals": store.query(f"SELECT step, benchmark, accuracy FROM eval_results WHERE run_id = '{run.run_id}' "
                             "ORDER BY step, benchmark"),
    }


def test_the_verl_backend_resumes_a_second_segment_exactly(base_policy, tmp_path):
    store = Store(tmp_path / "pc.duckdb")
    whole = verl_run(tmp_path, "whole", base_policy)
    ref = run_segment(whole, store, until_step=6, backend=backend(whole, base_policy))
    assert (ref.first_step, ref.last_step, ref.steps_run) == (1, 6, 6)  # steps count from 1
    assert ref.mean_reward_std is not None and ref.last_eval_accuracy is not None  # the fields the local one has
    assert sum(r.ledger["trained_rollouts"] for r in ref.records) > 0 and ref.records[-1].loss is not None
    ck = list_checkpoints(whole.checkpoint_dir)[-1][1]
    assert (ck / "verl" / "actor" / "actor_state.json").is_file() and (ck / "payloads" / "index.json").is_file()
    assert (ck / "policy" / "config.json").is_file()  # the HF weights where eval-segment reads every checkpoint's
    assert evaluate_checkpoint(whole, 6).accuracy == {r["benchmark"]: r["accuracy"] for r in store.query(
        "SELECT benchmark, accuracy FROM eval_results WHERE run_id = 'whole' AND step = 6")}

    seg = verl_run(tmp_path, "segmented", base_policy)
    first = run_segment(seg, store, until_step=3, from_step=0, backend=backend(seg, base_policy))
    assert (first.first_step, first.last_step) == (1, 3)
    second = run_segment(seg, store, until_step=6, from_step=3, backend=backend(seg, base_policy))
    assert (second.first_step, second.last_step, second.steps_run) == (4, 6, 3)
    assert [r.to_json() | {k: 0 for k in r.to_json() if k.startswith("time_")} for r in second.records] == \
        [r.to_json() | {k: 0 for k in r.to_json() if k.startswith("time_")} for r in ref.records[3:]]
    assert final(seg, store) == final(whole, store)


def test_a_verl_segment_that_dies_mid_step_resumes_to_the_same_end(base_policy, tmp_path):
    store = Store(tmp_path / "pc.duckdb")
    whole = verl_run(tmp_path, "whole", base_policy)
    run_segment(whole, store, until_step=5, backend=backend(whole, base_policy))
    cut = verl_run(tmp_path, "cut", base_policy)
    with pytest.raises(Crash):
        run_segment(cut, store, until_step=5, backend=backend(cut, base_policy, crash_after_updates=3))
    assert store.get_run("cut")["status"] == "failed"
    assert [s for s, _ in list_checkpoints(cut.checkpoint_dir)] == [2]  # died in step 4, before its checkpoint
    run_segment(cut, store, until_step=5, backend=backend(cut, base_policy))
    assert final(cut, store) == final(whole, store)


def test_verl_processes_load_the_vllm_compat_module_beside_a_platform_plugin():
    from pc_pipelines.run.verl import COMPAT_MODULE, verl_modules

    assert verl_modules({}) == COMPAT_MODULE
    assert verl_modules({"VERL_USE_EXTERNAL_MODULES": "verl_cpu_platform"}) == f"verl_cpu_platform,{COMPAT_MODULE}"
    both = f"verl_cpu_platform,{COMPAT_MODULE}"
    assert verl_modules({"VERL_USE_EXTERNAL_MODULES": both}) == both  # named once
