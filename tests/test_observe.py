from __future__ import annotations

import logging

import pytest

from drpc.observe import NULL_OBSERVER, OBSERVER_SERVICE, FanOut, Observer, notify, observer_of


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
        notify(fan, "batch_coalesced", "reach", 3)
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
