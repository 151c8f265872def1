"""``postroom bench groups``: one consumer group draining a backlog with 1, 2 and 4 member
processes (messages per second), and the time from a kill -9 of a member to its partitions being
consumed again. Runs in a schema of its own, dropped at the end.

    postroom bench groups --quick      # 20,000 messages: a smoke run
"""

from __future__ import annotations

import multiprocessing
import time
from dataclasses import asdict, dataclass
from multiprocessing.synchronize import Event as EventType
from typing import Any

import postroom
from postroom.embedded import resolve_url

from . import _common

SCHEMA = "postroom_bench_groups"
TOPIC = "bench-groups"


@dataclass(frozen=True)
class Settings:
    messages: int = 200_000
    partitions: int = 12
    members: tuple[int, ...] = (1, 2, 4)
    session_timeout: float = 3.0


def _member(url: str, group: str, session: float, joined: EventType, stop: EventType) -> None:
    """One member process: poll, commit, until ``stop``."""
    with (
        postroom.connect(url, schema=SCHEMA) as client,
        client.consumer(group, TOPIC, session_timeout=session) as consumer,
    ):
        consumer.assignment()
        joined.set()
        while not stop.is_set():
            if consumer.poll(timeout=0.2, max_messages=1000):
                consumer.commit()


def _lag(client: postroom.Client, group: str) -> int:
    try:
        return client.describe_group(group).lag
    except postroom.errors.GroupNotFound:
        return -1


def _start(url: str, group: str, count: int, session: float) -> tuple[list[Any], EventType]:
    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    started = []
    for _ in range(count):
        joined = context.Event()
        process = context.Process(target=_member, args=(url, group, session, joined, stop))
        process.start()
        started.append((process, joined))
    for _, joined in started:
        joined.wait(120)
    return [p for p, _ in started], stop


def _stop(processes: list[Any], stop: EventType) -> None:
    stop.set()
    for process in processes:
        process.join(30)
        if process.is_alive():
            process.kill()
            process.join()


def drain(client: postroom.Client, url: str, settings: Settings, members: int) -> float:
    """Messages per second for ``members`` processes draining the whole backlog, from the
    moment every member has joined (the first member holds all partitions until the others
    join: hand-overs are part of the figure)."""
    group = f"drain-{members}"
    processes, stop = _start(url, group, members, settings.session_timeout)
    started = time.monotonic()
    try:
        while _lag(client, group) != 0:
            time.sleep(0.05)
        return _common.rate(settings.messages, time.monotonic() - started)
    finally:
        _stop(processes, stop)


def takeover(client: postroom.Client, url: str, settings: Settings) -> float:
    """Seconds from a kill -9 of one of two members to all its partitions consumed again."""
    group = "takeover"
    processes, stop = _start(url, group, 2, settings.session_timeout)
    try:
        while _lag(client, group) != 0:
            time.sleep(0.05)
        processes[0].kill()
        killed = time.monotonic()
        client.publish_batch(
            TOPIC, [{"value": "x", "partition": p} for p in range(settings.partitions)]
        )
        while _lag(client, group) != 0:
            time.sleep(0.02)
        return time.monotonic() - killed
    finally:
        _stop(processes, stop)


def run(url: str | None = None, settings: Settings | None = None) -> dict[str, Any]:
    settings = settings or Settings()
    conninfo = resolve_url(url)
    _common.drop_schema(conninfo, SCHEMA)
    result: dict[str, Any] = {
        "started_at": _common.started_at(),
        "settings": asdict(settings),
        "machine": _common.machine_info(),
        "server": _common.server_info(conninfo),
    }
    try:
        with postroom.connect(conninfo, schema=SCHEMA) as client:
            client.migrate()
            client.create_topic(TOPIC, partitions=settings.partitions)
            batch = 10_000
            for start in range(0, settings.messages, batch):
                client.publish_batch(
                    TOPIC, [b"%d" % n for n in range(start, min(start + batch, settings.messages))]
                )
            rates = {str(n): drain(client, conninfo, settings, n) for n in settings.members}
            result["drain_msg_per_s"] = rates
            result["takeover_s"] = takeover(client, conninfo, settings)
    finally:
        _common.drop_schema(conninfo, SCHEMA)
    return result


def format_report(result: dict[str, Any]) -> str:
    settings = result["settings"]
    lines = [
        f"postroom bench groups: {settings['messages']} messages, {settings['partitions']} "
        f"partitions, session timeout {settings['session_timeout']} s",
        _common.server_line(result["server"], result["machine"]),
        f"load average at start: {result['machine']['loadavg_1m_at_start']}",
    ]
    rates = result["drain_msg_per_s"]
    one = rates.get("1") or 0
    for members, value in rates.items():
        speedup = f" ({value / one:.2f}x one member)" if one else ""
        lines.append(f"  {members} member(s): {value:,.0f} msg/s{speedup}")
    lines.append(f"  kill -9 to partitions consumed again: {result['takeover_s']:.2f} s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = _common.parser("postroom bench groups", __doc__ or "")
    parser.add_argument("--quick", action="store_true", help="20,000 messages")
    parser.add_argument("--messages", type=int, default=None)
    args = parser.parse_args(argv)
    count = args.messages or (20_000 if args.quick else Settings.messages)
    result = run(args.url, Settings(messages=count))
    return _common.report(result, args.json, format_report)


if __name__ == "__main__":
    raise SystemExit(main())
