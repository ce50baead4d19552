"""The in-pod entrypoint writes each Pipes message to stdout as ONE write (its JSON and newline together), whether
stdout was block-buffered (redirected to a file: a pod's or a Ray job's log) or unbuffered (``python -u``), so a
client tailing the log gets every step as it happens, and a line is never split around the merged stderr."""

import io
import sys

import pytest
from dagster_pipes import PipesStreamMessageWriterChannel

from pc_pipelines.cli.segment import _line_buffered_stdout


class Raw(io.RawIOBase):
    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        self.writes.append(bytes(b))
        return len(b)


@pytest.mark.parametrize("unbuffered", [False, True], ids=["block-buffered", "python -u"])
def test_each_message_is_one_write_as_soon_as_it_is_written(monkeypatch, unbuffered):
    raw = Raw()
    stream = io.TextIOWrapper(raw if unbuffered else io.BufferedWriter(raw), encoding="utf-8",
                              write_through=unbuffered)
    monkeypatch.setattr(sys, "stdout", stream)
    _line_buffered_stdout()
    channel = PipesStreamMessageWriterChannel(sys.stdout)
    channel.write_message({"method": "report_custom_message", "params": {"payload": {"step": 0}}})
    assert raw.writes == [b'{"method": "report_custom_message", "params": {"payload": {"step": 0}}}\n']
    channel.write_message({"step": 1})
    assert raw.writes[1:] == [b'{"step": 1}\n']
