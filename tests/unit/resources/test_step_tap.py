"""``tapped_reader`` and ``LaunchMessages``: a launched segment's messages reach the asset as they arrive, through a
message reader passed to the Pipes client (Dagster's public ``message_reader``), every message still goes to
Dagster's handler unchanged and first, a bad step row is logged, never raised into the reader, and a refusal by the
run's writer lock is read from its structured message."""

from contextlib import contextmanager

from dagster import PipesMessageReader, PipesSubprocessClient, PipesTempFileMessageReader

from pc_pipelines.run import REFUSED
from pc_pipelines_dagster.resources.compute import LaunchMessages, tapped_reader

STEP = {"step": 3, "sampled_rollouts": 96, "trained_rollouts": 64, "loss": -0.01, "mean_reward": 0.5,
        "reward_std": 0.4, "cumulative_rollouts": 400, "time_update_s": 1.5}


class Handler:
    def __init__(self, order: list) -> None:
        self.got: list[dict] = []
        self.order = order
        self.context = "the asset's context"

    def handle_message(self, message) -> None:
        self.got.append(message)
        self.order.append(("dagster", message.get("method")))


class Reader(PipesMessageReader):
    """Delivers ``messages`` to the handler inside ``read_messages``, as a reader's thread would."""

    def __init__(self, messages=()) -> None:
        self.messages = list(messages)

    @contextmanager
    def read_messages(self, handler):
        assert handler.context == "the asset's context"  # the rest of the handler reads through
        for m in self.messages:
            handler.handle_message(m)
        yield {"path": "x"}

    def no_messages_debug_text(self) -> str:
        return "test"


class Log:
    def __init__(self) -> None:
        self.warnings: list[str] = []

    def warning(self, msg) -> None:
        self.warnings.append(msg)


def custom(payload) -> dict:
    return {"__dagster_pipes_version": "0.1", "method": "report_custom_message", "params": {"payload": payload}}


def test_every_message_reaches_dagster_first_then_the_tap_and_steps_reach_on_step():
    messages = [{"method": "opened", "params": {}}, custom(STEP), custom({"note": "not a step"}),
                {"method": "log", "params": {"message": "hi", "level": "info"}}]
    order, seen, log = [], [], Log()
    launched = LaunchMessages(seen.append)
    reader = tapped_reader(Reader, lambda m: (order.append(("tap", m.get("method"))), launched(m)), log,
                           messages=messages)
    assert isinstance(reader, Reader) and isinstance(reader, PipesMessageReader)
    handler = Handler(order)
    with reader.read_messages(handler) as params:
        assert params == {"path": "x"}
    assert handler.got == messages  # unchanged, in order
    assert order == [(who, m["method"]) for m in messages for who in ("dagster", "tap")]
    assert [(r.step, r.cumulative_rollouts, r.timings) for r in seen] == [(3, 400, {"update": 1.5})]
    assert launched.shown == {3} and launched.refusal is None and log.warnings == []


def test_a_bad_step_is_logged_not_raised_and_a_refusal_is_kept():
    log, seen = Log(), []
    launched = LaunchMessages(seen.append)
    refusal = {"message": "run 'r' is being written by pid 7 on host h. Fix: wait.", "holder": {"pid": 7}}
    reader = tapped_reader(Reader, launched, log, messages=[custom({"step": "x"}), custom({REFUSED: refusal})])
    handler = Handler([])
    with reader.read_messages(handler):
        pass
    assert len(handler.got) == 2 and seen == []
    assert len(log.warnings) == 1 and "ValueError" in log.warnings[0]
    assert launched.refusal == refusal


def test_without_a_tap_the_reader_is_the_clients_own_and_the_client_takes_it_publicly():
    handler = Handler([])
    reader = tapped_reader(Reader, None, Log(), messages=[custom(STEP)])
    with reader.read_messages(handler):
        pass
    assert handler.got == [custom(STEP)]
    tapped = tapped_reader(PipesTempFileMessageReader, print, Log())
    assert isinstance(tapped, PipesTempFileMessageReader)
    assert PipesSubprocessClient(message_reader=tapped).message_reader is tapped
