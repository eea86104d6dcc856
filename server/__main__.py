"""``python -m drpc.server``: the ``drpc-server`` command line."""

from __future__ import annotations

from drpc.server.cli import main

raise SystemExit(main())
