"""Kafka's default partitioner, in Python and in SQL, against Kafka's published vectors."""

from __future__ import annotations

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import postroom
from postroom.errors import InvalidArgument
from postroom.log.partitioner import murmur2, partition_for_key

# org.apache.kafka.common.utils.UtilsTest.testMurmur2
KAFKA_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]


@pytest.mark.parametrize(("data", "expected"), KAFKA_VECTORS)
def test_murmur2_matches_kafka(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


def test_partition_is_the_positive_hash_modulo_count() -> None:
    # toPositive(-790332482) = 1357151166; 1357151166 % 50 = 16
    assert partition_for_key(b"foobar", 50) == 16
    assert all(0 <= partition_for_key(bytes([i]), 7) < 7 for i in range(256))


def test_sql_murmur2_matches_kafka(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        for data, expected in KAFKA_VECTORS:
            row = conn.execute("SELECT postroom.murmur2(%s)", [data]).fetchone()
            assert row is not None
            assert row[0] == expected, data


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(key=st.binary(max_size=64), partitions=st.integers(min_value=1, max_value=1000))
def test_sql_partitioner_agrees_with_python(dsn: str, key: bytes, partitions: int) -> None:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT postroom.partition_for_key(%s, %s)", [key, partitions]
        ).fetchone()
    assert row is not None
    assert row[0] == partition_for_key(key, partitions)


def test_publish_places_keys_like_kafka(any_client: postroom.Client) -> None:
    any_client.create_topic("keyed", partitions=6)
    keys = [f"customer-{i}" for i in range(50)]
    published = any_client.publish_batch("keyed", [{"value": k, "key": k} for k in keys])
    for key, where in zip(keys, published, strict=True):
        assert where.partition == partition_for_key(key.encode(), 6)
    with psycopg.connect(any_client.conninfo) as conn:
        rows = conn.execute(
            "SELECT partition FROM postroom.publish_batch('keyed', %s::bytea[], %s::bytea[])",
            [[k.encode() for k in keys], [k.encode() for k in keys]],
        ).fetchall()
    assert [r[0] for r in rows] == [p.partition for p in published]


@pytest.mark.parametrize("partitions", [0, -3])
def test_a_partition_count_below_1_is_refused_by_name_in_python_and_sql(
    dsn: str, partitions: int
) -> None:
    with pytest.raises(InvalidArgument, match=f"invalid partition count {partitions}"):
        partition_for_key(b"k", partitions)
    with (
        psycopg.connect(dsn) as conn,
        pytest.raises(psycopg.errors.InvalidParameterValue) as raised,
    ):
        conn.execute("SELECT postroom.partition_for_key('k', %s)", [partitions])
    assert f"invalid partition count {partitions}" in str(raised.value)
