"""The consumer's claim policy (``postroom.log.claim_policy``), without a database: waits on a
fake clock, and hypothesis properties of the decisions: no partition starved, the poll's limits
kept, waits bounded and ended by a wake-up, one prefetch at a time."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from postroom.log import claim_policy
from postroom.log.claim_policy import POLL_INTERVAL, ClaimPolicy


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# -- waiting --------------------------------------------------------------------------------


def test_a_poll_waits_a_poll_interval_at_most_and_never_past_its_deadline() -> None:
    clock = FakeClock()
    policy = ClaimPolicy(poll_interval=0.5, clock=clock)
    deadline = policy.deadline(1.2)
    assert policy.wait(deadline) == 0.5
    clock.now += 0.5
    assert policy.wait(deadline) == 0.5
    clock.now += 0.5
    assert math.isclose(policy.wait(deadline) or 0, 0.2)
    clock.now += 0.2
    assert policy.wait(deadline) is None  # give up: return nothing
    clock.now += 10
    assert policy.wait(deadline) is None


def test_a_zero_or_negative_timeout_fetches_once_and_never_waits() -> None:
    clock = FakeClock()
    policy = ClaimPolicy(clock=clock)
    assert policy.wait(policy.deadline(0)) is None
    assert policy.wait(policy.deadline(-5)) is None


def test_the_poll_interval_is_read_when_the_policy_is_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert ClaimPolicy().poll_interval == POLL_INTERVAL
    assert ClaimPolicy(poll_interval=60).poll_interval == 60
    monkeypatch.setattr(claim_policy, "POLL_INTERVAL", 7.0)  # tests/log/test_wakeups.py
    assert ClaimPolicy().poll_interval == 7.0


def test_poll_fetches_only_when_nothing_is_buffered() -> None:
    policy = ClaimPolicy()
    assert policy.fetch_now(buffered=False)
    assert not policy.fetch_now(buffered=True)


@given(
    timeout=st.floats(-1, 30, allow_nan=False),
    interval=st.floats(0.01, 5, allow_nan=False),
    wakeups=st.lists(st.floats(0, 1, allow_nan=False), max_size=50),
)
def test_an_empty_poll_ends_at_its_deadline_and_a_wakeup_ends_each_wait(
    timeout: float, interval: float, wakeups: list[float]
) -> None:
    """A poll on a topic that stays empty: each round fetches, then waits; a wake-up (the
    fraction of the wait after which it came, if any) ends the wait early, and the next wait
    starts afresh: never longer than the interval, never past the deadline, no backoff that
    grows. The poll returns at its deadline, having fetched at most once per interval (plus
    the first) when nothing wakes it."""
    clock = FakeClock()
    policy = ClaimPolicy(poll_interval=interval, clock=clock)
    start = clock.now
    deadline = policy.deadline(timeout)
    timed_out = 0
    woken = iter(wakeups)  # then none: every later wait times out, so the poll ends
    while True:
        wait = policy.wait(deadline)
        if wait is None:
            break
        assert 0 < wait <= interval
        assert clock.now + wait <= deadline + 1e-9
        assert wait == min(interval, deadline - clock.now)  # the same after a wake-up
        fraction = next(woken, None)
        if fraction is None or fraction >= 1:
            clock.now += wait  # timed out: polling is the truth
            timed_out += 1
        else:
            clock.now += wait * fraction
    assert clock.now >= deadline  # never returns before the deadline
    assert clock.now - start <= max(timeout, 0) + 1e-9  # nor after it
    assert timed_out <= math.ceil(max(timeout, 0) / interval) + 1  # + 1: float rounding


# -- fairness -------------------------------------------------------------------------------


def test_each_fetch_starts_one_partition_further() -> None:
    policy = ClaimPolicy()
    items = ["a", "b", "c"]
    assert [policy.order(items, "fetch") for _ in range(4)] == [
        ["a", "b", "c"],
        ["b", "c", "a"],
        ["c", "a", "b"],
        ["a", "b", "c"],
    ]
    assert policy.order(items, "claim") == ["a", "b", "c"]  # counters are separate
    assert policy.order([], "fetch") == []


@given(
    changes=st.lists(st.lists(st.integers(0, 20), unique=True), max_size=10),
    partitions=st.lists(st.integers(0, 20), unique=True, min_size=1, max_size=12),
    backlog=st.integers(1, 1000),
    limit=st.integers(1, 100),
)
def test_no_partition_is_starved(
    changes: list[list[int]], partitions: list[int], backlog: int, limit: int
) -> None:
    """Whatever the assignment changes before, once the partitions in use stay the same each is
    served first once in every ``len(partitions)`` fetches, and every partition with a backlog
    gets rows within that many fetches of ``limit`` rows in all (the fetch fills its limit
    from the partitions in the order given, as ``fetch_messages`` does)."""
    policy = ClaimPolicy()
    for items in changes:
        policy.order(items, "fetch")
    rounds = [policy.order(partitions, "fetch") for _ in range(len(partitions))]
    assert all(sorted(r) == sorted(partitions) for r in rounds)
    assert sorted(r[0] for r in rounds) == sorted(partitions)
    left = dict.fromkeys(partitions, backlog * limit)  # a backlog longer than any fetch
    served: set[int] = set()
    for order in rounds:
        room = limit
        for partition in order:
            rows = min(room, left[partition])
            if rows:
                served.add(partition)
                left[partition] -= rows
                room -= rows
    assert served == set(partitions)


# -- limits and the prefetch ----------------------------------------------------------------


@given(
    limit=st.integers(1, 2**31 - 1),
    max_bytes=st.integers(1, 2**63 - 1),
    sent=st.tuples(st.integers(1, 2**31 - 1), st.integers(1, 2**63 - 1)),
)
def test_a_prefetch_serves_only_a_poll_with_its_limits(
    limit: int, max_bytes: int, sent: tuple[int, int]
) -> None:
    """A poll never gets rows fetched for other limits (more messages or bytes than it asked
    for, or fewer than it may take)."""
    policy = ClaimPolicy()
    assert policy.prefetch_fits((limit, max_bytes), (limit, max_bytes))
    assert policy.prefetch_fits(sent, (limit, max_bytes)) == (sent == (limit, max_bytes))


@given(
    rows=st.integers(0, 2000),
    limit=st.integers(1, 1000),
    in_flight=st.booleans(),
    closed=st.booleans(),
)
def test_a_prefetch_follows_a_full_batch_only_one_at_a_time_never_once_closed(
    rows: int, limit: int, in_flight: bool, closed: bool
) -> None:
    policy = ClaimPolicy()
    sends = policy.prefetch(rows, limit, in_flight=in_flight, closed=closed)
    assert sends == (rows >= limit and not in_flight and not closed)


@given(st.lists(st.tuples(st.integers(0, 600), st.booleans()), max_size=40))
def test_a_consumer_never_has_two_prefetches_in_flight(steps: list[tuple[int, bool]]) -> None:
    """The fetcher's sequence: each fetch (``rows`` for a limit of 500) may send a prefetch;
    the next poll uses (and so ends) the one in flight, or a seek drops it. At most one is in
    flight, and one is sent after every full batch while none is."""
    policy = ClaimPolicy()
    in_flight = False
    for rows, dropped in steps:
        if dropped:
            in_flight = False
        sends = policy.prefetch(rows, 500, in_flight=in_flight, closed=False)
        assert not (sends and in_flight)
        assert sends == (rows >= 500 and not in_flight)
        in_flight = in_flight or sends
