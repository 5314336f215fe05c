"""serve.runner in one process: the app is made, started, announced, and closed (drained) on a signal or exit()."""

from __future__ import annotations

import signal
import socket

import pytest

from tokenpath.serve.runner import Config, Server


class RecordingApp:
    def __init__(self, events: list[str], sock: socket.socket | None) -> None:
        self.events = events
        events.append(f"made with {sock}")

    @property
    def url(self) -> str:
        return "http://127.0.0.1:1"

    def note(self) -> str:
        return "recording"

    async def start(self) -> None:
        self.events.append("start")

    async def close(self) -> None:
        self.events.append("close")


@pytest.mark.parametrize("how", ["exit", "sigterm"])
def test_one_process_announces_once_started_and_closes_on_a_stop(how: str) -> None:
    events: list[str] = []
    server = Server(Config("test", "127.0.0.1", 0, loop="asyncio"), lambda sock: RecordingApp(events, sock))

    def announce(line: str) -> None:
        events.append(line)
        if how == "exit":
            server.exit()
        else:
            signal.raise_signal(signal.SIGTERM)

    server.run(announce)
    assert events == ["made with None", "start", "listening on http://127.0.0.1:1 (recording)", "close"]
