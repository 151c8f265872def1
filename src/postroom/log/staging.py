"""The columns ``stage_messages`` takes, from records placed on their partitions (sans-IO; the
I/O is in staged_async.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from psycopg.types.json import Jsonb

from .records import Record


def record_columns(
    records: list[Record], groups: Mapping[tuple[int, int], Sequence[int]]
) -> tuple[list[int], list[int], list[bytes | None] | None, list[Jsonb | None] | None]:
    """The topic ids, partitions, keys and headers of ``records`` (``groups``: the indexes of
    the records of each (topic id, partition)) as ``stage`` takes them; keys and headers are
    None when no record has any."""
    count = len(records)
    if len(groups) == 1:
        ((topic_id, partition),) = groups
        topic_ids, partitions = [topic_id] * count, [partition] * count
    else:
        topic_ids, partitions = [0] * count, [0] * count
        for (topic_id, partition), indexes in groups.items():
            for index in indexes:
                topic_ids[index] = topic_id
                partitions[index] = partition
    keys = [r.key for r in records] if any(r.key is not None for r in records) else None
    headers = (
        [None if r.headers is None else Jsonb(r.headers) for r in records]
        if any(r.headers is not None for r in records)
        else None
    )
    return topic_ids, partitions, keys, headers
