"""The raw reference of the relay-to-Kafka benchmark as a process of its own, run by its path
(``python .../kafka_raw_process.py ARGS``) so that it imports confluent-kafka and nothing of
postroom: it pays what a user of the raw client pays from a cold start (the interpreter, the
import, the producer, its first metadata) exactly as the relay process pays its own, and the
two are timed alike, from the process's start (``postroom.benchmarks.relay_kafka``).

It sends ``messages`` records as the relay sends them (key ``k{i % keys}``, a value of
``value_size`` bytes, a ``postroom-id`` header, the Java client's murmur2 partition:
librdkafka's ``murmur2_random``), with the Kafka sink's producer settings, waits for every
acknowledgement, then prints one JSON line: the wall-clock times (``time.time()``) of its first
``produce()`` and of its last acknowledgement.

    python kafka_raw_process.py BROKER TOPIC MESSAGES VALUE_SIZE KEYS SETTINGS_JSON
"""

from __future__ import annotations

import json
import sys
import time


def main(argv: list[str]) -> int:
    broker, topic, messages, value_size, keys, settings = argv
    import confluent_kafka

    config = {"bootstrap.servers": broker, "partitioner": "murmur2_random", **json.loads(settings)}
    producer = confluent_kafka.Producer(config)
    value = b"x" * int(value_size)
    count, key_count = int(messages), max(1, int(keys))
    first = time.time()
    for offset in range(count):
        while True:
            try:
                producer.produce(
                    topic,
                    value=value,
                    key=f"k{offset % key_count}".encode(),
                    headers={"postroom-id": f"raw/{offset}"},
                )
                break
            except BufferError:
                producer.poll(0.01)
    left = producer.flush(120)
    done = time.time()
    if left:
        print(f"{left} raw messages not acknowledged", file=sys.stderr)
        return 1
    print(json.dumps({"first_produce": first, "done": done}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
