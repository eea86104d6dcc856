"""ShellBolts over the test multilang scripts of this directory (module-level, so every
executor can pickle them by reference; the scripts are found by absolute paths from here).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

from drpc import Fields, OutputFieldsDeclarer
from drpc.multilang import ShellBolt

HERE = Path(__file__).resolve().parent
PY_BOLT = str(HERE / "pybolt.py")
JS_BOLT = str(HERE / "exclaim.js")
NODE = shutil.which("node")


class PyExclaim(ShellBolt):
    """[id, text] -> [id, text + "!"] through tests/multilang/pybolt.py."""

    def __init__(self, *options: str, **settings: Any) -> None:
        super().__init__(sys.executable, PY_BOLT, *options, **settings)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "result"))


class JsExclaim(ShellBolt):
    """The same in JavaScript (tests/multilang/exclaim.js), run by node."""

    def __init__(self, **settings: Any) -> None:
        super().__init__(NODE or "node", JS_BOLT, **settings)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "result"))


PYSTORM_BOLTS = str(HERE / "pystorm_bolts.py")


class PystormBolt(ShellBolt):
    """A bolt of tests/multilang/pystorm_bolts.py (``which``), written with pystorm."""

    def __init__(
        self,
        which: str,
        fields: tuple[str, ...] = ("id", "result"),
        conf: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(sys.executable, PYSTORM_BOLTS, which)
        self.fields = fields
        self.conf = conf

    def get_component_configuration(self) -> dict[str, Any] | None:
        return self.conf

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields(*self.fields))
