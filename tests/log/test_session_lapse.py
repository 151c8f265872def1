"""A member whose session ran out (a pause past the session timeout) delivers nothing until its
lease list is current again: found by the history checker (issue 18, docs/guarantees.md), seed
82030739's run: a member resumed after SIGSTOP delivered 20 messages of a partition that the
other member had taken over and committed past (``duplicate-delivery``), from its stale
position, because the first heartbeat after the pause counted as renewing the session before
its lease list was read again."""

from __future__ import annotations

import threading

import postroom
from tests.log.test_member_fencing import (
    BOTH,
    SESSION,
    drain,
    freeze,
    membership_of,
    publish,
    resume,
    session_over,
)
from tests.signals import wait_for


def test_a_member_resumed_past_its_session_delivers_nothing_of_its_old_leases(
    client: postroom.Client, dsn: str
) -> None:
    client.create_topic("t", partitions=2)
    paused = client.consumer("g", "t", session_timeout=SESSION)
    assert paused.assignment() == BOTH
    publish(client, 0, 4)
    drain(paused, 4)
    paused.commit()
    membership = membership_of(paused)
    freeze(membership)  # SIGSTOP, as far as its heartbeat goes
    wait_for(lambda: session_over(dsn, paused.member_id), timeout=15, what="the session to end")
    other = client.consumer("g", "t", session_timeout=SESSION)
    wait_for(lambda: other.assignment() == BOTH, timeout=15, what="the take-over")
    publish(client, 4, 6)
    drain(other, 6)
    other.commit()  # the new owner handled and committed what ``paused`` would read next

    # The first heartbeat after the pause gets through; its lease list has not come yet.
    listing, release = threading.Event(), threading.Event()
    acquire = membership._acquire

    def slow_acquire() -> None:
        listing.set()
        release.wait(10)
        acquire()

    membership._acquire = slow_acquire  # type: ignore[method-assign]
    resume(membership)
    try:
        assert listing.wait(10), "no heartbeat after the resume"
        stale = paused.poll(timeout=0.3)
        assert stale == [], [m.id for m in stale]  # partitions ``other`` holds, from old places
    finally:
        release.set()
    wait_for(lambda: len(paused.assignment()) == 1, timeout=15, what="the member to rejoin")
    paused.close()
    other.close()
