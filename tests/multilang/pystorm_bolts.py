"""Bolts written against pystorm (Parse.ly's multilang library, from PyPI), run as
subprocesses by the tests: ``python pystorm_bolts.py exclaim|count``.

- ``exclaim``: a ``pystorm.Bolt``; [id, text] -> [id, text + "!"], auto-anchored and
  auto-acked by pystorm; "fail" raises, which pystorm reports (``error``) and fails.
- ``words``: a ``pystorm.Bolt`` emitting one [id, word] per word, anchored to its input.
"""

from __future__ import annotations

import sys

from pystorm import Bolt


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


if __name__ == "__main__":
    {"exclaim": Exclaim, "words": Words}[sys.argv[1]]().run()
