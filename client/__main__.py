"""``python -m client FUNCTION ARGS``: the ``drpc-client`` command line."""

from __future__ import annotations

from client.cli import main

raise SystemExit(main())
