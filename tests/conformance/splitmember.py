"""One member of a consumer group in a process of its own, for the conformance test of a group
of processes splitting partitions (test_group_processes.py).

    python -m tests.conformance.splitmember URL TOPIC GROUP sync|async

It polls and commits until its stdin says ``stop`` (or closes), then closes its consumer. It
says what happens on stdout, one JSON object a line, so the test waits on those lines, never
on sleeps: ``{"held": [partition, ...]}`` each time its assignment changes, ``{"got":
[[partition, value], ...]}`` after each batch it has committed, ``{"closed": true}`` at the end.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from typing import Any

import postroom

from .conftest import KAFKA_CONSUMER


def say(**line: Any) -> None:
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


def watch_stdin() -> threading.Event:
    stop = threading.Event()

    def read() -> None:
        for line in sys.stdin:
            if line.strip() == "stop":
                break
        stop.set()

    threading.Thread(target=read, daemon=True).start()
    return stop


def got(batch: list[postroom.Message]) -> list[list[Any]]:
    return [[m.partition, m.text()] for m in batch]


def run_sync(url: str, topic: str, group: str, stop: threading.Event) -> None:
    held: set[postroom.TopicPartition] | None = None
    with postroom.connect(url) as client, client.consumer(group, topic, **KAFKA_CONSUMER) as c:
        while not stop.is_set():
            batch = c.poll(timeout=0.2)
            if batch:
                c.commit()
                say(got=got(batch))
            now = c.assignment()
            if now != held:
                held = now
                say(held=sorted(tp.partition for tp in now))


async def run_async(url: str, topic: str, group: str, stop: threading.Event) -> None:
    held: set[postroom.TopicPartition] | None = None
    async with await postroom.connect_async(url) as client:
        async with client.consumer(group, topic, **KAFKA_CONSUMER) as c:
            while not stop.is_set():
                batch = await c.poll(timeout=0.2)
                if batch:
                    await c.commit()
                    say(got=got(batch))
                now = await c.assignment()
                if now != held:
                    held = now
                    say(held=sorted(tp.partition for tp in now))


def main(argv: list[str]) -> int:
    url, topic, group, flavour = argv
    stop = watch_stdin()
    if flavour == "async":
        asyncio.run(run_async(url, topic, group, stop))
    else:
        run_sync(url, topic, group, stop)
    say(closed=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
