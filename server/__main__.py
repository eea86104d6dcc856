"""``python -m server``: the ``drpc-server`` command line."""

from __future__ import annotations

from server.cli import main

raise SystemExit(main())
