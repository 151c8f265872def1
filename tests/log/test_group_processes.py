"""Consumer group members in separate processes: a kill -9 mid-batch under a running keyed
producer, and fencing of a member paused (SIGSTOP) past its session timeout.

Members are ``python -m tests.log.groupmember``; they record what they process in the table
``processed``, and say on stdout when they have joined or are mid-batch, so the tests wait on
those lines and on the ``postroom_groups`` notifications rather than sleeping.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import postroom

pytestmark = pytest.mark.slow

SESSION = 2.0
PROCESSED = """
CREATE TABLE processed (
    id bigserial PRIMARY KEY, member text NOT NULL, partition integer NOT NULL,
    "offset" bigint NOT NULL, key bytea, seq integer NOT NULL
)
"""


class Member:
    def __init__(self, dsn: str, *args: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.log.groupmember", dsn, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))),
        )
        self.member_id = next((a.split("=")[1] for a in args if a.startswith("--member-id=")), "")
        self.member_id = self.member_id or f"p{self.process.pid}"

    def expect(self, prefix: str, timeout: float = 30) -> str:
        """The next stdout line, which must start with ``prefix`` (a blocking read, bounded)."""
        result: list[str] = []
        reader = threading.Thread(target=lambda: result.append(self.process.stdout.readline()))  # type: ignore[union-attr]
        reader.start()
        reader.join(timeout)
        assert result, f"member printed nothing for {timeout} s (wanted {prefix!r})"
        assert result[0].startswith(prefix), result[0]
        return result[0].strip()

    def send(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                pipe.close()


@pytest.fixture
def members(dsn: str) -> Iterator[list[Member]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(PROCESSED)
    started: list[Member] = []
    yield started
    for member in started:
        member.stop()


def rows(dsn: str, statement: str, params: Any = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(statement.encode(), params).fetchall()


def wait_for_group(dsn: str, statement: str, timeout: float, what: str) -> float:
    """Seconds until ``statement`` returns true, re-checked at each ``postroom_groups``
    notification (every membership change sends one) and every 0.5 s at least."""
    started = time.monotonic()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("LISTEN postroom_groups")
        while not conn.execute(statement.encode()).fetchone()[0]:  # type: ignore[index]
            remaining = started + timeout - time.monotonic()
            assert remaining > 0, f"timed out after {timeout} s waiting for {what}"
            for _ in conn.notifies(timeout=min(remaining, 0.5), stop_after=1):
                pass
    return time.monotonic() - started


def owners(dsn: str) -> Counter[str]:
    held = rows(dsn, "SELECT owner FROM postroom.leases WHERE owner IS NOT NULL")
    return Counter(owner for (owner,) in held)


def produce_keyed(client: postroom.Client, count: int, done: threading.Event) -> None:
    """Keyed messages, value = the sequence number within the key, in bursts."""
    seq: dict[str, int] = defaultdict(int)
    with client.producer(linger_ms=2) as producer:
        for n in range(count):
            key = f"k{n % 40}"
            producer.send("t", str(seq[key]), key=key)
            seq[key] += 1
            if n % 50 == 0:
                producer.flush()
    done.set()


def check_order_per_key(dsn: str) -> None:
    first_seen: dict[bytes, list[int]] = defaultdict(list)
    seen: set[tuple[int, int]] = set()
    for partition, offset, key, seq in rows(
        dsn, 'SELECT partition, "offset", key, seq FROM processed ORDER BY id'
    ):
        if (partition, offset) not in seen:
            seen.add((partition, offset))
            first_seen[key].append(seq)
    for key, seqs in first_seen.items():
        assert seqs == sorted(seqs), f"key {key!r} out of order"


@pytest.mark.parametrize("mode", ["poll", "tx"])
def test_three_members_survive_a_kill_mid_batch(
    dsn: str, client: postroom.Client, members: list[Member], mode: str
) -> None:
    total = 3000
    client.create_topic("t", partitions=12)
    session = f"--session={SESSION}"
    victim = Member(dsn, mode, session, "--victim=5")
    members.append(victim)
    victim.expect("joined")
    for _ in range(2):
        members.append(Member(dsn, mode, session))
        members[-1].expect("joined")
    wait_for_group(
        dsn,
        "SELECT count(*) = 12 AND count(DISTINCT owner) = 3 FROM postroom.leases "
        "WHERE owner = target",
        30,
        "4 partitions each",
    )
    produced = threading.Event()
    producer = threading.Thread(target=produce_keyed, args=(client, total, produced))
    producer.start()
    victim.expect("mid-batch", 60)
    victim_partitions = owners(dsn)[victim.member_id]
    assert victim_partitions == 4
    victim.process.kill()
    killed_at = time.monotonic()
    took = wait_for_group(
        dsn,
        "SELECT count(*) = 12 FROM postroom.leases l JOIN postroom.members m "
        "ON m.group_name = l.group_name AND m.member_id = l.owner AND m.expires_at > now()",
        SESSION + 15,
        "the victim's partitions to be owned again",
    )
    assert took <= SESSION + 3, f"takeover took {took:.1f} s after kill -9"
    assert time.monotonic() - killed_at < SESSION + 15
    producer.join(120)
    assert produced.is_set()
    wait_for_group(
        dsn,
        f'SELECT count(DISTINCT (partition, "offset")) = {total} FROM processed',
        120,
        "every message to be processed",
    )
    processings = Counter(
        (p, o, m) for p, o, m in rows(dsn, 'SELECT partition, "offset", member FROM processed')
    )
    per_message: dict[tuple[int, int], list[str]] = defaultdict(list)
    for (p, o, m), n in processings.items():
        per_message[(p, o)] += [m] * n
    assert len(per_message) == total
    duplicated = {k: v for k, v in per_message.items() if len(v) > 1}
    if mode == "tx":
        assert duplicated == {}  # the victim's batch rolled back with its records
    else:
        # Redelivered: only what the victim processed in its uncommitted batch.
        assert all(len(v) == 2 and victim.member_id in v for v in duplicated.values())
        assert len(duplicated) <= 20
    check_order_per_key(dsn)


@pytest.mark.parametrize("mode", ["fence", "fence-tx"])
def test_a_member_paused_past_its_session_is_fenced(
    dsn: str, client: postroom.Client, members: list[Member], mode: str
) -> None:
    client.create_topic("t")
    client.publish_batch("t", [str(i) for i in range(10)])
    paused = Member(dsn, mode, "--session=1")
    members.append(paused)
    paused.expect("joined")
    assert paused.expect("polled" if mode == "fence" else "claimed").endswith(" 10")
    paused.process.send_signal(signal.SIGSTOP)
    tp = postroom.TopicPartition("t", 0)
    with client.consumer("g", "t", session_timeout=1) as other:
        deadline = time.monotonic() + 15
        while other.assignment() != {tp}:  # once the paused member's session ran out
            assert time.monotonic() < deadline
            time.sleep(0.05)
        taken = other.poll(timeout=5, max_messages=3)
        assert [m.offset for m in taken] == [0, 1, 2]
        other.commit()
        paused.process.send_signal(signal.SIGCONT)
        paused.send("go")
        assert paused.expect("fenced").startswith("fenced")
        assert other.committed(tp) == 3


def test_a_frozen_static_member_replaced_is_fenced_for_good(
    dsn: str, client: postroom.Client, members: list[Member]
) -> None:
    """Issue 21 item 1: SIGSTOP a static member past its session timeout, start its
    replacement with the same member id, SIGCONT the old one: it never delivers nor commits
    again and ends with ``instance-fenced``; the replacement keeps every partition."""
    client.create_topic("t", partitions=2)
    static = ("poll", "--session=1", "--member-id=pod-1")
    done = "SELECT coalesce(sum(next_offset), 0) = {} FROM postroom.cursors"
    client.publish_batch("t", [str(i) for i in range(20)])
    old = Member(dsn, *static, "--label=old")
    members.append(old)
    old.expect("joined")
    wait_for_group(dsn, done.format(20), 30, "the old instance to commit its 20")
    old.process.send_signal(signal.SIGSTOP)  # idle: every batch it polled is committed
    wait_for_group(
        dsn,
        "SELECT NOT EXISTS (SELECT FROM postroom.members WHERE member_id = 'pod-1' "
        "AND expires_at > now())",
        15,
        "the frozen instance's session to run out",
    )
    new = Member(dsn, *static, "--label=new")
    members.append(new)
    new.expect("joined")
    client.publish_batch("t", [str(i) for i in range(20, 40)])
    wait_for_group(dsn, done.format(40), 30, "the replacement to commit 40")
    old.process.send_signal(signal.SIGCONT)
    for start in range(40, 100, 20):  # work keeps coming while the old instance runs again
        client.publish_batch("t", [str(i) for i in range(start, start + 20)])
        wait_for_group(dsn, done.format(start + 20), 30, f"the replacement to commit {start + 20}")
    by_label = Counter(label for (label,) in rows(dsn, "SELECT member FROM processed"))
    assert by_label == {"old": 20, "new": 80}  # the old one delivered nothing after SIGCONT
    assert old.expect("instance-fenced", 15) == "instance-fenced"
    assert old.process.wait(15) == 0
    client.publish_batch("t", [str(i) for i in range(100, 120)])
    wait_for_group(dsn, done.format(120), 30, "the replacement to commit 120")
    by_label = Counter(label for (label,) in rows(dsn, "SELECT member FROM processed"))
    assert by_label == {"old": 20, "new": 100}
    assert rows(dsn, 'SELECT count(DISTINCT (partition, "offset")) FROM processed') == [(120,)]
    assert owners(dsn) == Counter({"pod-1": 2})
    assert new.process.poll() is None  # still running, holding everything
