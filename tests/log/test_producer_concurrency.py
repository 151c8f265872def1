"""The batching producer under many sender threads: every send lands once, in send order."""

from __future__ import annotations

import threading
from collections import defaultdict
from concurrent.futures import Future

import postroom


def test_many_threads_small_batches_then_close(any_client: postroom.Client) -> None:
    any_client.create_topic("busy", partitions=3)
    futures: dict[str, list[Future[postroom.Published]]] = defaultdict(list)
    producer = any_client.producer(linger_ms=0, batch_size=7)

    def send(key: str) -> None:
        for n in range(300):
            futures[key].append(producer.send("busy", f"{key}:{n}", key=key))

    threads = [threading.Thread(target=send, args=(f"k{i}",)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    producer.close()  # flushes: every future is resolved after this

    placed = {key: [f.result(timeout=0) for f in fs] for key, fs in futures.items()}
    by_partition: dict[int, list[int]] = defaultdict(list)
    for results in placed.values():
        offsets = [r.offset for r in results if r.offset is not None]
        assert len(offsets) == len(results)
        assert offsets == sorted(offsets)  # one key's sends keep their order
        for result in results:
            assert result.offset is not None
            by_partition[result.partition].append(result.offset)
    for offsets in by_partition.values():
        assert sorted(offsets) == list(range(len(offsets)))  # gapless, none twice
    assert sum(len(o) for o in by_partition.values()) == 6 * 300
