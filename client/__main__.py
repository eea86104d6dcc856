"""``python -m drpc.client FUNCTION ARGS``: the ``drpc-client`` command line."""

from __future__ import annotations

from drpc.client.cli import main

raise SystemExit(main())
