"""The one backpressure rule: pause once, resume once, never touch a closing transport, and a pause that came
before the producer was connected applies when it is."""

from __future__ import annotations

from tokenpath.serve.flow import ReadGate


class FakeTransport:
    def __init__(self) -> None:
        self.calls: list[str] = []
        self.closing = False

    def is_closing(self) -> bool:
        return self.closing

    def pause_reading(self) -> None:
        self.calls.append("pause")

    def resume_reading(self) -> None:
        self.calls.append("resume")


def test_pause_and_resume_are_idempotent() -> None:
    t = FakeTransport()
    gate = ReadGate(t)  # type: ignore[arg-type]
    gate.pause()
    gate.pause()
    gate.resume()
    gate.resume()
    assert t.calls == ["pause", "resume"]


def test_a_pause_before_the_producer_connects_applies_on_attach() -> None:
    gate = ReadGate()
    gate.pause()
    t = FakeTransport()
    gate.attach(t)  # type: ignore[arg-type]
    assert t.calls == ["pause"]
    gate.resume()
    assert t.calls == ["pause", "resume"]


def test_a_closing_transport_is_left_alone() -> None:
    t = FakeTransport()
    gate = ReadGate(t)  # type: ignore[arg-type]
    t.closing = True
    gate.pause()
    gate.resume()
    assert t.calls == []
