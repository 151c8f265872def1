"""Encoding and checks of records: sans-IO."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from postroom.errors import InvalidName, InvalidType, MessageTooLarge
from postroom.log import records
from postroom.log.records import Message, decode_headers, encode_headers, encode_value


def test_values_bytes_text_and_json() -> None:
    assert encode_value(b"\x00raw") == b"\x00raw"
    assert encode_value("héllo") == "héllo".encode()
    assert encode_value({"a": [1, 2]}) == b'{"a":[1,2]}'
    assert encode_value(None) == b"null"


def test_headers_round_trip_keeps_str_and_bytes_apart() -> None:
    headers: dict[str, str | bytes] = {"trace": "abc", "blob": b"\x00\xff"}
    encoded = encode_headers(headers)
    assert encoded == {"trace": "abc", "blob": {"b64": "AP8="}}
    assert decode_headers(encoded) == headers


def test_message_helpers() -> None:
    message = Message("t", 1, 7, None, b'{"x": 1}', {}, datetime.now(UTC))
    assert message.json() == {"x": 1}
    assert message.text() == '{"x": 1}'
    assert message.id == "t/1/7"


@pytest.mark.parametrize("name", ["", "-x", "a b", "a" * 201, "x;DROP TABLE t", "ü"])
def test_bad_names(name: str) -> None:
    with pytest.raises(InvalidName, match="invalid topic name"):
        records.check_name("topic", name)


def test_value_limits() -> None:
    with pytest.raises(InvalidType, match="cannot encode value of type object"):
        encode_value(object())  # type: ignore[arg-type]
    with pytest.raises(InvalidType, match="JSON-serializable"):
        encode_value(float("nan"))
    with pytest.raises(MessageTooLarge, match="limit is 1048576"):
        encode_value(b"x" * (records.MAX_VALUE_BYTES + 1))


def test_build_message_makes_an_ordinary_frozen_message() -> None:
    import dataclasses

    from postroom.log.records import build_message

    stamp = datetime.now(UTC)
    built = build_message("t", 1, 7, b"k", b'{"x": 1}', {"h": "v"}, stamp)
    expected = Message("t", 1, 7, b"k", b'{"x": 1}', {"h": "v"}, stamp)
    assert type(built) is Message
    assert built == expected
    assert repr(built) == repr(expected)
    assert dataclasses.asdict(built) == dataclasses.asdict(expected)
    assert built.json() == {"x": 1}
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.offset = 8  # type: ignore[misc]


def test_gc_paused_restores_the_collector_state_even_on_error() -> None:
    import gc

    from postroom.log.reading import gc_paused

    assert gc.isenabled()
    with pytest.raises(ZeroDivisionError), gc_paused():
        assert not gc.isenabled()
        1 / 0  # noqa: B018
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the caller's choice stands
    finally:
        gc.enable()


def test_overlapping_gc_pauses_resume_the_collector_once_the_last_ends() -> None:
    import gc
    import threading

    from postroom.log.reading import gc_paused

    entered, release = threading.Event(), threading.Event()

    def other() -> None:
        with gc_paused():
            entered.set()
            release.wait(10)

    with gc_paused():
        thread = threading.Thread(target=other)
        thread.start()
        assert entered.wait(10)
    assert not gc.isenabled()  # the other pause still runs
    release.set()
    thread.join(10)
    assert gc.isenabled()
