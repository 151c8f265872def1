"""The cost of publishing in the caller's transaction (issue 22, item 1): TRANSACTIONS
transactions of EVENTS ``publish_event(conn, ...)`` calls each, committed one after the other on
one connection, keys spread over a 4-partition topic. Prints one JSON line per EVENTS value:
transactions/s, events/s, and the p50/p99 of a transaction (its publishes and its COMMIT).
``--batch N`` adds one line: five transactions of one ``publish_batch(conn=)`` of N plain
values, and of N keyed ones (median and range of a transaction, in ms).

    PYTHONPATH=src python bench/intx_publish_bench.py --url postgresql://postgres@127.0.0.1:5432/bench

Run it against code before and after a change on databases of their own (each migrated by the
code under test), interleaved, to compare.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import psycopg

import postroom


def run(url: str, transactions: int, events: int) -> dict[str, float]:
    with postroom.connect(url) as client, psycopg.connect(url) as conn:
        client.migrate()
        for topic in client.list_topics():
            if topic.name == "bench_tx":
                client.delete_topic("bench_tx")
        client.create_topic("bench_tx", partitions=4)
        for i in range(50):  # warm-up: caches, prepared statements
            client.publish_event(conn, "order", i, "Created", {"n": i}, topic="bench_tx")
            conn.commit()
        took: list[float] = []
        start = time.perf_counter()
        for i in range(transactions):
            began = time.perf_counter()
            for j in range(events):
                client.publish_event(
                    conn, "order", (i * events + j) % 101, "Created", {"n": j}, topic="bench_tx"
                )
            conn.commit()
            took.append(time.perf_counter() - began)
        seconds = time.perf_counter() - start
        high = sum(p.high_water for p in client.describe_topic("bench_tx").partition_info)
        assert high == 50 + transactions * events, high
    took.sort()
    return {
        "events_per_transaction": events,
        "transactions_per_s": round(transactions / seconds, 1),
        "events_per_s": round(transactions * events / seconds, 1),
        "p50_ms": round(statistics.median(took) * 1000, 3),
        "p99_ms": round(took[int(len(took) * 0.99)] * 1000, 3),
    }


def run_batch(url: str, size: int) -> dict[str, object]:
    result: dict[str, object] = {"batch": size}
    with postroom.connect(url) as client, psycopg.connect(url) as conn:
        plain = [b"x" * 100] * size
        keyed = [{"value": b"x" * 100, "key": f"k{i}"} for i in range(size)]
        for name, items in (("plain", plain), ("keyed", keyed)):
            took = []
            for _ in range(5):
                began = time.perf_counter()
                client.publish_batch("bench_tx", items, conn=conn)
                conn.commit()
                took.append((time.perf_counter() - began) * 1000)
            result[f"{name}_ms"] = {
                "median": round(statistics.median(took), 1),
                "min": round(min(took), 1),
                "max": round(max(took), 1),
            }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--transactions", type=int, default=2000)
    parser.add_argument("--events", type=int, nargs="+", default=[1, 10])
    parser.add_argument("--batch", type=int, default=0)
    args = parser.parse_args()
    for events in args.events:
        print(json.dumps(run(args.url, args.transactions, events)), flush=True)
    if args.batch:
        print(json.dumps(run_batch(args.url, args.batch)), flush=True)


if __name__ == "__main__":
    main()
