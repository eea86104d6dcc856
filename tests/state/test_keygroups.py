"""Key groups: stable hashing of state keys, contiguous group ranges, whole groups moving."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drpc.errors import StateError, StateKeyError
from drpc.state.keygroups import (
    DEFAULT_KEY_GROUPS,
    MAX_KEY_GROUPS,
    check_layout,
    groups_of,
    key_group,
    key_hash,
    key_of,
    partition_of,
    partition_of_group,
)

keys = st.recursive(
    st.one_of(
        st.text(max_size=20),
        st.binary(max_size=20),
        st.integers(min_value=-(2**63), max_value=2**63 - 1),
    ),
    lambda inner: st.tuples(inner, inner),
    max_leaves=4,
)


def test_the_hash_is_fixed_across_processes_and_runs() -> None:
    """The on-disk layout depends on these values: they never change (a changed hash would
    strand every key of an existing partitioned state in the wrong partition)."""
    known = [0xD19EF094, 0x7E9F46A8, 0xC06B0894, 0xE099DD92]
    assert [key_hash(key) for key in ("cat", 7, b"x", ("a", 1))] == known
    assert [key_group(key) for key in ("cat", 7, b"x", ("a", 1))] == [104, 63, 96, 112]
    script = (
        "from drpc.state.keygroups import key_hash; "
        "print([key_hash(k) for k in ('cat', 7, b'x', ('a', 1))])"
    )
    other = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "123"},
    )
    assert other.stdout.strip() == str(known)
    assert len({key_group(f"w{n}") for n in range(10_000)}) == DEFAULT_KEY_GROUPS
    # keys a byte apart spread too (a CRC alone would keep them in a few groups)
    assert len({key_group(f"w{n}") for n in range(10)}) == 10


@given(st.integers(1, 300), st.integers(0, 2000))
def test_each_group_belongs_to_the_one_partition_whose_range_holds_it(
    partitions: int, extra: int
) -> None:
    key_groups = min(MAX_KEY_GROUPS, partitions + extra)
    covered: list[int] = []
    sizes = set()
    for partition in range(partitions):
        owned = groups_of(partition, key_groups, partitions)
        sizes.add(len(owned))
        covered.extend(owned)
        assert all(partition_of_group(g, key_groups, partitions) == partition for g in owned)
    assert covered == list(range(key_groups))  # contiguous, in order, each once
    assert max(sizes) - min(sizes) <= 1


@given(keys, st.integers(1, 16), st.integers(1, 16))
def test_changing_the_partition_count_moves_whole_groups(key: object, n: int, m: int) -> None:
    """Two keys of one group are in one partition whatever the partition count."""
    group = key_group(key)  # type: ignore[arg-type]
    for partitions in (n, m):
        assert partition_of(key, partitions) == partition_of_group(  # type: ignore[arg-type]
            group, DEFAULT_KEY_GROUPS, partitions
        )


def test_equal_keys_of_each_kind_meet_and_bad_keys_are_named() -> None:
    assert partition_of(("a", 1), 4) == partition_of(("a", 1), 4)
    assert key_hash("1") != key_hash(1)  # a str and an int are different keys
    for partitions in (1, 3):
        with pytest.raises(StateKeyError, match="float"):
            partition_of(1.5, partitions)  # type: ignore[arg-type]
    assert key_of(["w"]) == "w" and key_of(["a", 1]) == ("a", 1)


@pytest.mark.parametrize(
    ("partitions", "key_groups", "message"),
    [
        (0, 128, "at least one partition"),
        (True, 128, "at least one partition"),
        (4, 3, "from the number of partitions"),
        (4, 200.0, "from the number of partitions"),  # in range, but not an int
        (4, MAX_KEY_GROUPS + 1, "from the number of partitions"),
    ],
)
def test_a_layout_outside_its_bounds_is_refused(
    partitions: int, key_groups: int, message: str
) -> None:
    with pytest.raises(StateError, match=message):
        check_layout(partitions, key_groups)


def test_the_bounds_themselves_are_layouts() -> None:
    check_layout(1, 1)
    check_layout(4, 4)
    check_layout(MAX_KEY_GROUPS, MAX_KEY_GROUPS)
