"""The word count of the broker spout tests; configured by environment for subprocess runs.

``word_count(spout, markers, opaque, percent)`` counts words from any spout
with the fault tests' bolts (``tests.transactional.faults.count_words``:
first attempts failing where ``markers`` says, ``percent`` of the
processing ones). ``topology()`` is that word count over the broker
``tests.brokers.Broker.environment()`` described
(``DRPC_TEST_OPAQUE``: "1" for the opaque spout and map, ``DRPC_TEST_TAKE``:
entries per partition per batch), for ``drpc-transactional run`` in a
subprocess.
"""

from __future__ import annotations

import os
from typing import Any

from drpc.transactional import TransactionalTopologyBuilder
from tests.brokers import broker_from_environment

from .faults import count_words

TOPOLOGY_ID = "broker-words"


def word_count(
    spout: Any, markers: str | None = None, opaque: bool = False, percent: int = 20
) -> TransactionalTopologyBuilder:
    return count_words(spout, TOPOLOGY_ID, markers, opaque, percent)


def topology() -> TransactionalTopologyBuilder:
    opaque = os.environ.get("DRPC_TEST_OPAQUE") == "1"
    spout = broker_from_environment().spout(int(os.environ["DRPC_TEST_TAKE"]), opaque)
    return word_count(spout, opaque=opaque)
