"""The allocator: drives one method step by step and keeps the books.

The world talks to it through a narrow interface: ``allocator.begin_step()`` opens a step's session; the session's
``next_call()`` hands out each :class:`~.types.EngineCall` (requests: prompt_id, n, stage, wave) and ``observe()``
takes its rewards (one array per request, in request order); ``finish()`` returns the step's outcome (trained
groups, ledger, observations), and ``abort_step()`` forgets a step that failed. The one loop that drives it is the
run layer's (``pc_pipelines.run.step_loop``). The session and what a method does in a step (its
:class:`~.step.StepContext`) are the step API, in :mod:`.step`; this module owns the state across steps and hands
a step only the parts of it the step changes. Prompts are integer ids ``0 .. M-1`` (the loop maps them to
dataset rows). Requests may carry any ``n`` and a ``wave`` number, and a method may issue any number of calls per
round, so strategies with per-prompt rollout counts and multi-wave pilots fit without changing the interface.

State (step counter, rollout-id counter, stream position, evictions and un-evictions, buffer, tie-break generator,
method state, which holds the strategies' own, e.g. the easy pool, and the history prior's posterior when on) round-trips through :meth:`Allocator.state_dict`
as plain JSON between steps; a step is atomic from the checkpoint's point of view (a crash mid-step replays the step from the last checkpoint).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..config.allocator import AllocatorConfig
from ..errors import field_error
from .buffer import SELECTION_STRATEGIES, ReplayBuffer
from .methods import METHODS, AllocationMethod, get_method
from .screen import ScreenStrategy
from .step import AllocatorError, IdCounters, StepContext, StepSession
from .strategies import SCREEN_KIND, STRATEGIES
from .stream import PromptStream

STATE_VERSION = 1


def check_config(config: AllocatorConfig) -> None:
    """The checks of ``config`` that need the registries: its method, buffer selection and PC strategies are
    registered names, and the method (with its strategies) accepts the settings (PC: at least one pilot and one
    commit rollout, two rounds, ...). :class:`Allocator` runs it; so do the commands that resolve a config from
    their user, before any work starts. Raises :class:`~pc_pipelines.errors.ConfigError` naming field and fix."""
    if config.method not in METHODS:
        raise field_error(config, "method", "unknown method", f"use one of {sorted(METHODS)}")
    if config.selection not in SELECTION_STRATEGIES:
        raise field_error(config, "selection", "unknown buffer selection strategy",
                          f"use one of {sorted(SELECTION_STRATEGIES)}")
    for kind, registered in STRATEGIES.items():
        if getattr(config, f"{kind}_strategy") not in registered:
            raise field_error(config, f"{kind}_strategy", f"unknown {kind} strategy", f"use one of {sorted(registered)}")
    METHODS[config.method].check_config(config)
    STRATEGIES[SCREEN_KIND][config.screen_strategy].check_config(config)


class Allocator:
    """Owns the cross-step state and runs one registered method."""

    def __init__(self, config: AllocatorConfig, num_prompts: int, prompt_groups: np.ndarray | None = None, *,
                 checked: bool = False) -> None:
        """``prompt_groups``: a group id per prompt (an attribute the dataset declares), pooling the history prior's
        prior (``screen_strategy``); None: one group. ``checked``: ``config`` already passed :func:`check_config`
        where its run started (a training run: ``run.start.start_training_run``), so it is not checked again."""
        if not checked:
            check_config(config)
        config.check_pool(num_prompts)
        self.config = config
        self.num_prompts = int(num_prompts)
        self.method: AllocationMethod = get_method(config.method)(config)
        self.selection = SELECTION_STRATEGIES[config.selection]()
        self.stream = PromptStream(num_prompts, config.seed)
        self.buffer = ReplayBuffer(config.max_age)
        # Tie-breaks and random selection draw from their own generator: the prompt stream stays common
        # across methods whatever the buffer does.
        self.rng = np.random.default_rng([config.seed, 0xB0FF])
        self.step = 0
        self.ids = IdCounters()  # next rollout id, next buffer entry id: advanced by the step that hands them out
        self.screen: ScreenStrategy = STRATEGIES[SCREEN_KIND][config.screen_strategy](  # type: ignore[call-arg]
            config, num_prompts, prompt_groups, self.method.uses_pilots)
        self._session: StepSession | None = None

    @property
    def next_rollout_id(self) -> int:
        return self.ids.rollout

    @next_rollout_id.setter
    def next_rollout_id(self, value: int) -> None:
        self.ids.rollout = value

    @property
    def next_entry_id(self) -> int:
        return self.ids.entry

    @next_entry_id.setter
    def next_entry_id(self, value: int) -> None:
        self.ids.entry = value

    # ---- stepping ----------------------------------------------------------------------------------------------
    def begin_step(self) -> StepSession:
        """Open the next step: its method's session, holding the stream, buffer, selection, tie-break generator
        and id counters (what a step changes), nothing else of the allocator."""
        if self._session is not None:
            raise AllocatorError(f"step {self.step} is still open. Fix: finish() it before beginning another.")
        ctx = StepContext(
            self.config,
            self.step,
            self.method.band(),
            stream=self.stream,
            buffer=self.buffer,
            selection=self.selection,
            rng=self.rng,
            ids=self.ids,
            screen=self.screen,
        )
        self._session = StepSession(ctx, self.method.plan_step, self._end_step)
        return self._session

    def _end_step(self) -> None:
        self._session = None
        self.step += 1

    def abort_step(self) -> None:
        """Forget the open step after a failure. The state is mid-step: restore a checkpoint to go on."""
        self._session = None

    # ---- inspection -----------------------------------------------------------------------------------------------
    def live_rollout_ids(self) -> np.ndarray:
        """Rollout ids still referenced (the buffer's pilots): the sidecar may drop every other payload."""
        if not self.buffer.entries:
            return np.zeros(0, np.int64)
        return np.concatenate(
            [np.arange(s, s + c) for e in self.buffer.entries for s, c in e.pilot_spans]
        )

    # ---- state -------------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        if self._session is not None:
            raise AllocatorError("cannot snapshot the allocator mid-step. Fix: checkpoint between steps.")
        return {
            "version": STATE_VERSION,
            "config": self.config.to_dict(),
            "num_prompts": self.num_prompts,
            "step": self.step,
            "next_rollout_id": self.next_rollout_id,
            "next_entry_id": self.next_entry_id,
            "stream": self.stream.state_dict(),
            "buffer": self.buffer.state_dict(),
            "rng": self.rng.bit_generator.state,
            "method": self.method.state_dict(),
            **({"screen": screen} if (screen := self.screen.state_dict()) else {}),
        }

    @classmethod
    def from_state_dict(cls, state: dict[str, Any], checked: AllocatorConfig | None = None) -> Allocator:
        """The allocator ``state`` holds. ``checked``: the run's config, already checked where the run started;
        the state's config must equal it (and is not checked again)."""
        if state.get("version") != STATE_VERSION:
            raise AllocatorError(
                f"allocator state version {state.get('version')!r} is not {STATE_VERSION}. Fix: resume with the "
                "pc-pipelines version that wrote the checkpoint, or start the run afresh."
            )
        config = AllocatorConfig.from_dict(state["config"])
        if checked is not None and config != checked:
            raise AllocatorError(f"the allocator state's config is not the run's ({_first_difference(config, checked)}). "
                                 "Fix: resume with the config the run started with, or start the run afresh.")
        alloc = cls(config, int(state["num_prompts"]), checked=checked is not None)
        alloc.step = int(state["step"])
        alloc.next_rollout_id = int(state["next_rollout_id"])
        alloc.next_entry_id = int(state["next_entry_id"])
        alloc.stream.load_state_dict(state["stream"])
        alloc.buffer.load_state_dict(state["buffer"])
        alloc.rng.bit_generator.state = state["rng"]
        alloc.method.load_state_dict(state["method"])
        if "screen" in state:
            alloc.screen.load_state_dict(state["screen"])
        return alloc


def _first_difference(a: AllocatorConfig, b: AllocatorConfig) -> str:
    """The first field whose value differs between ``a`` and ``b``, as ``field: a != b``."""
    da, db = a.to_dict(), b.to_dict()
    key = next((k for k in da if da[k] != db.get(k)), "config")
    return f"{key}: {da[key]!r} != {db.get(key)!r}"[:120]
