"""A consumer group member in its own process, for tests/log/test_group_processes.py.

    python -m tests.log.groupmember DSN MODE [--victim N] [--session S] [--member-id ID]
        [--label L]

MODE is ``poll`` (poll, record each message in ``processed`` on a side connection, commit) or
``tx`` (``consumer.transaction()``, records written in the batch's transaction). Prints
``joined`` once it has joined, and with ``--victim N`` prints ``mid-batch`` in the middle of
its N-th non-empty batch (records written, nothing committed) and blocks there, to be killed.
SIGTERM stops it after the current batch; it then leaves the group and prints ``done``. Rows
in ``processed`` name the member by ``--label`` (default: its member id), and a member fenced
for good (a newer instance took its member id) prints ``instance-fenced`` and ends; in ``poll``
mode a commit refused as ``Fenced`` is let go, as the runner does.

``fence`` mode, for the fencing test: polls one batch, prints ``polled``, waits for a line on
stdin, then commits and prints ``committed`` or ``fenced <error>``.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

import psycopg

import postroom
from postroom.errors import Fenced, InstanceFenced


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("dsn")
    parser.add_argument("mode", choices=["poll", "tx", "fence", "fence-tx"])
    parser.add_argument("--victim", type=int, default=0)
    parser.add_argument("--session", type=float, default=2.0)
    parser.add_argument("--member-id", default=None)
    parser.add_argument("--label", default=None)
    args = parser.parse_args()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    member = args.member_id or f"p{os.getpid()}"
    label = args.label or member
    with (
        postroom.connect(args.dsn) as client,
        client.consumer("g", "t", session_timeout=args.session, member_id=member) as consumer,
        psycopg.connect(args.dsn, autocommit=True) as side,
    ):
        consumer.assignment()
        print("joined", flush=True)
        if args.mode.startswith("fence"):
            fence(consumer, args.mode == "fence-tx")
            return
        try:
            run(consumer, side, label, args.mode, args.victim, stop)
        except InstanceFenced:
            print("instance-fenced", flush=True)
            return
    print("done", flush=True)


def run(
    consumer: postroom.Consumer,
    side: psycopg.Connection,
    label: str,
    mode: str,
    victim: int,
    stop: threading.Event,
) -> None:
    batches = 0
    while not stop.is_set():
        if mode == "poll":
            messages = consumer.poll(timeout=0.2, max_messages=20)
            if messages:
                batches += 1
                record(side, label, messages, victim == batches)
                try:
                    consumer.commit()
                except Fenced:
                    pass  # as the runner does: go on with the partitions still held
        else:
            with consumer.transaction(max_messages=20, timeout=0.2) as batch:
                if batch.messages:
                    batches += 1
                    record(batch.connection, label, batch.messages, victim == batches)


def record(
    conn: psycopg.Connection, member: str, messages: list[postroom.Message], victim: bool
) -> None:
    for i, message in enumerate(messages):
        conn.execute(
            'INSERT INTO processed (member, partition, "offset", key, seq) '
            "VALUES (%s, %s, %s, %s, %s)",
            [member, message.partition, message.offset, message.key, int(message.text())],
        )
        if victim and i == len(messages) // 2:
            print("mid-batch", flush=True)
            threading.Event().wait()  # until SIGKILL


def fence(consumer: postroom.Consumer, transactional: bool) -> None:
    try:
        if transactional:
            with consumer.transaction(max_messages=100, timeout=5) as batch:
                print(f"claimed {len(batch)}", flush=True)
                sys.stdin.readline()
        else:
            print(f"polled {len(consumer.poll(timeout=5, max_messages=100))}", flush=True)
            sys.stdin.readline()
            consumer.commit()
    except Fenced as exc:
        print(f"fenced {exc}", flush=True)
        return
    print("committed", flush=True)


if __name__ == "__main__":
    main()
