"""``tap_steps``: a launched segment's steps reach the asset as its Pipes messages arrive, every message still goes
to Dagster's handler unchanged, and a bad step row is logged, never raised into the reader."""

from contextlib import contextmanager

from dagster import PipesMessageReader

from resources.compute import tap_steps

STEP = {"step": 3, "sampled_rollouts": 96, "trained_rollouts": 64, "loss": -0.01, "mean_reward": 0.5,
        "reward_std": 0.4, "cumulative_rollouts": 400, "time_update_s": 1.5}


class Handler:
    def __init__(self) -> None:
        self.got: list[dict] = []

    def handle_message(self, message) -> None:
        self.got.append(message)


class Reader(PipesMessageReader):
    """Delivers ``messages`` to the handler inside ``read_messages``, as a reader's thread would."""

    def __init__(self, messages) -> None:
        self.messages = messages

    @contextmanager
    def read_messages(self, handler):
        for m in self.messages:
            handler.handle_message(m)
        yield {}

    def no_messages_debug_text(self) -> str:
        return "test"


class Client:
    def __init__(self, reader, attr="message_reader") -> None:
        setattr(self, attr, reader)


class Log:
    def __init__(self) -> None:
        self.warnings: list[str] = []

    def warning(self, msg) -> None:
        self.warnings.append(msg)


def custom(payload) -> dict:
    return {"__dagster_pipes_version": "0.1", "method": "report_custom_message", "params": {"payload": payload}}


def test_steps_reach_on_step_and_every_message_the_handler():
    messages = [{"method": "opened", "params": {}}, custom(STEP), custom({"note": "not a step"}),
                {"method": "log", "params": {"message": "hi", "level": "info"}}]
    seen, log = [], Log()
    for attr in ("message_reader", "_message_reader"):  # Dagster's clients and dagster-ray's keep it under either
        handler, reader = Handler(), Reader(messages)
        assert tap_steps(Client(reader, attr), seen.append, log)
        with reader.read_messages(handler):
            pass
        assert handler.got == messages  # unchanged, in order
    assert [(r.step, r.cumulative_rollouts, r.timings) for r in seen] == [(3, 400, {"update": 1.5})] * 2
    assert log.warnings == []


def test_a_bad_step_is_logged_not_raised_and_nothing_is_tapped_without_a_callback():
    handler, reader, log = Handler(), Reader([custom({"step": "x"})]), Log()
    assert tap_steps(Client(reader), lambda rec: None, log)
    with reader.read_messages(handler):
        pass
    assert len(handler.got) == 1 and log.warnings and "ValueError" in log.warnings[0]
    assert not tap_steps(Client(Reader([])), None, log)
    assert not tap_steps(object(), print, log)  # no reader where the clients keep theirs: steps come at the end
