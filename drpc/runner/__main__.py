"""``python -m drpc.runner``: the ``drpc-runner`` command (``drpc.runner.cli``)."""

from drpc.runner.cli import main

raise SystemExit(main())
