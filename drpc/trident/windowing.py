"""Trident windows: what each window holds and when it fires, as a pure state machine.

Contract (Storm's Trident windowing, made deterministic for batches).

- ``WindowConfig`` says the window: ``tumbling_count(n)``,
  ``sliding_count(n, slide)``, ``tumbling_duration(d)`` or
  ``sliding_duration(d, interval)`` (``timedelta`` durations). Counts are
  ints >= 1, durations > 0 and the slide is at most the window; anything
  else raises ``InvalidTopologyError`` naming the argument. A tumbling
  window is a sliding one whose slide is its length.
- Each window task numbers its tuples 0, 1, 2, ... in the order its commits
  take them. A tuple's **position** is its number (count windows) or the
  time of the commit that took it, in whole microseconds (time windows:
  processing time, as in Storm's Trident; every tuple of a batch has the
  commit's time, so a batch never straddles two windows).
- Windows end at the multiples of the slide: the window ending at ``e``
  holds the positions ``[e - length, e)`` (so a count window's first
  windows hold fewer tuples, as Storm's first sliding windows do; time
  windows are aligned to the epoch). It **fires** in the commit that first
  brings the progress (the number of tuples taken; for time windows, the
  commit's time) to ``e`` or beyond, once, with the tuples of its
  positions. A window without tuples never fires. A time window therefore
  fires in the commit of the first batch at or after its end: a run with
  no batches fires nothing until its next batch.
- ``advance(config, progress, txid, size, now)`` is one commit: a batch of
  ``size`` tuples at time ``now`` (microseconds; time never goes back
  below the last commit's) for ``txid`` (above ``progress.txid``). It
  returns a ``Step``: the new ``Progress``, the ``Chunk`` the batch is
  stored as (None when empty), the windows that fire (in order of their
  end, each as the parts of stored chunks it holds) and the chunks no open
  window needs any more (to delete: the store stays bounded by the
  windows, about one window and one batch of tuples).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from drpc.errors import InvalidTopologyError

COUNT = "count"
TIME = "time"
MICROSECOND = timedelta(microseconds=1)


def _count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidTopologyError(f"{name} must be an int >= 1, got {value!r}")
    return value


def _duration(name: str, value: object) -> int:
    if not isinstance(value, timedelta) or value < MICROSECOND:
        raise InvalidTopologyError(
            f"{name} must be a timedelta of at least a microsecond, got {value!r}"
        )
    return value // MICROSECOND


def _slide_within(
    slide: int, length: int, names: tuple[str, str], shown: tuple[object, object]
) -> None:
    """Storm's rule: a window slides by at most its length (``names``/``shown``: the
    arguments as the caller gave them, for the error)."""
    if slide > length:
        raise InvalidTopologyError(
            f"{names[0]} ({shown[0]!r}) must not exceed {names[1]} ({shown[1]!r})"
        )


@dataclass(frozen=True, slots=True)
class WindowConfig:
    """A window: ``kind`` (count or time), ``length`` and ``slide`` in tuples or
    microseconds. Build it with the class methods, which check their arguments."""

    kind: str
    length: int
    slide: int

    def __post_init__(self) -> None:
        if self.kind not in (COUNT, TIME):
            raise InvalidTopologyError(f"a window is by {COUNT!r} or {TIME!r}, got {self.kind!r}")
        _count("a window's length", self.length)
        _count("a window's slide", self.slide)
        _slide_within(
            self.slide, self.length, ("the slide", "the length"), (self.slide, self.length)
        )

    @classmethod
    def tumbling_count(cls, window_count: int) -> WindowConfig:
        return cls(COUNT, _count("window_count", window_count), window_count)

    @classmethod
    def sliding_count(cls, window_count: int, slide_count: int) -> WindowConfig:
        length, slide = _count("window_count", window_count), _count("slide_count", slide_count)
        _slide_within(slide, length, ("slide_count", "window_count"), (slide, length))
        return cls(COUNT, length, slide)

    @classmethod
    def tumbling_duration(cls, window_duration: timedelta) -> WindowConfig:
        length = _duration("window_duration", window_duration)
        return cls(TIME, length, length)

    @classmethod
    def sliding_duration(
        cls, window_duration: timedelta, sliding_interval: timedelta
    ) -> WindowConfig:
        length = _duration("window_duration", window_duration)
        slide = _duration("sliding_interval", sliding_interval)
        _slide_within(
            slide,
            length,
            ("sliding_interval", "window_duration"),
            (sliding_interval, window_duration),
        )
        return cls(TIME, length, slide)

    @classmethod
    def tumbling(cls, window: int | timedelta) -> WindowConfig:
        """By count (an int: ``window_count``) or by time (a timedelta:
        ``window_duration``), as Storm's ``tumblingWindow`` overloads."""
        if isinstance(window, timedelta):
            return cls.tumbling_duration(window)
        if isinstance(window, bool) or not isinstance(window, int):
            raise InvalidTopologyError(
                "a tumbling window is a window_count (int) or a window_duration (timedelta), "
                f"got {window!r}"
            )
        return cls.tumbling_count(window)

    @classmethod
    def sliding(cls, window: int | timedelta, slide: int | timedelta) -> WindowConfig:
        """By count (two ints: ``window_count, slide_count``) or by time (two timedeltas:
        ``window_duration, sliding_interval``), as Storm's ``slidingWindow`` overloads."""
        if isinstance(window, timedelta) and isinstance(slide, timedelta):
            return cls.sliding_duration(window, slide)
        if isinstance(window, timedelta) or isinstance(slide, timedelta):
            raise InvalidTopologyError(
                "a sliding window is (window_count, slide_count), two ints, or "
                f"(window_duration, sliding_interval), two timedeltas; got {window!r}, {slide!r}"
            )
        return cls.sliding_count(window, slide)

    @property
    def is_tumbling(self) -> bool:
        return self.length == self.slide


@dataclass(frozen=True, slots=True)
class Chunk:
    """One commit's tuples in the store: numbers ``first`` .. ``first + size - 1``, taken at
    ``time`` (microseconds)."""

    first: int
    size: int
    time: int

    @property
    def end(self) -> int:
        return self.first + self.size


@dataclass(frozen=True, slots=True)
class Progress:
    """A window task's state between commits (see the module doc): the last txid applied,
    tuples numbered so far, the end up to which every window has fired (or was empty), the
    last commit's time, and the stored chunks an open window still needs, in order."""

    txid: int = 0
    tuples: int = 0
    fired_through: int = 0
    time: int = 0
    chunks: tuple[Chunk, ...] = ()


@dataclass(frozen=True, slots=True)
class Window:
    """The positions ``[start, end)`` of a window that fires (tuple numbers or microseconds)."""

    start: int
    end: int


@dataclass(frozen=True, slots=True)
class Part:
    """Offsets ``[low, high)`` of a stored chunk's tuples that belong to a window."""

    chunk: Chunk
    low: int
    high: int


@dataclass(frozen=True, slots=True)
class Firing:
    window: Window
    parts: tuple[Part, ...]

    @property
    def size(self) -> int:
        return sum(part.high - part.low for part in self.parts)


@dataclass(frozen=True, slots=True)
class Step:
    """What one commit does to a window task (see ``advance``)."""

    progress: Progress
    added: Chunk | None
    firings: tuple[Firing, ...]
    evicted: tuple[Chunk, ...]


def advance(config: WindowConfig, progress: Progress, txid: int, size: int, now: int) -> Step:
    """One commit of ``size`` tuples at time ``now`` for ``txid`` (see the module doc)."""
    if txid <= progress.txid:
        raise ValueError(f"txid {txid} is not after the last one applied, {progress.txid}")
    now = max(now, progress.time)
    added = Chunk(progress.tuples, size, now) if size else None
    chunks = progress.chunks + ((added,) if added else ())
    tuples = progress.tuples + size
    reached = tuples if config.kind == COUNT else now
    firings = tuple(
        firing
        for end in _ends(config, chunks, progress.fired_through, reached)
        if (firing := _firing(config, chunks, end)).parts
    )
    fired_through = max(progress.fired_through, reached - reached % config.slide)
    keep_from = fired_through + config.slide - config.length
    kept: list[Chunk] = []
    evicted: list[Chunk] = []
    for chunk in chunks:
        last = chunk.end - 1 if config.kind == COUNT else chunk.time
        (kept if last >= keep_from else evicted).append(chunk)
    return Step(
        Progress(txid, tuples, fired_through, now, tuple(kept)),
        added,
        firings,
        tuple(evicted),
    )


def _ends(config: WindowConfig, chunks: tuple[Chunk, ...], after: int, upto: int) -> list[int]:
    """The ends (multiples of the slide) in ``(after, upto]`` of windows that may hold tuples."""
    slide = config.slide
    if config.kind == COUNT:
        return list(range(after - after % slide + slide, upto + 1, slide))
    ends: set[int] = set()
    for chunk in chunks:
        # the windows holding time t end in (t, t + length]
        first = max(chunk.time - chunk.time % slide + slide, after - after % slide + slide)
        ends.update(range(first, min(chunk.time + config.length, upto) + 1, slide))
    return sorted(ends)


def _firing(config: WindowConfig, chunks: tuple[Chunk, ...], end: int) -> Firing:
    start = end - config.length
    parts = []
    for chunk in chunks:
        if config.kind == COUNT:
            low, high = max(start, chunk.first), min(end, chunk.end)
            if low < high:
                parts.append(Part(chunk, low - chunk.first, high - chunk.first))
        elif start <= chunk.time < end:
            parts.append(Part(chunk, 0, chunk.size))
    return Firing(Window(max(start, 0) if config.kind == COUNT else start, end), tuple(parts))
