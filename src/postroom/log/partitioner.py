"""Kafka's default partitioner, so keys land on the same partitions after a move to Kafka.

Sans-IO: unit-tested against Kafka's published murmur2 vectors without a database; the SQL
function ``{schema}.partition_for_key`` implements the same arithmetic.
"""

from __future__ import annotations

from ..errors import InvalidArgument

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2``: the signed 32-bit hash of ``data``."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    end = length - length % 4
    for i in range(0, end, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = length - end
    if tail == 3:
        h ^= data[end + 2] << 16
    if tail >= 2:
        h ^= data[end + 1] << 8
    if tail >= 1:
        h ^= data[end]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner picks: ``(murmur2(key) & 0x7fffffff) % n``;
    :class:`InvalidArgument` for a partition count below 1 (a topic has at least one)."""
    if type(partitions) is not int or partitions < 1:
        raise InvalidArgument(
            f"invalid partition count {partitions!r}: a topic has at least 1 partition"
        )
    return (murmur2(key) & 0x7FFFFFFF) % partitions
