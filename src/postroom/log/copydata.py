"""The binary COPY stream of the write path, built directly: sans-IO, tested without a database.

``copy_messages`` takes rows (topic_id int4, partition int4, offset int8, key bytea, value
bytea, headers jsonb) in PostgreSQL's binary COPY format. psycopg's ``write_row`` builds a
tuple and runs a dumper per field of every row (about 1 us a row, a fifth of a producer's
client CPU per message); here each row is one pre-packed header of its (topic, partition),
one ``struct`` call for the offset and the lengths, and the value bytes. The database checks
what it always checked (the CHECKs, the reserved-offsets trigger): this changes the encoding,
not what is accepted.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Sequence

from .records import Record

SIGNATURE = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)  # flags 0, no extension
TRAILER = struct.pack(">h", -1)
NULL = struct.pack(">i", -1)
_ROW_HEAD = struct.Struct(">hiiii")  # 6 fields; int4 topic_id; int4 partition (lengths first)
_OFFSET = struct.Struct(">iq")  # int8 offset
_OFFSET_NO_KEY_VALUE_LEN = struct.Struct(">iqii")  # offset, NULL key, value length
_LENGTH = struct.Struct(">i")
_JSONB_VERSION = b"\x01"


def row_head(topic_id: int, partition: int) -> bytes:
    """The bytes every row of one (topic, partition) starts with."""
    return _ROW_HEAD.pack(6, 4, topic_id, 4, partition)


def encode_rows(out: bytearray, head: bytes, first_offset: int, records: Iterable[Record]) -> None:
    """Append the rows of ``records`` at consecutive offsets from ``first_offset`` to ``out``."""
    pack_plain = _OFFSET_NO_KEY_VALUE_LEN.pack
    for offset, record in enumerate(records, first_offset):
        value = record.value
        if record.key is None and record.headers is None:  # the common case: one struct call
            out += head
            out += pack_plain(8, offset, -1, len(value))
            out += value
            out += NULL
        else:
            out += head
            out += _OFFSET.pack(8, offset)
            key = record.key
            if key is None:
                out += NULL
            else:
                out += _LENGTH.pack(len(key))
                out += key
            out += _LENGTH.pack(len(value))
            out += value
            headers = record.headers
            if headers is None:
                out += NULL
            else:
                data = json.dumps(headers, separators=(",", ":")).encode("utf-8")
                out += _LENGTH.pack(len(data) + 1)
                out += _JSONB_VERSION
                out += data


def copy_values(topic_id: int, partition: int, first_offset: int, values: Sequence[bytes]) -> bytes:
    """The binary COPY stream of unkeyed, headerless ``values`` at consecutive offsets of one
    partition: the producer's and ``publish_batch``'s common case, at about 0.2 us a row."""
    head = row_head(topic_id, partition)
    pack = _OFFSET_NO_KEY_VALUE_LEN.pack
    parts = [SIGNATURE]
    append = parts.append
    for offset, value in enumerate(values, first_offset):
        append(head)
        append(pack(8, offset, -1, len(value)))
        append(value)
        append(NULL)
    append(TRAILER)
    return b"".join(parts)


def copy_data(groups: Sequence[tuple[int, int, int, Iterable[Record]]]) -> bytearray:
    """The whole binary COPY stream (signature, rows, trailer) of ``groups``: each a topic id,
    a partition, the first offset reserved there and its records in order."""
    out = bytearray(SIGNATURE)
    for topic_id, partition, first, records in groups:
        encode_rows(out, row_head(topic_id, partition), first, records)
    out += TRAILER
    return out
