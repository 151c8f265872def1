import postroom


def test_publish_then_consume(client: postroom.Client) -> None:
    client.create_topic("orders", partitions=2)
    client.publish("orders", {"n": 1}, key="a")
    with client.consumer("g", "orders") as consumer:
        messages = consumer.poll(timeout=1)
    assert [m.json() for m in messages] == [{"n": 1}]
