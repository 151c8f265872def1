"""The producer's batch policy (``postroom.log.batching``), without a database: lingering on a
fake clock, and a hypothesis state machine of writers taking, admitting, sending and releasing
batches in any order, checked against the policy's guarantees after every step."""

from __future__ import annotations

import itertools

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from postroom.log.batching import MAX_IN_FLIGHT, OVERLAP_MIN_PENDING, BatchPolicy, Slot
from postroom.log.records import TopicMeta


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


TOPIC = TopicMeta(7, "t", 3)


def test_a_writer_lingers_until_the_deadline_on_the_clock() -> None:
    clock = FakeClock()
    policy = BatchPolicy(batch_size=100, linger=0.5, clock=clock)
    deadline = policy.linger_deadline()
    assert policy.linger_left(deadline, pending=1, hurry=False) == 0.5
    clock.now += 0.25
    assert policy.linger_left(deadline, pending=1, hurry=False) == 0.25
    clock.now += 0.25
    assert policy.linger_left(deadline, pending=1, hurry=False) == 0.0
    clock.now += 5
    assert policy.linger_left(deadline, pending=1, hurry=False) == 0.0  # never negative


def test_a_full_batch_or_a_hurry_ends_the_linger_at_once() -> None:
    policy = BatchPolicy(batch_size=100, linger=10, clock=FakeClock())
    deadline = policy.linger_deadline()
    assert policy.linger_left(deadline, pending=99, hurry=False) == 10
    assert policy.linger_left(deadline, pending=100, hurry=False) == 0.0
    assert policy.linger_left(deadline, pending=1, hurry=True) == 0.0


def test_linger_zero_takes_at_once() -> None:
    policy = BatchPolicy(batch_size=100, linger=0, clock=FakeClock())
    assert policy.linger_left(policy.linger_deadline(), pending=1, hurry=False) == 0.0


def test_the_writer_is_woken_at_the_first_send_an_overlap_and_a_full_batch() -> None:
    policy = BatchPolicy(batch_size=50_000, linger=0.005)
    wake = policy.wake_points()
    assert {p for p in range(1, 60_000) if p in wake} == {1, OVERLAP_MIN_PENDING, 50_000}


def test_a_second_batch_needs_a_backlog_and_the_first_one_sent() -> None:
    policy = BatchPolicy(batch_size=50_000, linger=0)
    assert policy.may_take(1, lambda: None)  # nothing in flight: always
    policy.took()
    slot = policy.admit(TOPIC, lambda n: 0)
    assert slot is not None and slot.partition == 0
    assert not policy.may_take(OVERLAP_MIN_PENDING, lambda: TOPIC)  # its data is not sent yet
    assert policy.sent(slot) and not policy.sent(slot)  # news once
    assert not policy.may_take(OVERLAP_MIN_PENDING - 1, lambda: TOPIC)  # too few to overlap
    assert not policy.may_take(OVERLAP_MIN_PENDING, lambda: None)  # the topic is not known
    assert policy.may_take(OVERLAP_MIN_PENDING, lambda: TOPIC)
    small = BatchPolicy(batch_size=10, linger=0)
    small.took()
    small.sent(small.admit(TOPIC, lambda n: 0) or Slot())
    assert small.may_take(10, lambda: TOPIC)  # a full batch of a small batch_size is enough


def test_a_general_batch_waits_to_be_alone_and_then_holds_the_producer() -> None:
    policy = BatchPolicy(batch_size=10, linger=0)
    policy.took()
    lean = policy.admit(TOPIC, lambda n: 1)
    assert lean is not None
    policy.sent(lean)
    policy.took()
    assert policy.admit(None, lambda n: 0) is None  # another batch is in flight
    policy.release(lean)
    general = policy.admit(None, lambda n: 0)
    assert general is not None and general.exclusive
    policy.sent(general)
    assert not policy.may_take(10, lambda: TOPIC)
    policy.took()
    assert policy.admit(TOPIC, lambda n: 0) is None  # not beside the exclusive batch


class Writers(RuleBasedStateMachine):
    """Writers take batches when the policy lets them, admit them (lean or general), send their
    data and finish, in any order; the policy must never let two batches in flight write one
    partition, a general batch share the producer, or its counts drift."""

    def __init__(self) -> None:
        super().__init__()
        self.policy = BatchPolicy(batch_size=OVERLAP_MIN_PENDING, linger=0)
        self.sticky = itertools.count()
        self.taken = 0  # taken, not yet admitted
        self.admitted: list[Slot] = []

    def next_sticky(self, partitions: int) -> int:
        return next(self.sticky) % partitions

    @precondition(lambda self: self.policy.in_flight < MAX_IN_FLIGHT)
    @rule(pending=st.integers(1, 2 * OVERLAP_MIN_PENDING), known=st.booleans())
    def take(self, pending: int, known: bool) -> None:
        if self.policy.may_take(pending, lambda: TOPIC if known else None):
            self.policy.took()
            self.taken += 1

    @precondition(lambda self: self.taken > 0)
    @rule(lean=st.booleans())
    def admit(self, lean: bool) -> None:
        slot = self.policy.admit(TOPIC if lean else None, self.next_sticky)
        if slot is not None:
            self.taken -= 1
            self.admitted.append(slot)

    @precondition(lambda self: bool(self.admitted))
    @rule(index=st.integers(0, MAX_IN_FLIGHT - 1))
    def send(self, index: int) -> None:
        self.policy.sent(self.admitted[index % len(self.admitted)])

    @precondition(lambda self: bool(self.admitted))
    @rule(index=st.integers(0, MAX_IN_FLIGHT - 1))
    def finish(self, index: int) -> None:
        self.policy.release(self.admitted.pop(index % len(self.admitted)))

    @invariant()
    def counts_match_the_batches(self) -> None:
        policy = self.policy
        assert policy.in_flight == self.taken + len(self.admitted) <= MAX_IN_FLIGHT
        unsent = self.taken + sum(1 for s in self.admitted if not s.sent)
        assert policy.unsent == unsent
        busy = {(s.topic_id, s.partition) for s in self.admitted if s.partition is not None}
        assert busy == {(t, p) for t, ps in policy.busy.items() for p in ps}

    @invariant()
    def no_partition_is_written_twice(self) -> None:
        partitions = [s.partition for s in self.admitted if s.partition is not None]
        assert len(partitions) == len(set(partitions))
        assert all(0 <= p < TOPIC.partitions for p in partitions)

    @invariant()
    def a_general_batch_is_alone(self) -> None:
        exclusive = [s for s in self.admitted if s.exclusive]
        assert self.policy.exclusive == bool(exclusive)
        if exclusive:
            assert len(self.admitted) == 1 and self.taken == 0


Writers.TestCase.settings = settings(max_examples=200, stateful_step_count=40, deadline=None)
test_writers = Writers.TestCase
