"""The workload's client processes (tests/history/workload.py starts them):

    python -m tests.history.clients ROLE URL FILE NAME [--fault F] [--seed S]

ROLE is ``producer`` (batching sends, and sends in its own transaction, a quarter of them
rolled back on purpose), ``member`` (a poll/commit group member), ``txmember`` (a member of
the transactional group, writing one effect row per message in the batch's transaction),
``worker`` (a queue worker) or ``enqueuer``. Each records its operations in FILE as NAME
(tests/history/recorder.py) and runs until SIGTERM. ``--fault`` injects a bug into this
process only, to prove the checker sees it: ``commit-early`` (a member commits before it
handles a batch, and dies in between on some batches, as a kill -9 would land there),
``skip-advance`` (a member's position moves past a message it never delivered) and
``double-claim`` (a worker runs one claim of a job on two slots).
"""

from __future__ import annotations

import argparse
import copy
import os
import random
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import psycopg

import postroom
from postroom.errors import CommitUnknown, Fenced, InstanceFenced, PostroomError
from tests.history.recorder import Recorder

TOPIC, PARTITIONS = "t", 4
POLL_GROUP, TX_GROUP = "pollgroup", "txgroup"
QUEUE, KIND, MAX_ATTEMPTS = "hist", "work", 4
SESSION = 3.0  # the members' session timeout; the nemesis pauses them for longer
LEASE = 3.0  # the workers' lease; likewise
BATCH = 20  # max_messages per poll or transactional batch: the redelivery bound per fault
EFFECTS_DDL = (
    "CREATE TABLE IF NOT EXISTS effects"
    " (grp text NOT NULL, part int NOT NULL, off bigint NOT NULL, value text NOT NULL)"
)

Errors = (PostroomError, psycopg.Error)
Callback = Callable[[set[Any]], None]


def outcome(exc: BaseException) -> str:
    """``info`` when the operation may have happened (a lost COMMIT), else ``fail``."""
    if isinstance(exc, CommitUnknown):
        return "info"
    if isinstance(exc, PostroomError):
        return "fail"
    return "info" if isinstance(exc, psycopg.OperationalError) else "fail"


def produce(url: str, rec: Recorder, stop: threading.Event, rng: random.Random) -> None:
    seq = 0
    with postroom.connect(url) as client, client.producer(linger_ms=5) as producer:
        rec.write("info", "ready", None)
        while not stop.is_set():
            for _ in range(5):
                seq += 1
                value, key = f"{rec.name}-{seq}", f"k{seq % 6}"
                op = rec.invoke("send", {"value": value, "key": key, "seq": seq})
                try:
                    future = producer.send(TOPIC, value, key=key)
                except Errors as exc:
                    rec.complete(op, outcome(exc), {**op["value"], "error": repr(exc)})
                    continue
                future.add_done_callback(settle_send(rec, op))
            if seq % 20 == 0:
                seq += 1
                send_in_transaction(url, client, rec, f"{rec.name}-tx{seq}", rng.random() < 0.25)
            stop.wait(0.05)
        producer.flush()


def settle_send(rec: Recorder, op: dict[str, Any]) -> Callable[[Future[Any]], None]:
    def done(future: Future[Any]) -> None:
        exc = future.exception()
        if exc is not None:
            rec.complete(op, outcome(exc), {**op["value"], "error": repr(exc)})
            return
        published = future.result()
        rec.complete(
            op, "ok", {**op["value"], "partition": published.partition, "offset": published.offset}
        )

    return done


def send_in_transaction(
    url: str, client: postroom.Client, rec: Recorder, value: str, roll_back: bool
) -> None:
    op = rec.invoke("send-tx", {"value": value, "rollback": roll_back})
    try:
        with psycopg.connect(url) as conn:
            published = client.publish(TOPIC, value, conn=conn)
            if roll_back:
                conn.rollback()
                rec.complete(op, "fail", {**op["value"], "partition": published.partition})
                return
            conn.commit()
    except Errors as exc:
        # A failure before COMMIT was sent leaves nothing; a lost COMMIT is unknown.
        rec.complete(op, "info" if not roll_back else "fail", {**op["value"], "error": repr(exc)})
        return
    rec.complete(op, "ok", {**op["value"], "partition": published.partition})


def ownership(rec: Recorder, group: str) -> tuple[Callback, Callback]:
    def assign(tps: set[Any]) -> None:
        rec.write("ok", "assign", {"group": group, "partitions": sorted(t.partition for t in tps)})

    def revoke(tps: set[Any]) -> None:
        rec.write("ok", "revoke", {"group": group, "partitions": sorted(t.partition for t in tps)})

    return assign, revoke


def positions(messages: list[postroom.Message]) -> list[list[int]]:
    last: dict[int, int] = {}
    for m in messages:
        last[m.partition] = m.offset + 1
    return sorted([p, o] for p, o in last.items())


def member(url: str, rec: Recorder, stop: threading.Event, fault: str | None) -> None:
    rng = random.Random(os.getpid())
    with (
        postroom.connect(url) as client,
        client.consumer(
            POLL_GROUP,
            TOPIC,
            session_timeout=SESSION,
            on_assign=ownership(rec, POLL_GROUP)[0],
            on_revoke=ownership(rec, POLL_GROUP)[1],
        ) as consumer,
    ):
        rec.write("info", "ready", None)
        if fault == "skip-advance":
            consumer.poll = skipping(consumer.poll, rng)  # type: ignore[method-assign]
        while not stop.is_set():
            op = rec.invoke("poll", {"group": POLL_GROUP})
            try:
                messages = consumer.poll(timeout=0.5, max_messages=BATCH)
            except InstanceFenced:
                raise
            except Errors as exc:
                rec.complete(op, "fail", {"group": POLL_GROUP, "error": repr(exc)})
                stop.wait(0.2)
                continue
            if fault == "commit-early" and messages:
                commit(consumer, rec, messages)
                if rng.random() < 0.2:
                    os._exit(137)  # dies after the commit, before handling: the batch is lost
            if messages:  # handling: long enough that kills and pauses land in it
                time.sleep(rng.uniform(0.05, 0.25))
            rec.complete(
                op,
                "ok",
                {
                    "group": POLL_GROUP,
                    "messages": [[m.partition, m.offset, m.text()] for m in messages],
                },
            )
            if messages and fault != "commit-early":
                commit(consumer, rec, messages)


def commit(consumer: postroom.Consumer, rec: Recorder, messages: list[postroom.Message]) -> None:
    op = rec.invoke("commit", {"group": POLL_GROUP, "offsets": positions(messages)})
    try:
        consumer.commit()
    except InstanceFenced:
        raise
    except Fenced as exc:
        rec.complete(op, "fail", {**op["value"], "error": repr(exc)})
    except Errors as exc:
        rec.complete(op, "info", {**op["value"], "error": repr(exc)})
    else:
        rec.complete(op, "ok")


def skipping(poll: Callable[..., list[postroom.Message]], rng: random.Random) -> Any:
    """The injected bug: now and then the position moves past a message never returned."""

    def poll_skipping(*args: Any, **kwargs: Any) -> list[postroom.Message]:
        messages = poll(*args, **kwargs)
        if len(messages) >= 3 and rng.random() < 0.3:
            del messages[len(messages) // 2]
        return messages

    return poll_skipping


def txmember(url: str, rec: Recorder, stop: threading.Event) -> None:
    rng = random.Random(os.getpid())
    with (
        postroom.connect(url) as client,
        client.consumer(
            TX_GROUP,
            TOPIC,
            session_timeout=SESSION,
            on_assign=ownership(rec, TX_GROUP)[0],
            on_revoke=ownership(rec, TX_GROUP)[1],
        ) as consumer,
    ):
        rec.write("info", "ready", None)
        while not stop.is_set():
            op = None
            handled = False
            try:
                with consumer.transaction(max_messages=BATCH, timeout=0.5) as batch:
                    messages = [[m.partition, m.offset, m.text()] for m in batch]
                    if messages:
                        op = rec.invoke("txbatch", {"group": TX_GROUP, "messages": messages})
                        with batch.connection.cursor() as cur:
                            cur.executemany(
                                "INSERT INTO effects (grp, part, off, value)"
                                " VALUES (%s, %s, %s, %s)",
                                [(TX_GROUP, *m) for m in messages],
                            )
                        time.sleep(rng.uniform(0.05, 0.25))  # a kill lands inside, at times
                    handled = True
            except InstanceFenced:
                raise
            except Errors as exc:
                if op is not None:
                    # Refused, or failed before COMMIT: rolled back; a lost COMMIT: unknown.
                    known = isinstance(exc, Fenced) or not handled
                    rec.complete(
                        op, "fail" if known else "info", {**op["value"], "error": repr(exc)}
                    )
                stop.wait(0.2)
                continue
            if op is not None:
                rec.complete(op, "ok")


def worker(url: str, rec: Recorder, fault: str | None) -> None:
    client = postroom.connect(url, max_size=6)
    rng = random.Random(os.getpid())
    from postroom.queue import fetcher

    # When each claim was sent, by (job, attempt): a run is exposed to a server crash from its
    # claim on, not from its start (a claim committed asynchronously just before the crash
    # may be lost, and a worker paused meanwhile reads the reply and starts the job after the
    # server is back). The recorder's own instrumentation: it changes nothing the worker does.
    claimed_at: dict[tuple[int, int], int] = {}
    claim = fetcher.Fetcher._claim

    def timed_claim(self: Any, want: int) -> list[Any]:
        sent = time.time_ns()
        jobs = claim(self, want)
        for job in jobs:
            claimed_at[job.id, job.attempt] = sent
        return jobs

    fetcher.Fetcher._claim = timed_claim  # type: ignore[method-assign]

    @client.job(KIND, queue=QUEUE, max_attempts=MAX_ATTEMPTS, backoff=postroom.Backoff(0.2, 2, 1))
    def work(n: int, *, job: postroom.JobContext) -> None:
        value = {"n": n, "id": job.id, "attempt": job.attempt}
        claimed = claimed_at.pop((job.id, job.attempt), None)
        op = rec.invoke(
            "run",
            {**value, "max_attempts": job.max_attempts, "worker": job.worker, "claimed": claimed},
        )
        time.sleep(rng.uniform(0.02, 0.3))
        if n % 7 == 0 and job.attempt == 1:
            rec.complete(op, "fail", value)
            raise RuntimeError("fails on purpose on its first attempt")
        rec.complete(op, "ok", value)

    if fault == "double-claim":

        def claim_twice(self: Any, want: int) -> list[Any]:
            jobs = timed_claim(self, want)
            return [*jobs, copy.copy(jobs[0])] if jobs else jobs

        fetcher.Fetcher._claim = claim_twice  # type: ignore[method-assign]
    with client:
        rec.write("info", "ready", None)
        client.worker([QUEUE], concurrency=2, lease=LEASE).run()


def enqueue(url: str, rec: Recorder, stop: threading.Event, rng: random.Random) -> None:
    n = int(rec.name.rsplit(".", 1)[1]) * 1_000_000
    with postroom.connect(url) as client:
        rec.write("info", "ready", None)
        while not stop.is_set():
            n += 1
            in_transaction = n % 4 == 0
            roll_back = in_transaction and rng.random() < 0.3
            op = rec.invoke("enqueue", {"n": n, "rollback": roll_back})
            try:
                if in_transaction:
                    with psycopg.connect(url) as conn:
                        job = client.enqueue(
                            KIND, {"n": n}, conn=conn, queue=QUEUE, max_attempts=MAX_ATTEMPTS
                        )
                        if roll_back:
                            conn.rollback()
                            rec.complete(op, "fail")
                            continue
                        conn.commit()
                else:
                    job = client.enqueue(KIND, {"n": n}, queue=QUEUE, max_attempts=MAX_ATTEMPTS)
            except Errors as exc:
                rec.complete(
                    op,
                    outcome(exc) if not roll_back else "fail",
                    {**op["value"], "error": repr(exc)},
                )
                stop.wait(0.2)
                continue
            rec.complete(op, "ok", {"n": n, "id": job.id})
            stop.wait(0.08)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=["producer", "member", "txmember", "worker", "enqueuer"])
    parser.add_argument("url")
    parser.add_argument("file", type=Path)
    parser.add_argument("name")
    parser.add_argument("--fault", default=None)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rec = Recorder(args.file, args.name)
    rng = random.Random(f"{args.seed}-{args.name}")
    if args.role == "worker":
        worker(args.url, rec, args.fault)  # the worker handles SIGTERM itself
        return
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    if args.role == "producer":
        produce(args.url, rec, stop, rng)
    elif args.role == "member":
        member(args.url, rec, stop, args.fault)
    elif args.role == "txmember":
        txmember(args.url, rec, stop)
    else:
        enqueue(args.url, rec, stop, rng)


if __name__ == "__main__":
    main()
