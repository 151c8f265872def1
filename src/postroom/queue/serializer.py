"""How job arguments and results become JSON, and back: sans-IO.

The default encoding is plain JSON plus four tagged types, so they round-trip exactly:

    datetime  {"$datetime": "2026-01-31T12:00:00+00:00"}   (ISO 8601; naive stays naive)
    date      {"$date": "2026-01-31"}
    UUID      {"$uuid": "5f0c...-..."}
    Decimal   {"$decimal": "10.50"}

A one-key object whose key is one of these tags is decoded back into the type; any other object
is left alone. Pass ``serializer=`` to the client for other types (pydantic models, dataclasses):
a subclass of :class:`Serializer` that overrides ``default`` (to encode) and ``decode_tagged``.
"""

from __future__ import annotations

import json
import json.encoder
import json.scanner
from collections.abc import Callable
from datetime import date, datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

from ..errors import InvalidType

_TAGS = ("$datetime", "$date", "$uuid", "$decimal")


class Serializer:
    """JSON with datetime, date, UUID and Decimal; subclass and override ``default`` and
    ``decode_tagged`` for more types.

        class PydanticSerializer(postroom.Serializer):
            def default(self, value):
                if isinstance(value, Order):
                    return {"$order": value.model_dump(mode="json")}
                return super().default(value)

            def decode_tagged(self, tag, payload):
                if tag == "$order":
                    return Order.model_validate(payload)
                return super().decode_tagged(tag, payload)

        client = postroom.connect(serializer=PydanticSerializer())
    """

    tags: tuple[str, ...] = _TAGS
    """The one-key object keys this serializer decodes; extend it in a subclass."""

    def __init__(self) -> None:
        self._encode: Callable[[Any], str] = _compact_encoder(self.default)
        self._needles_of: tuple[str, ...] | None = None
        self._needles: tuple[str, ...] | None = None

    def default(self, value: Any) -> Any:
        """A JSON-encodable stand-in for ``value``, or raise ``TypeError``."""
        if isinstance(value, datetime):
            return {"$datetime": value.isoformat()}
        if isinstance(value, date):
            return {"$date": value.isoformat()}
        if isinstance(value, UUID):
            return {"$uuid": str(value)}
        if isinstance(value, Decimal):
            if not value.is_finite():
                raise ValueError(f"Decimal {value} is not finite")
            return {"$decimal": str(value)}
        raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")

    def decode_tagged(self, tag: str, payload: Any) -> Any:
        """The value a tagged one-key object ``{tag: payload}`` stands for."""
        if tag == "$datetime":
            return datetime.fromisoformat(payload)
        if tag == "$date":
            return date.fromisoformat(payload)
        if tag == "$uuid":
            return UUID(payload)
        return Decimal(payload)

    def dumps(self, value: Any) -> str:
        """``value`` as JSON text; raises ``TypeError``/``ValueError`` if it cannot be."""
        return self._encode(value)

    def loads(self, text: str) -> Any:
        """``decode`` of the JSON ``text`` (as PostgreSQL writes jsonb). The walk that looks for
        tagged objects is skipped when none of ``tags`` occurs in the text as a JSON string:
        most job arguments have none, and the walk costs more than the parsing."""
        try:
            value, end = _scan_once(text, 0)
        except StopIteration:  # not JSON at all: json.loads raises the JSONDecodeError
            value, end = json.loads(text), len(text)
        if end != len(text):  # something after the value (jsonb writes nothing there)
            value = json.loads(text)
        if type(self).decode is not Serializer.decode:
            return self.decode(value)  # a subclass decodes its own way
        if self._needles_of is not self.tags:  # first call, or tags changed on the instance
            self._needles = _needles(self.tags)
            self._needles_of = self.tags
        needles = self._needles
        if needles is None:
            return self.decode(value)
        for needle in needles:
            if needle in text:
                return self.decode(value)
        return value

    def decode(self, value: Any) -> Any:
        """Decoded JSON (dicts, lists, scalars) with tagged objects turned back into values."""
        if isinstance(value, dict):
            if len(value) == 1:
                ((tag, payload),) = value.items()
                if tag in self.tags:
                    return self.decode_tagged(tag, payload)
            return {k: self.decode(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.decode(v) for v in value]
        return value


# The C scanner json.loads ends in, without its two Python layers (a third of the time of
# loading a small job's arguments). typeshed types its argument as a scanner: it is a decoder.
_DECODER = json.JSONDecoder()
_scan_once: Callable[[str, int], tuple[Any, int]] = json.scanner.make_scanner(_DECODER)  # type: ignore[arg-type]


def _needles(tags: tuple[str, ...]) -> tuple[str, ...] | None:
    """Each tag as a JSON string, as it appears in jsonb's text; None when one has a character
    that JSON writers escape differently (then ``loads`` always walks)."""
    if not all(t.isprintable() and '"' not in t and "\\" not in t for t in tags):
        return None
    return tuple(f'"{t}"' for t in tags)


def _compact_encoder(default: Callable[[Any], Any]) -> Callable[[Any], str]:
    """Compact JSON (ASCII, no NaN) with ``default`` for other types: what
    ``json.JSONEncoder(separators=(",", ":"), allow_nan=False, default=default).encode``
    writes, through the C encoder made once, not once per call (a third of the cost of
    encoding a small job's arguments). Without the circular-reference check, which needs
    state per call: a cycle ends as RecursionError, raised here as ValueError."""
    # Not in typeshed: the C encoder JSONEncoder.iterencode uses (None without the accelerator).
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # no C accelerator (not CPython)
        return json.JSONEncoder(separators=(",", ":"), allow_nan=False, default=default).encode
    chunks = make(
        None, default, json.encoder.encode_basestring_ascii, None, ":", ",", False, False, False
    )

    def encode(value: Any) -> str:
        try:
            return "".join(chunks(value, 0))
        except RecursionError:
            raise ValueError("circular reference, or nesting too deep") from None

    return encode


DEFAULT_SERIALIZER = Serializer()


def check_serializer(serializer: object) -> Serializer:
    if serializer is None:
        return DEFAULT_SERIALIZER
    if not isinstance(serializer, Serializer):
        raise InvalidType(f"invalid serializer {serializer!r}: pass a postroom.Serializer")
    return serializer
