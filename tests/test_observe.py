from __future__ import annotations

import logging

import pytest

from drpc.observe import NULL_OBSERVER, OBSERVER_SERVICE, FanOut, Observer, bus, observer_of
from drpc.requests import ReturnInfo


class Recording(Observer):
    def __init__(self) -> None:
        self.events: list[tuple] = []

    def batch_coalesced(self, function: str, size: int) -> None:
        self.events.append(("batch_coalesced", function, size))


class Broken(Observer):
    def batch_coalesced(self, function: str, size: int) -> None:
        raise RuntimeError("observer bug")


def test_fan_out_reaches_every_observer_even_past_a_broken_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    first, second = Recording(), Recording()
    fan = FanOut(first, Broken(), NULL_OBSERVER, second)
    with caplog.at_level(logging.ERROR, logger="drpc.observe"):
        fan.batch_coalesced("reach", 3)
    assert first.events == second.events == [("batch_coalesced", "reach", 3)]
    assert "observer bug" in caplog.text


def test_observer_of_services() -> None:
    recording = Recording()
    assert observer_of(None) is NULL_OBSERVER
    assert observer_of({}) is NULL_OBSERVER
    assert observer_of({OBSERVER_SERVICE: recording}) is recording


def test_unknown_events_are_not_swallowed() -> None:
    with pytest.raises(AttributeError):
        FanOut(Recording()).no_such_event  # noqa: B018


class Sized(Observer):
    def __len__(self) -> int:
        return 0  # an empty collection of things, still an observer


def test_a_falsy_observer_is_still_the_observer() -> None:
    sized = Sized()
    assert observer_of({OBSERVER_SERVICE: sized}) is sized
    assert observer_of({OBSERVER_SERVICE: None}) is NULL_OBSERVER


def test_engines_report_to_a_bus_that_keeps_an_observers_exceptions() -> None:
    assert bus(None) is NULL_OBSERVER
    assert bus(NULL_OBSERVER) is NULL_OBSERVER
    fan = FanOut(Recording())
    assert bus(fan) is fan  # already a bus
    broken = bus(Broken())
    assert isinstance(broken, FanOut)
    broken.batch_coalesced("reach", 3)  # logged, not raised


def test_every_event_is_a_typed_method_the_bus_passes_on() -> None:
    events = [name for name in vars(Observer) if not name.startswith("_")]
    assert {"step_started", "tx_committed", "request_submitted", "request_refused"} <= set(events)
    for name in events:
        assert getattr(FanOut, name) is not getattr(Observer, name), name


class Choosy(Observer):
    def __init__(self, wanted: set[str]) -> None:
        self.wanted = wanted

    def wants_steps(self, return_info: object) -> bool:
        return getattr(return_info, "request_id", None) in self.wanted


class Unsure(Observer):
    def wants_steps(self, return_info: object) -> bool:
        raise RuntimeError("observer bug")


def test_the_steps_of_a_request_are_wanted_when_any_observer_wants_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    first, second = ReturnInfo("1"), ReturnInfo("2")
    assert Observer().wants_steps(first)  # by default every request's
    fan = FanOut(Unsure(), Choosy({"1"}))
    with caplog.at_level(logging.ERROR, logger="drpc.observe"):
        assert fan.wants_steps(first) and not fan.wants_steps(second)
    assert "failed on wants_steps" in caplog.text  # logged, and taken as not wanting
    assert fan.wants_steps(second) is False
    assert FanOut(Choosy(set()), Recording()).wants_steps(second)
