"""Properties of the I/O-free group assignment (postroom.log.assignment)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from postroom.log.assignment import assign, assign_topic

MEMBERS = st.lists(st.sampled_from([f"m{i}" for i in range(8)]), unique=True, max_size=8)


@st.composite
def situations(draw: st.DrawFn) -> tuple[list[int], list[str], dict[int, str | None]]:
    count = draw(st.integers(0, 40))
    partitions = list(range(count))
    members = draw(MEMBERS)
    # Holders may be live members, members that left, or nobody.
    holders = st.one_of(st.none(), st.sampled_from([f"m{i}" for i in range(10)]))
    current = {p: draw(holders) for p in partitions}
    return partitions, members, current


@given(situations())
def test_every_partition_has_exactly_one_live_member_and_shares_are_even(
    situation: tuple[list[int], list[str], dict[int, str | None]],
) -> None:
    partitions, members, current = situation
    result = assign_topic(partitions, members, current)
    if not members:
        assert result == {}
        return
    assert set(result) == set(partitions)
    assert set(result.values()) <= set(members)
    counts = [list(result.values()).count(m) for m in members]
    low, high = divmod(len(partitions), len(members))
    assert all(c in (low, low + (1 if high else 0)) for c in counts)


@given(situations())
def test_a_live_member_keeps_what_its_share_allows(
    situation: tuple[list[int], list[str], dict[int, str | None]],
) -> None:
    partitions, members, current = situation
    result = assign_topic(partitions, members, current)
    if not members:
        return
    low = len(partitions) // len(members)
    for member in members:
        held = {p for p, m in current.items() if m == member}
        kept = {p for p in held if result[p] == member}
        # Sticky: it loses partitions only above its share, never below floor.
        assert len(kept) >= min(len(held), low)
        if len(held) <= low:
            assert kept == held


@given(situations())
def test_a_balanced_assignment_is_returned_unchanged(
    situation: tuple[list[int], list[str], dict[int, str | None]],
) -> None:
    partitions, members, current = situation
    first = assign_topic(partitions, members, current)
    assert assign_topic(partitions, members, first) == first


@given(situations(), st.sampled_from(["new1", "new2"]))
def test_a_join_moves_only_the_partitions_the_newcomer_gets(
    situation: tuple[list[int], list[str], dict[int, str | None]], newcomer: str
) -> None:
    partitions, members, current = situation
    before = assign_topic(partitions, members, current)
    after = assign_topic(partitions, [*members, newcomer], before)
    changed = {p for p in partitions if before.get(p) != after[p]}
    assert changed == {p for p, m in after.items() if m == newcomer}


@given(situations())
def test_a_leave_moves_only_the_partitions_of_the_member_that_left(
    situation: tuple[list[int], list[str], dict[int, str | None]],
) -> None:
    partitions, members, current = situation
    if len(members) < 2:
        return
    before = assign_topic(partitions, members, current)
    gone = members[0]
    after = assign_topic(partitions, members[1:], before)
    changed = {p for p in partitions if before[p] != after[p]}
    assert changed == {p for p, m in before.items() if m == gone}


def test_topics_are_balanced_among_their_own_subscribers() -> None:
    result = assign({1: 4, 2: 2}, {"a": [1, 2], "b": [1]}, {})
    assert sorted(m for (t, _), m in result.items() if t == 1) == ["a", "a", "b", "b"]
    assert [m for (t, _), m in result.items() if t == 2] == ["a", "a"]
