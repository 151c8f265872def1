"""``postroom demo``: the transactional outbox and three consumer groups, checked end to end.

Everything happens in a schema of its own (``postroom_demo``), which the demo drops and
recreates on every run, so it never touches the user's topics and groups. It refuses to drop a
schema that an earlier demo run did not create.
"""

from __future__ import annotations

import random
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Annotated, Any

import psycopg
import typer
from psycopg import sql
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table
from rich.text import Text

import postroom
from postroom import embedded
from postroom.errors import GroupNotFound, InvalidArgument, SchemaNotReady

from .common import console, note, open_client, settings

TOPIC = "orders"
PARTITIONS = 4
GROUPS = ("billing", "email", "analytics")
DEMO_MARK = "created by `postroom demo`: dropped and recreated on every run"
DEADLINE = 40.0
"""Seconds the consumers get to see every order before the demo gives up (and fails)."""


@dataclass
class Seen:
    """What one consumer group received, in the order it received it."""

    name: str
    messages: list[postroom.Message] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, batch: list[postroom.Message]) -> None:
        with self.lock:
            self.messages.extend(batch)

    def __len__(self) -> int:
        with self.lock:
            return len(self.messages)


@dataclass
class Checks:
    """The demo's claims, each with whether it held."""

    results: list[tuple[str, bool]] = field(default_factory=list)

    def check(self, claim: str, held: bool) -> None:
        self.results.append((claim, held))

    @property
    def failed(self) -> int:
        return sum(1 for _, held in self.results if not held)


def demo(
    ctx: typer.Context,
    orders: Annotated[int, typer.Option("--orders", help="Orders to write.", min=1)] = 1000,
    customers: Annotated[
        int, typer.Option("--customers", help="Distinct customers (message keys).", min=1)
    ] = 40,
    writers: Annotated[
        int, typer.Option("--writers", help="Threads writing orders at once.", min=1, max=16)
    ] = 4,
    demo_schema: Annotated[
        str, typer.Option("--demo-schema", help="Schema the demo drops and recreates.")
    ] = "postroom_demo",
) -> None:
    """Show the log end to end on a demo schema, and check it.

    Writes orders and their events in the same transactions, consumes them with three groups
    at once, shows lag, replays one group, and checks that every group saw every order exactly
    once and in per-customer order. Exits 1 if a check fails.

    Uses --url, POSTROOM_URL, DATABASE_URL or the embedded PostgreSQL; works in its own schema
    (--demo-schema), never in the postroom schema: it refuses the name of the postroom schema
    (``postroom`` or --schema), a schema it did not create, and one of its own schemas that
    now holds topics or jobs it did not create.
    """
    checks = Checks()
    started = time.monotonic()
    if demo_schema in {"postroom", settings(ctx).schema}:
        raise InvalidArgument(
            f"--demo-schema {demo_schema!r} names the postroom schema for real topics (the demo "
            "drops its schema on every run): refusing to drop it; choose another (the default "
            "is postroom_demo)"
        )
    with open_client(ctx, schema=demo_schema) as client:
        _fresh_schema(client)
        console.print(
            f"[bold]1.[/] schema {client.schema!r}: topic {TOPIC!r} with {PARTITIONS} "
            "partitions, tables orders and invoices"
        )

        _rolled_back_order(client, checks)
        seen = _write_and_consume(client, orders, customers, writers, checks)

        totals = {g: client.describe_group(g).lag for g in GROUPS}
        console.print(
            "\n[bold]4.[/] lag once the consumers stopped: "
            + ", ".join(f"{g} {lag}" for g, lag in totals.items())
        )
        checks.check("every group caught up (lag 0)", not any(totals.values()))

        replay = _replay_analytics(client, orders)
        _report(client, [*seen, replay], orders, checks)

    elapsed = time.monotonic() - started
    console.print()
    for claim, held in checks.results:
        console.print(Text(f"{'✓' if held else '✗'} {claim}", style="green" if held else "red"))
    if checks.failed:
        console.print(Text(f"\n{checks.failed} check(s) failed", style="bold red"))
        raise typer.Exit(1)
    console.print(Text(f"\nall checks passed in {elapsed:.1f} s", style="bold green"))
    console.print(
        f"explore: postroom --schema {demo_schema} group describe analytics\n"
        f"         psql: SELECT * FROM {demo_schema}.messages_view LIMIT 5;"
    )
    if embedded.in_use(settings(ctx).url):
        where = embedded.location()
        note(
            f"the embedded PostgreSQL keeps running ({where.listens_on}): connect with "
            f"`{where.psql}`, stop it with `postroom embedded stop`"
        )


def _fresh_schema(client: postroom.Client) -> None:
    """Drop the demo schema (only if an earlier demo made it), migrate, create the tables."""
    schema = sql.Identifier(client.schema)
    with psycopg.connect(client.conninfo, autocommit=True) as conn:
        row = conn.execute(
            "SELECT d.description FROM pg_namespace n "
            "LEFT JOIN pg_description d ON d.objoid = n.oid "
            " AND d.classoid = 'pg_namespace'::regclass "
            "WHERE n.nspname = %s",
            (client.schema,),
        ).fetchone()
        if row is not None and row[0] != DEMO_MARK:
            raise InvalidArgument(
                f"schema {client.schema!r} exists and was not created by `postroom demo`: "
                "refusing to drop it; choose another with --demo-schema"
            )
        if row is not None:
            _refuse_foreign_content(client)
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(schema))
    client.migrate()
    with psycopg.connect(client.conninfo) as conn:
        conn.execute(sql.SQL("COMMENT ON SCHEMA {} IS {}").format(schema, sql.Literal(DEMO_MARK)))
        conn.execute(
            sql.SQL(
                "CREATE TABLE {}.orders (id integer PRIMARY KEY, customer text NOT NULL, "
                "amount numeric(10, 2) NOT NULL, created_at timestamptz NOT NULL DEFAULT now())"
            ).format(schema)
        )
        conn.execute(
            sql.SQL(
                "CREATE TABLE {}.invoices (order_id integer PRIMARY KEY, amount numeric(10, 2) "
                'NOT NULL, partition integer NOT NULL, "offset" bigint NOT NULL)'
            ).format(schema)
        )
    client.create_topic(TOPIC, partitions=PARTITIONS)


def _refuse_foreign_content(client: postroom.Client) -> None:
    """Refuse to drop a demo schema that holds topics or jobs the demo never makes: someone
    used it for real work (``postroom --schema postroom_demo topic create ...``)."""
    try:
        topics = {t.name for t in client.list_topics()}
        jobs = client.list_jobs(limit=1)
    except SchemaNotReady:
        return  # marked, but not migrated: nothing of anyone's in it
    foreign = sorted(topics - {TOPIC})
    if foreign or jobs:
        held = f"topics {foreign}" if foreign else "jobs"
        raise InvalidArgument(
            f"schema {client.schema!r} was made by `postroom demo` but now holds {held} the "
            "demo did not create: refusing to drop it; choose another with --demo-schema"
        )


def _insert_order(
    client: postroom.Client,
    conn: psycopg.Connection[Any],
    order_id: int,
    customer: str,
    amount: Decimal,
) -> None:
    """The outbox pattern: the order row and its event, in the caller's open transaction."""
    conn.execute(
        sql.SQL("INSERT INTO {}.orders (id, customer, amount) VALUES (%s, %s, %s)").format(
            sql.Identifier(client.schema)
        ),
        (order_id, customer, amount),
    )
    event = {"order_id": order_id, "customer": customer, "amount": str(amount)}
    client.publish(TOPIC, event, key=customer, headers={"type": "order_placed"}, conn=conn)


def _rolled_back_order(client: postroom.Client, checks: Checks) -> None:
    console.print(
        "[bold]2.[/] a transaction that inserts order 0 and publishes its event, then rolls back"
    )
    with psycopg.connect(client.conninfo) as conn:
        _insert_order(client, conn, 0, "customer-0", Decimal("9.99"))
        conn.rollback()  # say, the payment was declined
        count = conn.execute(
            sql.SQL("SELECT count(*) FROM {}.orders").format(sql.Identifier(client.schema))
        ).fetchone()
    high_water = client.describe_topic(TOPIC).high_water
    console.print(
        f"   orders rows: {count[0] if count else '?'}, events in {TOPIC!r}: {high_water}"
    )
    checks.check(
        "a rolled-back transaction left neither the order row nor its event (nor an offset gap)",
        count is not None and count[0] == 0 and high_water == 0,
    )


def _write_and_consume(
    client: postroom.Client, orders: int, customers: int, writers: int, checks: Checks
) -> list[Seen]:
    """Writer threads commit orders with their events while the three groups consume."""
    console.print(
        f"[bold]3.[/] {writers} writers commit {orders} orders (row + event per transaction) "
        "while billing and email consume; analytics starts once all are written"
    )
    traffic = _Traffic(client, orders, customers, writers)
    lag_when_written = traffic.run()
    if lag_when_written is not None:
        console.print("   lag right after the last order was committed:")
        console.print(lag_when_written)
    for exc in traffic.errors:
        checks.check(f"no error in the demo threads ({type(exc).__name__}: {exc})", False)
    checks.check(f"all {orders} orders written in time", traffic.written == orders)
    return traffic.seen


class _Traffic:
    """The writers and the three consumer groups, each in a thread of its own."""

    def __init__(self, client: postroom.Client, orders: int, customers: int, writers: int) -> None:
        self.client = client
        self.orders = orders
        self.customers = customers
        self.writers = writers
        self.seen = [Seen(name) for name in GROUPS]
        self.errors: list[BaseException] = []
        self.written = 0
        self._written_lock = threading.Lock()
        self._stop = threading.Event()
        # analytics joins late; its cursors exist from the start (reset_group creates them),
        # so the lag table taken when the writers finish shows the backlog it then works off.
        self._late_start = threading.Event()
        rng = random.Random(7)
        self._amounts = {i: Decimal(rng.randrange(100, 20000)) / 100 for i in range(1, orders + 1)}

    def run(self) -> Table | None:
        """Run everything with progress bars; return the lag table taken when writes ended."""
        self.client.reset_group("analytics", TOPIC, to="earliest")
        consumers: dict[str, Callable[[Seen], None]] = {
            "billing": self._billing,
            "email": self._poll_commit,
            "analytics": self._late_poll_commit,
        }
        readers = [self._thread(consumers[s.name], s.name, s) for s in self.seen]
        writers = [self._thread(self._write, f"writer-{i}", i) for i in range(self.writers)]
        lag_when_written: Table | None = None
        with Progress(
            TextColumn("   {task.description:>10}"),
            BarColumn(),
            MofNCompleteColumn(),
            console=console,
        ) as progress:
            written_bar = progress.add_task("written", total=self.orders)
            bars = [(s, progress.add_task(s.name, total=self.orders)) for s in self.seen]
            for thread in readers + writers:
                thread.start()
            deadline = time.monotonic() + DEADLINE
            while any(t.is_alive() for t in readers + writers) and time.monotonic() < deadline:
                time.sleep(0.1)
                progress.update(written_bar, completed=self.written)
                for seen, bar in bars:
                    progress.update(bar, completed=len(seen))
                if lag_when_written is None and not any(t.is_alive() for t in writers):
                    lag_when_written = _lag_table(self.client)
                    self._late_start.set()
            self._stop.set()
            for thread in readers + writers:
                thread.join(5)
        return lag_when_written

    def _thread(self, func: Callable[..., None], name: str, *args: Any) -> threading.Thread:
        def run() -> None:
            try:
                func(*args)
            except BaseException as exc:  # noqa: BLE001 - reported as a failed check
                self.errors.append(exc)
                self._stop.set()

        return threading.Thread(target=run, name=name, daemon=True)

    def _write(self, share: int) -> None:
        # One customer's orders all come from one writer, in id order: that is the per-key
        # order every group must see.
        with psycopg.connect(self.client.conninfo) as conn:
            for order_id in range(1, self.orders + 1):
                customer = order_id % self.customers
                if customer % self.writers != share:
                    continue
                if self._stop.is_set():
                    return
                amount = self._amounts[order_id]
                _insert_order(self.client, conn, order_id, f"customer-{customer}", amount)
                conn.commit()
                with self._written_lock:
                    self.written += 1

    def _billing(self, target: Seen) -> None:
        # Transactional consumption: the invoices and the cursor advance commit together.
        insert = sql.SQL(
            'INSERT INTO {}.invoices (order_id, amount, partition, "offset") '
            "VALUES (%s, %s, %s, %s)"
        ).format(sql.Identifier(self.client.schema))
        with self.client.consumer("billing", TOPIC) as consumer:
            while len(target) < self.orders and not self._stop.is_set():
                with consumer.transaction(max_messages=200, timeout=0.5) as batch:
                    rows = [
                        (m.json()["order_id"], m.json()["amount"], m.partition, m.offset)
                        for m in batch
                    ]
                    if rows:
                        batch.connection.cursor().executemany(insert, rows)
                target.add(batch.messages)

    def _late_poll_commit(self, target: Seen) -> None:
        while not self._late_start.wait(0.1):
            if self._stop.is_set():
                return
        self._poll_commit(target)

    def _poll_commit(self, target: Seen) -> None:
        # Poll/commit consumption, Kafka style: no transaction stays open while work runs.
        with self.client.consumer(target.name, TOPIC) as consumer:
            while len(target) < self.orders and not self._stop.is_set():
                batch = consumer.poll(timeout=0.5, max_messages=100)
                if batch:
                    target.add(batch)
                    consumer.commit()


def _replay_analytics(client: postroom.Client, orders: int) -> Seen:
    console.print("\n[bold]5.[/] replay: reset group analytics to the earliest offsets")
    moved = client.reset_group("analytics", TOPIC, to="earliest")
    console.print(f"   next offsets now {dict(sorted(moved.items()))}; lag:")
    console.print(_lag_table(client, only="analytics"))
    replay = Seen("analytics (replay)")
    deadline = time.monotonic() + DEADLINE
    with client.consumer("analytics", TOPIC) as consumer:
        while len(replay) < orders and time.monotonic() < deadline:
            batch = consumer.poll(timeout=0.5, max_messages=500)
            replay.add(batch)
            consumer.commit()
    console.print(f"   analytics read {len(replay)} messages again")
    return replay


def _lag_table(client: postroom.Client, only: str | None = None) -> Table:
    table = Table("group", "partition", "committed", "high-water", "lag", "lag s")
    for group in [only] if only else GROUPS:
        try:
            parts = client.describe_group(group).partitions
        except GroupNotFound:
            continue  # its consumer has not started yet
        for part in parts:
            table.add_row(
                group,
                str(part.partition),
                str(part.committed),
                str(part.high_water),
                str(part.lag),
                f"{part.lag_seconds:.2f}",
            )
    return table


def _report(client: postroom.Client, seen: list[Seen], orders: int, checks: Checks) -> None:
    """The table of what each group saw, and the checks on it."""
    topic = client.describe_topic(TOPIC)
    high_waters = {p.partition: p.high_water for p in topic.partition_info}
    console.print(
        f"\n[bold]6.[/] what each group saw: messages, first-last offset per partition "
        f"(high-water marks {high_waters})"
    )
    table = Table(
        "group",
        "messages",
        *(f"p{p}" for p in sorted(high_waters)),
        "each once",
        "key order",
    )
    for group in seen:
        offsets: dict[int, list[int]] = defaultdict(list)
        by_key: dict[bytes | None, list[int]] = defaultdict(list)
        ids = []
        for message in group.messages:
            order_id = message.json()["order_id"]
            offsets[message.partition].append(message.offset)
            by_key[message.key].append(order_id)
            ids.append(order_id)
        exactly_once = sorted(ids) == list(range(1, orders + 1))
        in_order = all(keyed == sorted(keyed) for keyed in by_key.values())
        gapless = all(offsets.get(p, []) == list(range(hw)) for p, hw in high_waters.items())
        spans = [
            f"{min(offsets[p])}-{max(offsets[p])}" if offsets.get(p) else "-"
            for p in sorted(high_waters)
        ]
        table.add_row(
            group.name,
            str(len(group.messages)),
            *spans,
            "yes" if exactly_once else "NO",
            "yes" if in_order else "NO",
        )
        checks.check(f"{group.name} saw every order exactly once", exactly_once)
        checks.check(f"{group.name} saw each customer's orders in order", in_order)
        checks.check(
            f"{group.name} saw gapless offsets 0..high-water-1 on every partition", gapless
        )
    console.print(table)
    schema = sql.Identifier(client.schema)
    with psycopg.connect(client.conninfo) as conn:
        row = conn.execute(
            sql.SQL(
                "SELECT (SELECT count(*) FROM {s}.orders), (SELECT count(*) FROM {s}.invoices), "
                "(SELECT sum(amount) FROM {s}.orders) = (SELECT sum(amount) FROM {s}.invoices)"
            ).format(s=schema)
        ).fetchone()
    assert row is not None
    order_rows, invoice_rows, sums_match = row
    console.print(f"   orders rows: {order_rows}, invoices written by billing: {invoice_rows}")
    checks.check(
        f"{orders} order rows and {orders} events (topic high-water {topic.high_water})",
        order_rows == orders and topic.high_water == orders,
    )
    checks.check(
        "billing wrote exactly one invoice per order, in its consuming transactions",
        invoice_rows == orders and bool(sums_match),
    )
