"""``kafka://`` URLs to librdkafka settings (sans-IO).

    kafka://host:9092[,host2:9092...][?librdkafka.property=value&...]
    kafka://user:secret@host:9093?security.protocol=SASL_SSL&sasl.mechanism=SCRAM-SHA-512

The query string carries any librdkafka property (TLS: ``security.protocol=SSL``,
``ssl.ca.location=...``; SASL: ``sasl.mechanism``, ``sasl.username``, ``sasl.password``);
a user and password in the URL become ``sasl.username``/``sasl.password``. ``timeout`` (seconds,
default 10) bounds each admin or metadata call. The description shown in errors names the
brokers only, never the password.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from ...errors import InvalidArgument

_PROPERTY = re.compile(r"[a-z][a-z0-9_.]*")
LIBRDKAFKA_LOG = logging.getLogger("postroom.kafka.librdkafka")
"""Where librdkafka's own log lines go (every client's ``logger``): served by the client's
``poll``/``consume``/``flush`` into Python logging, instead of printed to stderr by librdkafka's
threads (a broker that cannot be reached printed raw ``%3|...|FAIL|`` lines around postroom's
one clear error)."""

_BROKER = re.compile(r"[A-Za-z0-9_.\-]+:[0-9]{1,5}|\[[0-9A-Fa-f:.]+\]:[0-9]{1,5}")
# Set by postroom for what it guarantees; a URL may not override them.
RESERVED = frozenset(
    {
        "partitioner",
        "enable.auto.commit",
        "enable.auto.offset.store",
        "group.id",
        "group.instance.id",
        "on_delivery",
    }
)
DEFAULT_TIMEOUT = 10.0


@dataclass(frozen=True)
class KafkaSettings:
    """What a ``kafka://`` URL says: the librdkafka base ``config`` and the call ``timeout``;
    and the client's ``pause_gc`` (``connect(pause_gc=...)``: the garbage collector off while
    a poll builds its messages, as on PostgreSQL)."""

    brokers: str
    config: dict[str, Any] = field(default_factory=dict)
    timeout: float = DEFAULT_TIMEOUT
    pause_gc: bool = True

    @property
    def description(self) -> str:
        return f"kafka at {self.brokers}"

    def client_config(self) -> dict[str, Any]:
        """The base config of a librdkafka client: the URL's, and postroom's log routing."""
        return {**self.config, "logger": LIBRDKAFKA_LOG}


def is_kafka_url(url: object) -> bool:
    return isinstance(url, str) and url.split("://", 1)[0].lower() == "kafka"


def parse_kafka_url(url: str) -> KafkaSettings:
    """The settings of ``url``; :class:`InvalidArgument` naming what is wrong (without the
    password)."""
    if not is_kafka_url(url):
        raise InvalidArgument("not a kafka:// URL: use kafka://host:port[,host:port...]")
    parts = urlsplit(url)
    netloc = parts.netloc
    user = password = None
    if "@" in netloc:
        credentials, netloc = netloc.rsplit("@", 1)
        user, _, password = credentials.partition(":")
    brokers = [b for b in netloc.split(",") if b]
    if not brokers or not all(_BROKER.fullmatch(b) for b in brokers):
        raise InvalidArgument(
            f"invalid kafka brokers {netloc!r}: use kafka://host:port[,host:port...]"
        )
    config: dict[str, Any] = {"bootstrap.servers": ",".join(brokers)}
    if user:
        config["sasl.username"] = unquote(user)
        config["sasl.password"] = unquote(password or "")
    timeout = DEFAULT_TIMEOUT
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name == "timeout":
            try:
                timeout = float(value)
            except ValueError:
                timeout = -1.0
            if not 0.1 <= timeout <= 3600:
                raise InvalidArgument(
                    f"invalid kafka URL option timeout={value!r}: seconds from 0.1 to 3600"
                )
            continue
        if not _PROPERTY.fullmatch(name):
            raise InvalidArgument(
                f"invalid kafka URL option {name!r}: pass librdkafka properties "
                "(lower case, dotted: security.protocol=SSL) or timeout"
            )
        if name in RESERVED:
            raise InvalidArgument(
                f"kafka URL option {name!r} is set by postroom and cannot be changed: "
                f"it keeps {sorted(RESERVED)} to give the log's guarantees"
            )
        config[name] = value
    return KafkaSettings(",".join(brokers), config, timeout)
