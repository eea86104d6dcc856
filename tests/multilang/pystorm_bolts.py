"""Bolts written against pystorm (Parse.ly's multilang library, from PyPI), run as
subprocesses by the tests: ``python pystorm_bolts.py exclaim|count``.

- ``exclaim``: a ``pystorm.Bolt``; [id, text] -> [id, text + "!"], auto-anchored and
  auto-acked by pystorm; "fail" raises, which pystorm reports (``error``) and fails.
- ``words``: a ``pystorm.Bolt`` emitting one [id, word] per word, anchored to its input.
- ``batched``: a ``pystorm.BatchingBolt`` grouping tuples by request id between tick
  tuples, then [id, text + "!"] for each (it needs ``topology.tick.tuple.freq.secs``).
"""

from __future__ import annotations

import sys

from pystorm import BatchingBolt, Bolt


class Exclaim(Bolt):
    def process(self, tup):  # type: ignore[no-untyped-def]
        request, text = tup.values
        if text == "fail":
            raise ValueError("pystorm bolt refuses 'fail'")
        self.emit([request, text + "!"])


class Words(Bolt):
    def process(self, tup):  # type: ignore[no-untyped-def]
        request, text = tup.values
        for word in text.split():
            self.emit([request, word])


class BatchedExclaim(BatchingBolt):
    ticks_between_batches = 1

    def group_key(self, tup):  # type: ignore[no-untyped-def]
        return tup.values[0]

    def process_batch(self, key, tups):  # type: ignore[no-untyped-def]
        for tup in tups:
            request, text = tup.values
            self.emit([request, text + "!"])


if __name__ == "__main__":
    {"exclaim": Exclaim, "words": Words, "batched": BatchedExclaim}[sys.argv[1]]().run()
