"""Storm's multilang protocol: bolts (and spouts) whose code runs in a subprocess.

Contract: ``ShellBolt(*command, cwd=None, env=None, ...)`` and ``ShellSpout(...)`` are
subclassed as in Storm, the command being the subprocess to run and the subclass
declaring the output fields; they speak the protocol as Storm's ShellBolt and ShellSpout
do (JSON messages each followed by a line ``end``, the ``pidDir``/``conf``/``context``
handshake, heartbeats): a subprocess written against the protocol serves as it would
on Storm (the tests run Python and JavaScript ones written against the protocol alone;
Storm's own adapters and pystorm are not tested yet). The modules:

- ``wire``: the message framing; ``handshake``: the setup message;
- ``bolt_protocol`` and ``spout_protocol``: the protocol as sans-IO state machines,
  deciding ``decisions``;
- ``process``: one subprocess and its pipes; ``bolt`` and ``spout``: the components,
  thin shells carrying the machines' decisions out, their command and settings in
  ``component``.

Faults are typed (``drpc.errors.ShellProcessError`` and its subclasses).
"""

from __future__ import annotations

from drpc.multilang.bolt import ShellBolt
from drpc.multilang.spout import ShellSpout

__all__ = ["ShellBolt", "ShellSpout"]
