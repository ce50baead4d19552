"""Allocator <-> verl ``DataProto``: the CPU-testable half of the verl backend (:mod:`pc_pipelines.run.verl`).

The recipe's generation rounds come from OUR allocator (:mod:`pc_pipelines.allocation`, the same module the CPU
loop uses); this module translates between its vocabulary (engine calls of ``(prompt id, n, stage)`` requests,
rollout ids, rewards, trained groups) and verl's batches:

* :func:`round_batch`: ONE engine call (a round: PC's commit requests from the replay buffer and pilot requests
  for fresh prompts together) -> one generation ``DataProto`` for ONE ``generate_sequences`` call of verl 0.9's
  agent-loop rollout manager. Each request is expanded into ``n`` rows (verl 0.9's agent loop generates one
  sequence per row, so per-request ``n`` costs nothing); every row carries its rollout id, request index and stage.
  The batch allows uneven chunks (``_verl_auto_padding``), so no rollout is wasted on padding to the number of
  agent-loop workers (the paper's 0.5-era recipe instead trimmed the commit batch to a multiple of the GPU count).
* :func:`with_request_columns`: the request's columns put back where verl's agent loop left them out (0.9.1 copies
  them only when it adds no column of its own, which it does with reward-loop workers running).
* :func:`split_by_request`: the generated batch back into one ``DataProto`` per request, by rollout id (whatever
  order the workers returned them in).
* :func:`decode_responses` + a grader -> one reward per rollout -> :func:`feedback`: the per-request reward arrays
  ``StepSession.observe`` takes.
* :class:`PayloadStore`: the generated rows by rollout id (the allocator holds ids only, docs/DESIGN.md section 3):
  a PC pilot generated at step t is trained at step t' <= t + d from here; checkpoints save and load it.
* :func:`training_batch`: the step's trained groups -> one training ``DataProto``: every row of a group (for PC
  the prompt's pilot rows plus its commit rows) shares one ``uid``, so verl's GRPO advantage
  (``compute_grpo_outcome_advantage``, grouping by ``uid``) normalizes exactly the allocator's groups; the reward
  sits on the last response token (``token_level_scores``), as verl's rule-based reward managers put it.
* :func:`step_metrics`: the allocator's ledger as ``pc/...`` metrics for verl's tracker.

Departure from the paper's recipe: old log-probs are recomputed by the trainer for the whole batch (as the recipe
does), so lagged pilot rows need no stored log-probs; rewards are binary 1/0 with overlong = 0 (docs/DESIGN.md section 3).
"""

from __future__ import annotations

import bisect
import json
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..allocation import EngineCall, StepOutcome

ROLLOUT_ID = "pc_rollout_id"
GLOBAL_STEPS = "global_steps"
REQUEST = "pc_request"
STAGE = "pc_stage"
PROMPT_ID = "pc_prompt_id"
UID = "uid"
AUTO_PADDING = "_verl_auto_padding"  # verl.protocol.DataProtoConfig.auto_padding_key: uneven chunks allowed


class BatchError(RuntimeError):
    """A batch does not match what the allocator asked for; the message says what to fix."""


def prompt_row(prompt_id: int, prompt: str, gold: str, data_source: str = "pc_pipelines") -> dict[str, Any]:
    """One prompt as verl 0.9's RL dataset presents it to the agent loop: chat ``raw_prompt`` (the prompt is
    already templated), ``reward_model.ground_truth``, ``data_source``, ``index``."""
    return {
        "raw_prompt": [{"role": "user", "content": prompt}],
        "reward_model": {"style": "rule", "ground_truth": gold},
        "data_source": data_source,
        "extra_info": {"prompt_id": int(prompt_id)},
        "index": int(prompt_id),
    }


@dataclass(frozen=True)
class RoundLayout:
    """Where each request of an engine call sits in its generation batch (rows ``offsets[i] .. + counts[i]``)."""

    call: EngineCall
    offsets: np.ndarray
    counts: np.ndarray

    @property
    def rollout_ids(self) -> np.ndarray:
        return np.concatenate([np.arange(s, s + n, dtype=np.int64)
                               for s, n in zip(self.call.rollout_starts.tolist(), self.call.n.tolist())]) \
            if len(self.call) else np.zeros(0, np.int64)


def round_batch(call: EngineCall, row_of: Callable[[int], Mapping[str, Any]]) -> tuple[Any, RoundLayout]:
    """The generation batch of one engine call: request ``i`` expanded into ``call.n[i]`` rows of ``row_of(prompt)``
    in request order. Returns the ``DataProto`` and its :class:`RoundLayout`."""
    from verl import DataProto

    counts = call.n.astype(np.int64)
    if len(call) == 0 or int(counts.sum()) == 0:
        raise BatchError(f"engine call {call.index} of step {call.step} asks for no rollouts: nothing to generate.")
    offsets = np.zeros(len(call), np.int64)
    np.cumsum(counts[:-1], out=offsets[1:])
    owner = np.repeat(np.arange(len(call)), counts)
    rows = [dict(row_of(p)) for p in call.prompt_ids.tolist()]
    keys = sorted({k for r in rows for k in r})
    missing = [(i, k) for i, r in enumerate(rows) for k in keys if k not in r]
    if missing:
        i, k = missing[0]
        raise BatchError(f"prompt {int(call.prompt_ids[i])} has no {k!r} while other prompts do. Fix: give every "
                         "prompt row the same keys (see prompt_row).")
    non_tensors: dict[str, np.ndarray] = {}
    for k in keys:
        col = np.empty(len(call), dtype=object)
        col[:] = [r[k] for r in rows]
        non_tensors[k] = col[owner]
    starts = call.rollout_starts.astype(np.int64)
    non_tensors[ROLLOUT_ID] = (starts[owner] + (np.arange(len(owner)) - offsets[owner])).astype(np.int64)
    non_tensors[REQUEST] = owner.astype(np.int64)
    non_tensors[STAGE] = call.stages.astype(np.int8)[owner]
    non_tensors[PROMPT_ID] = call.prompt_ids.astype(np.int64)[owner]
    non_tensors[UID] = np.array([f"s{call.step}-c{call.index}-r{i}" for i in owner.tolist()], dtype=object)
    batch = DataProto.from_dict(
        tensors={"dummy_tensor": torch.zeros((len(owner), 1), dtype=torch.uint8)},
        non_tensors=non_tensors,
        meta_info={AUTO_PADDING: True, "global_steps": call.step, "pc_call": call.index},
    )
    return batch, RoundLayout(call, offsets, counts)


def with_request_columns(request, output):
    """A copy of ``output`` (verl's generation of ``request``) with every non-tensor column of the request it lacks,
    by position: verl 0.9.1's agent loop keeps its rows in request order but passes the request's columns through only
    when it adds none of its own (with reward-loop workers it adds some, and ``pc_rollout_id`` went missing)."""
    missing = [k for k in request.non_tensor_batch if k not in output.non_tensor_batch]
    if not missing:
        return output
    if len(output) != len(request):
        raise BatchError(f"the generated batch has {len(output)} rows for {len(request)} requested and lacks the "
                         f"request's columns {missing}: they cannot be put back by position. Fix: generate one row "
                         "per requested row.")
    columns = {**output.non_tensor_batch, **{k: request.non_tensor_batch[k] for k in missing}}
    return type(output)(batch=output.batch, non_tensor_batch=columns, meta_info=output.meta_info)


def split_by_request(output, layout: RoundLayout) -> list:
    """The generated batch as one ``DataProto`` per request of the call, rows in rollout-id order. Raises when the
    output's rollout ids are not exactly those the call asked for."""
    if ROLLOUT_ID not in output.non_tensor_batch:
        raise BatchError(f"the generated batch has no {ROLLOUT_ID!r} column. Fix: generate from round_batch's batch "
                         "(the agent loop passes its non-tensor columns through).")
    ids = np.asarray(output.non_tensor_batch[ROLLOUT_ID], dtype=np.int64)
    order = np.argsort(ids, kind="stable")
    want = layout.rollout_ids
    if ids.shape[0] != want.shape[0] or not np.array_equal(ids[order], np.sort(want)):
        raise BatchError(f"engine call {layout.call.index} of step {layout.call.step} asked for {want.shape[0]} "
                         f"rollouts; {ids.shape[0]} came back with other rollout ids. Fix: the engine must return "
                         "exactly one row per requested row (drop any padding rows before splitting).")
    if not np.array_equal(order, np.arange(order.shape[0])):
        output = output.select_idxs(order)
    return [output.slice(int(o), int(o + c)) for o, c in zip(layout.offsets.tolist(), layout.counts.tolist())]


def response_lengths(batch) -> np.ndarray:
    """Valid response tokens per row (``response_mask`` if present, else the response part of the attention mask)."""
    if "response_mask" in batch.batch.keys():  # noqa: SIM118 - a TensorDict; .keys() as in verl's ray_trainer
        return batch.batch["response_mask"].sum(-1).cpu().numpy().astype(np.int64)
    width = batch.batch["responses"].shape[-1]
    return batch.batch["attention_mask"][:, -width:].sum(-1).cpu().numpy().astype(np.int64)


def decode_responses(batch, decode: Callable[[list[int]], str], eos_id: int | None) -> tuple[list[str], list[bool]]:
    """Response texts and truncation flags: a response that fills the width without an end token was cut
    (overlong, scored ``overlong_reward``)."""
    responses = batch.batch["responses"].cpu()
    lengths = response_lengths(batch)
    width = responses.shape[-1]
    texts, truncated = [], []
    for row, n in zip(responses.tolist(), lengths.tolist()):
        toks = row[:n]
        texts.append(decode(toks))
        truncated.append(n >= width and (eos_id is None or not toks or toks[-1] != eos_id))
    return texts, truncated


def feedback(layout: RoundLayout, rewards: Sequence[float] | np.ndarray) -> list[np.ndarray]:
    """Flat rewards in request-row order -> one array per request, as ``StepSession.observe`` takes them."""
    flat = np.asarray(rewards, dtype=np.float64)
    if flat.shape[0] != int(layout.counts.sum()):
        raise BatchError(f"{flat.shape[0]} rewards for {int(layout.counts.sum())} rollouts. Fix: one reward per row.")
    return [flat[o : o + c] for o, c in zip(layout.offsets.tolist(), layout.counts.tolist())]


def token_level_scores(rewards: np.ndarray, response_mask: torch.Tensor) -> torch.Tensor:
    """[rows, response width] zeros with each row's reward on its last valid response token (token 0 for an empty
    response), as verl's rule-based reward managers place outcome rewards."""
    scores = torch.zeros(response_mask.shape, dtype=torch.float32)
    last = (response_mask.sum(-1).long() - 1).clamp(min=0)
    scores[torch.arange(scores.shape[0]), last] = torch.as_tensor(np.asarray(rewards), dtype=torch.float32)
    return scores


class PayloadStore:
    """Generated rows by rollout id, one ``DataProto`` per request (the allocator's spans map onto requests)."""

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._parts: dict[int, Any] = {}

    def __len__(self) -> int:
        return sum(len(p) for p in self._parts.values())

    def put(self, parts: Sequence, layout: RoundLayout) -> None:
        for start, part in zip(layout.call.rollout_starts.tolist(), parts):
            if start not in self._parts:
                bisect.insort(self._starts, start)
            self._parts[start] = part

    def rows(self, start: int, count: int):
        i = bisect.bisect_right(self._starts, start) - 1
        if i < 0:
            raise BatchError(f"rollouts {start}..{start + count - 1} were never stored. Fix: put every generated "
                             "request into the payload store before training on it.")
        base = self._starts[i]
        part = self._parts[base]
        if start - base + count > len(part):
            raise BatchError(f"rollouts {start}..{start + count - 1} run past the stored request at {base}.")
        return part.slice(start - base, start - base + count)

    def save(self, directory: Path) -> list[str]:
        """Write every stored request into ``directory``: ``index.json``, and per request ``<start>.pt`` (its
        tensors, a ``torch.save`` dict that ``weights_only=True`` reads) and ``<start>.json`` (its non-tensor columns
        and ``meta_info`` as JSON). No pickle of Python objects: restoring a checkpoint runs nothing in it (verl's
        own ``save_to_disk`` pickles the whole ``DataProto``). Returns the files written, relative to the
        directory's parent."""
        import io

        directory.mkdir(parents=True, exist_ok=True)
        written = []
        for start in self._starts:
            part = self._parts[start]
            buf = io.BytesIO()
            torch.save({k: v.contiguous() for k, v in part.batch.items()} if part.batch is not None else {}, buf)
            with open(directory / f"{start}.pt", "wb") as f:  # a full disk is the OSError it is, naming the file
                f.write(buf.getbuffer())
            columns = {k: _column_json(k, v) for k, v in part.non_tensor_batch.items()}
            (directory / f"{start}.json").write_text(json.dumps(
                {"rows": len(part), "columns": columns, "meta_info": part.meta_info}, default=_json_default))
            written += [f"{directory.name}/{start}.pt", f"{directory.name}/{start}.json"]
        (directory / "index.json").write_text(json.dumps({"format": PAYLOAD_FORMAT, "starts": self._starts}))
        return [f"{directory.name}/index.json", *written]

    @classmethod
    def load(cls, directory: Path) -> PayloadStore:
        """The store :meth:`save` wrote into ``directory``: tensors read with ``weights_only=True``, the rest from
        JSON. A payload of the pickled format (before issue 31) is refused with the way to convert it."""
        from verl import DataProto

        index = json.loads((directory / "index.json").read_text())
        if index.get("format") != PAYLOAD_FORMAT:
            raise BatchError(
                f"{directory} holds payloads pickled by verl's DataProto.save_to_disk (written before "
                "pc-pipelines read checkpoints without unpickling); loading them would run whatever they hold. Fix: "
                "if you wrote this checkpoint yourself, convert it in a trusted session with "
                "`pc_pipelines.training.verl_batch.convert_pickled_payloads(<that directory>)` and rewrite the "
                "checkpoint's manifest (`pc_pipelines.run.checkpoints.write_manifest`), or resume from an earlier "
                "checkpoint / start the run over with --overwrite."
            )
        store = cls()
        for start in index["starts"]:
            start = int(start)
            tensors = torch.load(directory / f"{start}.pt", weights_only=True)
            doc = json.loads((directory / f"{start}.json").read_text(), object_hook=_json_object)
            non_tensors = {k: _column_array(k, c, doc["rows"]) for k, c in doc["columns"].items()}
            if tensors:
                part = DataProto.from_dict(tensors=tensors, non_tensors=non_tensors, meta_info=doc["meta_info"])
            else:
                part = DataProto(batch=None, non_tensor_batch=non_tensors, meta_info=doc["meta_info"])
            store._starts.append(start)
            store._parts[start] = part
        return store

    def keep_only(self, live: np.ndarray) -> None:
        """Drop every request none of whose rollouts is live (the allocator's ``live_rollout_ids``)."""
        live = np.sort(np.asarray(live, dtype=np.int64))
        for start in list(self._starts):
            n = len(self._parts[start])
            lo = np.searchsorted(live, start)
            if lo >= live.shape[0] or live[lo] >= start + n:
                del self._parts[start]
                self._starts.remove(start)


PAYLOAD_FORMAT = 2  # 2: <start>.pt (tensors) + <start>.json; 1 (no "format"): verl's pickled DataProto files


def _json_default(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return {"__ndarray__": value.tolist(), "dtype": value.dtype.str}
    if isinstance(value, np.generic):
        return value.item()
    raise BatchError(f"a payload holds a {type(value).__name__}, which is not stored without pickling. Fix: keep "
                     "non-tensor columns to strings, numbers, lists, dicts and numpy arrays.")


def _json_object(d: dict) -> Any:
    if "__ndarray__" in d and set(d) == {"__ndarray__", "dtype"}:
        dtype = np.dtype(d["dtype"])
        if dtype.kind == "O":
            raise BatchError("a payload's JSON names an object array inside a value. Fix: re-save the checkpoint.")
        return np.asarray(d["__ndarray__"], dtype=dtype)
    return d


def _column_json(name: str, col: np.ndarray) -> dict[str, Any]:
    col = np.asarray(col)
    if col.dtype.kind == "O":
        return {"dtype": "object", "shape": list(col.shape), "values": col.ravel().tolist()}
    if col.dtype.kind not in "biufU?":
        raise BatchError(f"payload column {name!r} has dtype {col.dtype}, which is not stored without pickling.")
    return {"dtype": col.dtype.str, "shape": list(col.shape), "values": col.ravel().tolist()}


def _column_array(name: str, c: dict[str, Any], rows: int) -> np.ndarray:
    shape = tuple(int(x) for x in c["shape"])
    if c["dtype"] == "object":
        out = np.empty(len(c["values"]), dtype=object)
        for i, v in enumerate(c["values"]):  # element by element: a list value stays one object
            out[i] = v
        return out.reshape(shape)
    dtype = np.dtype(c["dtype"])
    if dtype.kind == "O":
        raise BatchError(f"payload column {name!r} names an object dtype as numbers. Fix: re-save the checkpoint.")
    return np.asarray(c["values"], dtype=dtype).reshape(shape)


def convert_pickled_payloads(directory: Path) -> int:
    """Rewrite a payload directory of the pickled format (verl's ``save_to_disk``, before issue 31) in the current
    one. It UNPICKLES the old files: run it only on a checkpoint you wrote yourself. Returns the requests converted;
    the checkpoint's manifest must then be rewritten (its files changed).

    Nothing old is touched until everything new is written and checked: every request is read and every value
    checked storable, the new files are written into a staging folder (``.tmp-convert-<nonce>``) and read back
    equal to what was read, they are renamed in beside the old ones, ``index.json`` is replaced in one rename (the
    switch to the new format), and only then are the ``<start>.pkl`` files removed. A failure before the switch
    leaves the ``.pkl`` files and the index as they were (the new files it renamed in are removed again) and raises
    a one-line :class:`BatchError` naming the file or value and the fix; the conversion can then be run again."""
    import uuid

    from verl import DataProto

    from ..durable import fsync_dir

    directory = Path(directory)
    index = json.loads((directory / "index.json").read_text())
    if index.get("format") == PAYLOAD_FORMAT:
        return 0
    where = f"cannot convert {directory}"
    starts = [int(s) for s in index["starts"]]
    twice = sorted({s for s in starts if starts.count(s) > 1})
    if twice:
        raise BatchError(f"{where}: index.json lists request start(s) {', '.join(map(str, twice))} more than once "
                         "(each start is one <start>.pkl); nothing was changed. Fix: list each start once in "
                         "index.json's \"starts\", then run the conversion again.")
    store = PayloadStore()
    for start in starts:
        try:
            part = DataProto.load_from_disk(directory / f"{start}.pkl")
        except (OSError, EOFError, ValueError) as exc:
            raise BatchError(f"{where}: {start}.pkl unreadable ({exc}); nothing was changed. Fix: restore it, or "
                             "resume from an earlier checkpoint.") from exc
        problem = _unstorable(part)
        if problem:
            raise BatchError(f"{where}: {start}.pkl's {problem}, which the current format stores only by pickling; "
                             "nothing was changed. Fix: in a trusted session, load it (DataProto.load_from_disk), "
                             "make that value a string, number, list, dict or numpy array, save_to_disk it back, then "
                             "run the conversion again; or resume from an earlier checkpoint.")
        bisect.insort(store._starts, start)
        store._parts[start] = part
    for leftover in directory.glob(".tmp-convert-*"):  # of a conversion killed before its switch
        shutil.rmtree(leftover, ignore_errors=True)
    staging = directory / f".tmp-convert-{uuid.uuid4().hex[:8]}"
    moved: list[Path] = []
    try:
        written = store.save(staging)
        names = [w.split("/", 1)[1] for w in written]
        for name in names:
            with open(staging / name, "rb") as f:
                os.fsync(f.fileno())
        back = PayloadStore.load(staging)
        for start in starts:
            diff = _payload_difference(store._parts[start], back._parts.get(start))
            if diff:
                raise BatchError(f"{where}: {start}.pkl converted does not read back the same ({diff}); nothing was "
                                 "changed. Fix: report it; resume from an earlier checkpoint meanwhile.")
        for name in names:
            if name != "index.json":
                os.replace(staging / name, directory / name)
                moved.append(directory / name)
        fsync_dir(directory)
        os.replace(staging / "index.json", directory / "index.json")  # the switch: the directory is now format 2
    except BaseException as exc:
        for p in moved:
            p.unlink(missing_ok=True)
        shutil.rmtree(staging, ignore_errors=True)
        if isinstance(exc, OSError):
            raise BatchError(f"{where}: writing the new files failed ({exc.strerror or exc}); the .pkl files and "
                             "index.json are unchanged. Fix: free space or make the folder writable, then run the "
                             "conversion again.") from exc
        raise
    fsync_dir(directory)
    for start in starts:
        (directory / f"{start}.pkl").unlink()
    shutil.rmtree(staging, ignore_errors=True)
    fsync_dir(directory)
    return len(starts)


def _unstorable(part) -> str | None:
    """Where a request holds a value the current format cannot store (``meta_info['k'] holds a set``), or None."""
    for key, value in part.meta_info.items():
        if not isinstance(key, (str, int, float, bool)) and key is not None:
            return f"meta_info has a {type(key).__name__} key ({_cut(key)})"
        try:
            json.dumps(value, default=_json_default)
        except (BatchError, TypeError, ValueError):
            return f"meta_info[{_cut(key, 60)}] holds a {type(value).__name__} ({_cut(value)})"
    for name, col in part.non_tensor_batch.items():
        try:
            json.dumps(_column_json(name, col), default=_json_default)
        except (BatchError, TypeError, ValueError):
            return f"non-tensor column {str(name)[:60]!r} holds {_cut(col)}"
    return None


def _cut(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _payload_difference(a, b) -> str | None:
    """What differs between a request as read and as written then read back, or None."""
    if b is None:
        return "missing"
    ka = sorted(a.batch.keys()) if a.batch is not None else []
    kb = sorted(b.batch.keys()) if b.batch is not None else []
    if ka != kb:
        return f"tensors {ka} vs {kb}"
    for k in ka:
        if a.batch[k].dtype != b.batch[k].dtype or not torch.equal(a.batch[k], b.batch[k]):
            return f"tensor {k!r}"
    if sorted(a.non_tensor_batch) != sorted(b.non_tensor_batch):
        return "non-tensor columns"
    for k, col in a.non_tensor_batch.items():
        if json.dumps(_column_json(k, col), default=_json_default) != json.dumps(
                _column_json(k, b.non_tensor_batch[k]), default=_json_default):
            return f"non-tensor column {k!r}"
    if json.dumps(a.meta_info, default=_json_default, sort_keys=True) != json.dumps(
            b.meta_info, default=_json_default, sort_keys=True):
        return "meta_info"
    return None


def group_uid(step: int, prompt_id: int) -> str:
    """The GRPO group id of a trained group: a prompt is trained at most once per step."""
    return f"s{step}-p{prompt_id}"


def training_batch(outcome: StepOutcome, payloads: PayloadStore):
    """The step's training ``DataProto``: per trained group, its rows (pilot spans first), one shared ``uid``,
    ``token_level_scores`` / ``token_level_rewards`` from the allocator's rewards, ``response_mask``; None when the
    step trains no group (shortfall with nothing kept: no update, the step still counts)."""
    from verl import DataProto

    parts = []
    for g in outcome.groups:
        rows = DataProto.concat([payloads.rows(s, c) for s, c in g.spans])
        rows.non_tensor_batch[UID] = np.array([group_uid(outcome.step, g.prompt_id)] * len(rows), dtype=object)
        parts.append(rows)
    if not parts:
        return None
    batch = DataProto.concat(parts)
    rewards = np.concatenate([g.rewards for g in outcome.groups])
    if "response_mask" not in batch.batch.keys():  # noqa: SIM118 - a TensorDict, as above
        width = batch.batch["responses"].shape[-1]
        batch.batch["response_mask"] = batch.batch["attention_mask"][:, -width:]
    scores = token_level_scores(rewards, batch.batch["response_mask"])
    batch.batch["token_level_scores"] = scores
    batch.batch["token_level_rewards"] = scores.clone()
    batch.meta_info.pop(AUTO_PADDING, None)
    if GLOBAL_STEPS in batch.non_tensor_batch:
        # verl's agent loop stamps each generated row with its step (lagged pilots: an earlier one); the same key in
        # meta_info would make DataProto.to_tensordict assert (one key, two places)
        batch.meta_info.pop(GLOBAL_STEPS, None)
    else:
        batch.meta_info[GLOBAL_STEPS] = outcome.step
    return batch


def step_metrics(outcome: StepOutcome, cumulative_sampled: int) -> dict[str, float]:
    """The allocator's ledger of the step as ``pc/<name>`` metrics (numbers only), for verl's ``Tracking``."""
    led = outcome.ledger.to_dict()
    led.pop("lags", None)
    out = {f"pc/{k}": float(v) for k, v in led.items() if isinstance(v, (int, float, bool, np.integer, np.floating))}
    out["pc/cumulative_sampled_rollouts"] = float(cumulative_sampled)
    return out
