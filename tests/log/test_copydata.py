"""The write path's binary COPY stream is byte for byte what psycopg's row writer makes."""

from __future__ import annotations

import struct
from typing import Any

import psycopg
from psycopg import adapters
from psycopg._copy_base import BinaryFormatter
from psycopg.adapt import Transformer
from psycopg.pq import Format

from postroom.log.copydata import copy_data, copy_values
from postroom.log.records import Record


def _psycopg_stream(rows: list[tuple[Any, ...]]) -> bytes:
    formatter = BinaryFormatter(Transformer())
    formatter.transformer.set_dumper_types(
        [adapters.types[n].oid for n in ("int4", "int4", "int8", "bytea", "bytea")],
        Format.BINARY,
    )
    out = b"".join(bytes(formatter.write_row(row)) for row in rows)
    return out + bytes(formatter.end())


def test_values_and_keys_encode_as_psycopg_does() -> None:
    values = [b"", b"a", b"x" * 300, bytes(range(256))]
    expected = _psycopg_stream([(7, 2, 40 + i, None, v) for i, v in enumerate(values)])
    # The psycopg rows have 5 fields, the COPY stream 6 (headers): compare without them.
    assert _strip_headers(copy_values(7, 2, 40, values)) == expected
    records = [Record("t", v) for v in values]
    assert bytes(copy_data([(7, 2, 40, records)])) == copy_values(7, 2, 40, values)
    keyed = [Record("t", b"v", key=b"k%d" % i) for i in range(3)]
    assert _strip_headers(bytes(copy_data([(1, 0, 0, keyed)]))) == _psycopg_stream(
        [(1, 0, i, b"k%d" % i, b"v") for i in range(3)]
    )


def _strip_headers(stream: bytes) -> bytes:
    """The stream with every row's field count 6 -> 5 and its trailing NULL headers removed."""
    out = bytearray(stream[:19])
    pos = 19
    while True:
        (fields,) = struct.unpack_from(">h", stream, pos)
        if fields == -1:
            return bytes(out + stream[pos:])
        pos += 2
        out += struct.pack(">h", fields - 1)
        for index in range(fields):
            (length,) = struct.unpack_from(">i", stream, pos)
            end = pos + 4 + max(length, 0)
            if index < fields - 1:
                out += stream[pos:end]
            else:
                assert length == -1  # no headers
            pos = end


def test_headers_are_jsonb_version_1(dsn: str) -> None:
    record = Record("t", b"v", headers={"a": "b", "c": {"b64": "AA=="}})
    stream = bytes(copy_data([(1, 0, 0, [record])]))
    with psycopg.connect(dsn) as conn:
        conn.execute("CREATE TEMP TABLE m (t int, p int, o bigint, k bytea, v bytea, h jsonb)")
        with conn.cursor().copy("COPY m FROM STDIN (FORMAT BINARY)") as copy:
            copy.write(stream)
        assert conn.execute("SELECT t, p, o, k, v, h FROM m").fetchall() == [
            (1, 0, 0, None, b"v", {"a": "b", "c": {"b64": "AA=="}})
        ]
