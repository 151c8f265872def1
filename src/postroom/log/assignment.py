"""Partition assignment for consumer groups: plain functions, no I/O.

A rebalance (``membership_async``) reads the live members, the partitions of the topics they
subscribe to and who holds each partition now, calls :func:`assign`, and writes the result as
each partition's *target* member. The current holder hands a partition to its target only once
its in-flight batch is committed or abandoned (cooperative hand-over), so the result says where
partitions should go, never that they are already there.

The properties (tests/log/test_assignment.py checks them with hypothesis):

* every partition of a topic goes to exactly one live member subscribed to that topic;
* balanced per topic: each subscriber gets ``floor`` or ``ceil`` of partitions / subscribers;
* sticky: a live member keeps as many of the partitions it holds as its share allows, so a join
  or a leave moves as few partitions as possible; a balanced assignment is returned unchanged.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import TypeVar

P = TypeVar("P", bound=Hashable)


def assign_topic(
    partitions: Sequence[P],
    members: Iterable[str],
    current: Mapping[P, str | None],
) -> dict[P, str]:
    """Spread one topic's ``partitions`` over ``members`` (sticky, balanced).

    ``current`` maps a partition to the member holding it now (or None); holders that are not
    in ``members`` (gone, expired) count as none. Returns every partition's new member; empty
    when there are no members.
    """
    live = sorted(set(members))
    if not live:
        return {}
    base, extra = divmod(len(partitions), len(live))
    held: dict[str, list[P]] = {m: [] for m in live}
    for p in partitions:
        owner = current.get(p)
        if owner in held:
            held[owner].append(p)
    # The members holding the most get the ``extra`` ceil shares: fewer partitions move.
    by_holding = sorted(live, key=lambda m: (-len(held[m]), m))
    quota = {m: base + (1 if i < extra else 0) for i, m in enumerate(by_holding)}
    result: dict[P, str] = {}
    for m in live:
        for p in held[m][: quota[m]]:
            result[p] = m
    free = [p for p in partitions if p not in result]
    hungry = [m for m in by_holding for _ in range(quota[m] - len(held[m][: quota[m]]))]
    for p, m in zip(free, hungry, strict=True):
        result[p] = m
    return result


def assign(
    partitions: Mapping[int, int],
    subscriptions: Mapping[str, Iterable[int]],
    current: Mapping[tuple[int, int], str | None],
) -> dict[tuple[int, int], str]:
    """The target member of every ``(topic_id, partition)`` of the subscribed topics.

    ``partitions`` maps a topic id to its partition count; ``subscriptions`` maps each live
    member to the topic ids it reads; ``current`` maps ``(topic_id, partition)`` to its holder.
    Topics are balanced one by one among their own subscribers; partitions of topics nobody
    subscribes to are left out.
    """
    result: dict[tuple[int, int], str] = {}
    for topic_id, count in sorted(partitions.items()):
        readers = [m for m, topics in subscriptions.items() if topic_id in set(topics)]
        keys = [(topic_id, p) for p in range(count)]
        result.update(assign_topic(keys, readers, current))
    return result


def moved(before: Mapping[P, str | None], after: Mapping[P, str]) -> set[P]:
    """Partitions whose member changed from one live holder to another (new ones excluded)."""
    return {p for p, m in after.items() if before.get(p) is not None and before[p] != m}
