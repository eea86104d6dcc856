"""drpc.server.admission: which connections a port admits, and which idle ones make room.

The table is pure (events in, decisions out): each test drives it through an exact
sequence of events and asserts every decision.
"""

from __future__ import annotations

import pytest
from drpc.server.admission import (
    PER_ADDRESS_CEILING,
    Admission,
    ConnectionTable,
    check_per_address,
    default_per_address,
)

A, B, C = "127.0.0.2", "127.0.0.3", "127.0.0.4"


def test_below_both_limits_every_connection_is_admitted_as_is() -> None:
    table: ConnectionTable[str] = ConnectionTable(4, 2)
    assert table.open("a1", A, 0.0) == Admission(True)
    assert table.open("b1", B, 1.0) == Admission(True)
    assert len(table) == 2 and table.idle_connections() == 2


def test_at_the_total_the_oldest_idle_connection_of_any_address_makes_room() -> None:
    table: ConnectionTable[str] = ConnectionTable(4, 2)
    for key, host, now in [("a1", A, 0.0), ("b1", B, 1.0), ("a2", A, 2.0), ("b2", B, 3.0)]:
        assert table.open(key, host, now) == Admission(True)
    table.busy("a1")  # a call in flight: not idle, so b1 is now the oldest idle
    assert table.open("c1", C, 4.0) == Admission(True, ("b1",))
    assert (len(table), table.connections_from(B), table.connections_from(C)) == (4, 1, 1)
    table.idle("a1", 5.0)  # idle again, from now: the youngest but c1
    assert table.open("c2", C, 6.0) == Admission(True, ("a2",))
    # C is at its cap of 2 now: its own oldest idle connection makes room, not b2 (older)
    assert table.open("c3", C, 7.0) == Admission(True, ("c1",))


def test_at_the_total_with_none_idle_the_new_connection_is_refused_naming_why() -> None:
    table: ConnectionTable[str] = ConnectionTable(2, 1)
    table.open("a1", A, 0.0)
    table.open("b1", B, 1.0)
    table.busy("a1")
    table.busy("b1")
    refused = table.open("c1", C, 2.0)
    assert refused == Admission(
        False, reason="2 connections open (max_connections), none of them idle"
    )
    assert len(table) == 2 and table.connections_from(C) == 0
    table.idle("b1", 3.0)  # its call answered: now it may make room
    assert table.open("c1", C, 4.0) == Admission(True, ("b1",))


def test_at_an_address_cap_only_that_address_s_idle_connections_make_room() -> None:
    table: ConnectionTable[str] = ConnectionTable(8, 2)
    table.open("b1", B, 0.0)  # older, but another address's: never taken for A's cap
    table.open("a1", A, 1.0)
    table.open("a2", A, 2.0)
    assert table.open("a3", A, 3.0) == Admission(True, ("a1",))
    table.busy("a2")
    table.busy("a3")
    assert table.open("a4", A, 4.0) == Admission(
        False,
        reason=f"2 connections open from {A} (max_connections_per_address), none of them idle",
    )
    assert table.open("c1", C, 5.0) == Admission(True)  # other addresses still connect
    assert table.connections_from(A) == 2 and len(table) == 4


def test_closing_forgets_a_connection_and_a_reclaimed_one_closes_as_a_no_op() -> None:
    table: ConnectionTable[str] = ConnectionTable(2, 1)
    table.open("a1", A, 0.0)
    table.open("b1", B, 1.0)
    assert table.open("c1", C, 2.0) == Admission(True, ("a1",))
    table.closed("a1")  # the listener's own close of the reclaimed connection
    assert (len(table), table.connections_from(A)) == (2, 0)
    table.closed("b1")
    assert (len(table), table.connections_from(B), table.idle_connections()) == (1, 0, 1)
    assert table.open("a2", A, 3.0) == Admission(True)


def test_events_for_unknown_keys_change_nothing() -> None:
    table: ConnectionTable[str] = ConnectionTable(2, 1)
    table.busy("ghost")
    table.idle("ghost", 0.0)
    table.closed("ghost")
    assert len(table) == 0 and table.idle_connections() == 0


def test_idle_twice_keeps_the_first_time_it_went_idle() -> None:
    table: ConnectionTable[str] = ConnectionTable(2, 1)
    table.open("a1", A, 0.0)
    table.open("b1", B, 1.0)
    table.idle("a1", 5.0)  # already idle since 0.0: still the oldest
    assert table.open("c1", C, 6.0) == Admission(True, ("a1",))


def test_the_per_address_default_follows_the_total() -> None:
    assert default_per_address(4096) == PER_ADDRESS_CEILING == 256
    assert default_per_address(64) == 32
    assert default_per_address(3) == 1
    assert default_per_address(1) == 1  # a port of one connection has nothing to share
    for total in (2, 3, 64, 600, 4096):
        assert default_per_address(total) < total


@pytest.mark.parametrize(("per_address", "total"), [(64, 64), (65, 64), (2, 2)])
def test_a_per_address_cap_at_or_above_the_total_is_refused(per_address: int, total: int) -> None:
    with pytest.raises(ValueError, match=rf"\({per_address}\) must be below max_connections"):
        check_per_address(per_address, total)
    with pytest.raises(ValueError, match="lock out every other caller"):
        ConnectionTable(total, per_address)


@pytest.mark.parametrize(("per_address", "total"), [(63, 64), (1, 2), (1, 1)])
def test_a_per_address_cap_below_the_total_is_accepted(per_address: int, total: int) -> None:
    check_per_address(per_address, total)
    assert ConnectionTable(total, per_address).max_per_address == per_address


def test_non_positive_limits_are_refused_naming_them() -> None:
    with pytest.raises(ValueError, match="max_connections must be positive"):
        ConnectionTable(0, 1)
    with pytest.raises(ValueError, match="max_connections_per_address must be positive"):
        ConnectionTable(4, 0)
