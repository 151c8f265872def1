"""A member delivers nothing it cannot be sure it holds (issue 21 items 1 and 5, issue 23 item 9):
an older instance of a static member replaced by a newer one is fenced for good, a refused commit
stops delivery of the partitions it names, and a member whose heartbeat cannot renew its session
stops delivering once the session timeout has passed. In one process; the heartbeat is frozen by
stopping its loop, as tests/log/test_groups.py does (tests/log/test_group_processes.py freezes a
real process with SIGSTOP)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import psycopg
import pytest

import postroom
from postroom import Message, TopicPartition
from postroom._acompat import spawn
from postroom.errors import Fenced, InstanceFenced
from postroom.log.membership import Membership
from tests.signals import wait_for

SESSION = 1.0
BOTH = {TopicPartition("t", 0), TopicPartition("t", 1)}


def publish(client: postroom.Client, start: int, count: int) -> None:
    client.publish_batch(
        "t", [{"value": f"m{i}", "partition": i % 2} for i in range(start, start + count)]
    )


def membership_of(consumer: postroom.Consumer) -> Membership:
    membership = consumer._assignment.membership  # type: ignore[union-attr]
    assert membership is not None
    return membership


def freeze(membership: Membership) -> None:
    """Stop the heartbeat loop, as if the process froze (the consumer's own calls go on)."""
    membership._stop.set()
    assert membership._task is not None
    membership._task.join(10)
    assert not membership._task.is_alive()


def resume(membership: Membership) -> None:
    """Start the heartbeat loop again, as a frozen process does when it continues."""
    membership._stop.clear()
    membership._task = spawn(membership._run, name="resumed-heartbeat")


def session_over(dsn: str, member_id: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT NOT EXISTS (SELECT FROM postroom.members "
            "WHERE member_id = %s AND expires_at > now())",
            [member_id],
        ).fetchone()
    return bool(row and row[0])


def drain(consumer: postroom.Consumer, count: int) -> list[Message]:
    """Poll until ``count`` messages came (bounded)."""
    got: list[Message] = []

    def enough() -> bool:
        got.extend(consumer.poll(timeout=0.1))
        return len(got) >= count

    wait_for(enough, timeout=15, what=f"{count} messages")
    return got


def test_a_replaced_static_member_whose_heartbeat_resumes_is_fenced_for_good(
    client: postroom.Client, dsn: str
) -> None:
    client.create_topic("t", partitions=2)
    publish(client, 0, 10)
    old = client.consumer("g", "t", member_id="pod-1", session_timeout=SESSION)
    assert len(old.poll(timeout=1, max_messages=100)) == 10
    membership = membership_of(old)
    freeze(membership)
    wait_for(lambda: session_over(dsn, "pod-1"), what="the frozen member's session to run out")
    new = client.consumer("g", "t", member_id="pod-1", session_timeout=SESSION)
    assert new.assignment() == BOTH
    publish(client, 10, 10)
    resume(membership)  # the old instance goes on: its heartbeat must not revive it

    delivered: list[Message] = []

    def fenced() -> bool:
        try:
            delivered.extend(old.poll(timeout=0.05))
        except InstanceFenced:
            return True
        return False

    wait_for(fenced, timeout=10, what="the old instance to be fenced")
    assert delivered == []
    with pytest.raises(InstanceFenced, match="newer instance"):
        old.commit()
    with pytest.raises(InstanceFenced):  # for good
        old.poll(timeout=0)
    old.close()  # leaves nothing: the member id is the new instance's

    assert len(drain(new, 20)) == 20  # nothing was committed: all of it, from offset 0
    new.commit()
    assert new.assignment() == BOTH
    assert [new.committed(tp) for tp in sorted(BOTH)] == [10, 10]
    with psycopg.connect(dsn, autocommit=True) as conn:
        owners = conn.execute("SELECT owner FROM postroom.leases ORDER BY partition").fetchall()
        live = conn.execute(
            "SELECT count(*) FROM postroom.members WHERE member_id = 'pod-1' AND expires_at > now()"
        ).fetchone()
    assert owners == [("pod-1",), ("pod-1",)]
    assert live == (1,)
    new.close()


def test_a_refused_commit_stops_delivery_of_the_partitions_it_names(
    client: postroom.Client, dsn: str
) -> None:
    client.create_topic("t", partitions=2)
    publish(client, 0, 6)
    revoked: list[set[TopicPartition]] = []
    consumer = client.consumer(
        "g", "t", session_timeout=30, on_revoke=lambda tps: revoked.append(tps)
    )
    assert len(consumer.poll(timeout=1, max_messages=100)) == 6
    membership = membership_of(consumer)
    freeze(membership)  # so the consumer cannot learn of the move below by itself
    with psycopg.connect(dsn, autocommit=True) as conn:  # partition 0 moved on behind its back
        conn.execute("UPDATE postroom.leases SET epoch = epoch + 1000000 WHERE partition = 0")
    publish(client, 6, 20)
    with pytest.raises(Fenced, match="no longer holds partition 0"):
        consumer.commit()
    later = drain(consumer, 10)  # partition 1's ten new messages come; partition 0's do not
    assert {m.partition for m in later} == {1}
    assert consumer.poll(timeout=0.2) == []
    assert consumer.assignment() == {TopicPartition("t", 1)}
    assert revoked == [{TopicPartition("t", 0)}]

    resume(membership)  # its next lease list hands partition 0 back, from the committed cursor
    wait_for(lambda: consumer.assignment() == BOTH, what="partition 0 handed back")
    again = drain(consumer, 13)
    assert [m.offset for m in again if m.partition == 0] == list(range(13))
    consumer.commit()
    consumer.close()


@pytest.fixture
def refused_heartbeats(dsn: str) -> Iterator[psycopg.Connection]:
    """A connection that can make the heartbeats of one member fail (``refuse``): a trigger
    on the members table raises for that member id, as a cut network would make them fail,
    while the member's other connections (fetches, commits) keep working."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE refused_members (member_id text PRIMARY KEY)")
        conn.execute(
            """
            CREATE FUNCTION refuse_heartbeat() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF EXISTS (SELECT FROM public.refused_members r
                           WHERE r.member_id = NEW.member_id) THEN
                    RAISE EXCEPTION 'heartbeat of % cut by the test', NEW.member_id;
                END IF;
                RETURN NEW;
            END;
            $$
            """
        )
        conn.execute(
            "CREATE TRIGGER refuse_heartbeat BEFORE INSERT OR UPDATE ON postroom.members "
            "FOR EACH ROW EXECUTE FUNCTION refuse_heartbeat()"
        )
        yield conn


def test_a_member_whose_heartbeat_cannot_renew_delivers_nothing_after_its_session_timeout(
    any_client: postroom.Client, refused_heartbeats: psycopg.Connection
) -> None:
    client = any_client  # the heartbeat loop of both flavours
    client.create_topic("t", partitions=2)
    revoked: list[set[TopicPartition]] = []
    cut = client.consumer(
        "g", "t", session_timeout=SESSION, on_revoke=lambda tps: revoked.append(tps)
    )
    assert cut.assignment() == BOTH
    # a blocking view of it for the async client
    membership = cut._assignment.membership  # type: ignore[union-attr]
    assert membership is not None
    # From now on no heartbeat of ``cut`` renews its session, and its heartbeat connection is
    # terminated; its data connections live. Its session ends by cut_at + SESSION at the latest.
    refused_heartbeats.execute("INSERT INTO refused_members VALUES (%s)", [cut.member_id])
    cut_at = time.monotonic()
    assert membership._conn is not None
    refused_heartbeats.execute(
        "SELECT pg_terminate_backend(%s)", [membership._conn.info.backend_pid]
    )
    other = client.consumer("g", "t", session_timeout=SESSION)
    deliveries: list[tuple[float, Message]] = []
    sent = 0
    deadline = time.monotonic() + 20
    while time.monotonic() < cut_at + 3 * SESSION or other.assignment() != BOTH:
        assert time.monotonic() < deadline, "the other member never took every partition"
        publish(client, sent, 4)
        sent += 4
        polled_at = time.monotonic()  # a message returned was taken after this
        deliveries.extend((polled_at, m) for m in cut.poll(timeout=0.05))
        other.poll(timeout=0.05)
        other.commit()
    late = [(m.partition, m.offset) for t, m in deliveries if t > cut_at + SESSION]
    assert late == [], f"{len(late)} delivered after the session timeout, first {late[:6]}"
    assert cut.assignment() == set()
    assert revoked == [BOTH]  # treated as revoked once, when the session may have run out

    # The heartbeat works again: the member rejoins and gets its share.
    refused_heartbeats.execute("DELETE FROM refused_members")
    wait_for(
        lambda: other.poll(timeout=0.02) == [] and len(cut.assignment()) == 1,
        timeout=15,
        what="the member to rejoin",
    )
    cut.close()
    other.close()


def test_the_runner_ends_a_member_whose_id_a_newer_instance_took_and_run_raises(
    client: postroom.Client, dsn: str
) -> None:
    client.create_topic("t", partitions=2)
    handled: list[Message] = []

    @client.subscribe("t", group="g", member_id="pod", session_timeout=SESSION)
    def handle(message: Message) -> None:
        handled.append(message)

    runner = client.runner()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            runner.run(handle_signals=False)
        except BaseException as exc:  # noqa: BLE001  # asserted below
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        publish(client, 0, 4)
        wait_for(lambda: len(handled) == 4, what="the runner's member to handle 4 messages")
        # and to commit them: a newer instance joining before that commit fences it, and
        # the 4 come again (the run failed so under load, 10 messages drained instead of 6)
        wait_for(
            lambda: sum(p.committed or 0 for p in client.describe_group("g").partitions) == 4,
            what="the runner's member to commit its 4 messages",
        )
        newer = client.consumer("g", "t", member_id="pod-0", session_timeout=SESSION)
        assert newer.assignment() == BOTH
        thread.join(15)
        assert not thread.is_alive(), "run() went on with a fenced member"
    finally:
        runner.stop()
        thread.join(15)
    assert len(errors) == 1 and isinstance(errors[0], InstanceFenced), errors
    publish(client, 4, 6)
    assert len(drain(newer, 6)) == 6
    assert len(handled) == 4
    newer.commit()
    newer.close()


@pytest.mark.parametrize("call", ["commit", "transaction"])
def test_an_older_instance_is_refused_by_the_database_before_its_heartbeat_knows(
    client: postroom.Client, call: str
) -> None:
    client.create_topic("t", partitions=2)
    publish(client, 0, 10)
    old = client.consumer("g", "t", member_id="pod-1", session_timeout=30)
    assert len(old.poll(timeout=1, max_messages=100)) == 10
    freeze(membership_of(old))  # its session is still live for a while: no lapse to hide behind
    new = client.consumer("g", "t", member_id="pod-1", session_timeout=30)
    assert new.assignment() == BOTH
    with pytest.raises(
        InstanceFenced, match=f"{'claim' if call == 'transaction' else call} refused"
    ):
        if call == "commit":
            old.commit()
        else:
            with old.transaction(max_messages=10):
                pass
    with pytest.raises(InstanceFenced):  # for good, without asking the database again
        old.poll(timeout=0)
    assert new.poll(timeout=1, max_messages=100) != []
    new.commit()
    old.close()
    new.close()
