"""Payload and key bytes as Debezium's outbox event router and its converters give them
(sans-IO, unit-tested without a database; the jsonb rendering is checked against PostgreSQL).

Debezium reads the outbox row's ``payload`` column; for a ``jsonb`` column, PostgreSQL hands it
the document as ``jsonb`` renders it as text (``jsonb_out``): keys sorted by length, then
bytewise, the last of duplicate keys kept, ``", "`` and ``": "`` between items, numbers as
``numeric`` prints them, non-ASCII characters as they are. What reaches Kafka depends on the
converters (docs/outbox.md, "Debezium compatibility"):

- ``"jsonb"``: that text (``value.converter=StringConverter``);
- ``"jsonb-string"``: that text as a JSON string (``JsonConverter``, ``schemas.enable=false``):
  the document double-encoded, Jackson's escaping;
- ``"compact"``: the document re-serialized compactly by Jackson after
  ``table.expand.json.payload=true`` (``JsonConverter``, ``schemas.enable=false``): jsonb's key
  order, no spaces, decimals as Java doubles, null members and empty arrays left out (Debezium
  infers no schema for them).
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any, Literal

from ..errors import InvalidArgument

PayloadFormat = Literal["as-written", "jsonb", "jsonb-string", "compact"]
PAYLOAD_FORMATS: tuple[PayloadFormat, ...] = ("as-written", "jsonb", "jsonb-string", "compact")
KeyFormat = Literal["string", "json"]
KEY_FORMATS: tuple[KeyFormat, ...] = ("string", "json")

_PG_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r"}
_PG_ESCAPES["\t"] = "\\t"


class _Number(str):
    """A JSON number's text, kept as written (Python floats would round it)."""


def _parse(value: bytes) -> Any:
    """The JSON document in ``value``, numbers as :class:`_Number`; raises ValueError."""

    def constant(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    return json.loads(
        value.decode("utf-8"),
        parse_int=_Number,
        parse_float=_Number,
        parse_constant=constant,
    )


def _jsonb_key(name: str) -> tuple[int, bytes]:
    encoded = name.encode("utf-8")
    return len(encoded), encoded


def _pg_string(text: str) -> str:
    out = []
    for char in text:
        escaped = _PG_ESCAPES.get(char)
        if escaped is not None:
            out.append(escaped)
        elif char < " ":
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def _pg_number(text: str) -> str:
    """``numeric_out`` of the number ``text``: plain notation, the scale written."""
    number = Decimal(text)
    exponent = number.as_tuple().exponent
    assert isinstance(exponent, int)  # finite: JSON has no NaN or Infinity
    scale = max(0, -exponent)
    if number.is_zero():
        return "0" if scale == 0 else "0." + "0" * scale
    return f"{number:.{scale}f}"


def _jsonb(node: Any) -> str:
    if isinstance(node, _Number):
        return _pg_number(node)
    if isinstance(node, str):
        return _pg_string(node)
    if node is True:
        return "true"
    if node is False:
        return "false"
    if node is None:
        return "null"
    if isinstance(node, list):
        return "[" + ", ".join(_jsonb(item) for item in node) + "]"
    members = sorted(node.items(), key=lambda item: _jsonb_key(item[0]))
    return "{" + ", ".join(f"{_pg_string(k)}: {_jsonb(v)}" for k, v in members) + "}"


def jsonb_text(value: bytes) -> str | None:
    """``value`` (JSON) as PostgreSQL renders it once stored in a ``jsonb`` column; None when
    ``value`` is not JSON (no jsonb column could hold it)."""
    try:
        return _jsonb(_parse(value))
    except (ValueError, UnicodeError):
        return None


def java_string(text: str) -> str:
    """``text`` as a JSON string, escaped as Jackson (Kafka's JsonConverter) writes it: the
    short escapes, ``\\u00XX`` in upper case for other control characters, the rest as is."""
    out = []
    for char in text:
        escaped = _PG_ESCAPES.get(char)
        if escaped is not None:
            out.append(escaped)
        elif char < " ":
            out.append(f"\\u{ord(char):04X}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def java_double(text: str) -> str:
    """The number ``text`` as Java's ``Double.toString`` prints it (JDK 19+: the shortest
    digits that read back): ``120.0``, ``39.98``, ``1.0E7``, ``1.0E-4``."""
    number = float(text)
    if number == 0:
        return "-0.0" if str(number).startswith("-") else "0.0"
    sign = "-" if number < 0 else ""
    shortest = Decimal(repr(abs(number)))  # Python's repr: the shortest digits too
    if 1e-3 <= abs(number) < 1e7:
        plain = f"{shortest:f}"
        return sign + (plain if "." in plain else plain + ".0")
    exponent = shortest.adjusted()
    body = f"{shortest.scaleb(-exponent).normalize():f}"
    return f"{sign}{body if '.' in body else body + '.0'}E{exponent}"


def _expanded(node: Any) -> str | None:
    """Jackson's compact JSON of the Struct Debezium builds from ``node`` (None: no field)."""
    if isinstance(node, _Number):
        # Jackson reads the jsonb text, where numeric_out wrote the number: a fraction part
        # makes it a double, else an integer.
        text = _pg_number(node)
        return java_double(text) if "." in text else text
    if isinstance(node, str):
        return java_string(node)
    if node is True:
        return "true"
    if node is False:
        return "false"
    if node is None:
        return None  # no schema for a null member: the field is left out
    if isinstance(node, list):
        if not node:
            return None  # no schema for an empty array
        return "[" + ",".join(_expanded(item) or "null" for item in node) + "]"
    members = sorted(node.items(), key=lambda item: _jsonb_key(item[0]))
    parts = []
    for key, member in members:
        rendered = _expanded(member)
        if rendered is not None:
            parts.append(f"{java_string(key)}:{rendered}")
    return "{" + ",".join(parts) + "}"


def render_payload(value: bytes, form: PayloadFormat) -> bytes:
    """``value`` in payload format ``form``; a value that is not JSON goes as written (no
    jsonb column could hold it, so there is no Debezium rendering to equal)."""
    if form == "as-written":
        return value
    try:
        document = _parse(value)
    except (ValueError, UnicodeError):
        return value
    if form == "compact":
        if not isinstance(document, dict | list):
            return value  # Debezium expands objects and arrays only
        return (_expanded(document) or "null").encode("utf-8")
    text = _jsonb(document)
    return (java_string(text) if form == "jsonb-string" else text).encode("utf-8")


def render_key(key: str, form: KeyFormat) -> bytes:
    """The key bytes of a string key under Debezium's key converter ``form``: ``string``
    (StringConverter) is the text; ``json`` (JsonConverter, ``schemas.enable=false``) is it
    as a JSON string."""
    return (key if form == "string" else java_string(key)).encode("utf-8")


def is_empty_payload(value: bytes) -> bool:
    """What Debezium's ``route.tombstone.on.empty.payload`` calls empty: nothing, or only
    whitespace."""
    return not value.strip()


def check_format(name: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise InvalidArgument(f"invalid {name} {value!r}: use one of {', '.join(allowed)}")
