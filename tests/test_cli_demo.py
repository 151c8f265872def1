"""``postroom demo`` never drops a schema holding anything it did not create."""

from __future__ import annotations

import psycopg

import postroom
from tests.test_cli import fails, ok


def test_demo_refuses_the_postroom_schema_name_even_where_it_does_not_exist(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        conn.execute("DROP SCHEMA postroom CASCADE")
    fails(dsn, "demo", "--orders", "10", "--demo-schema", "postroom", message="postroom schema")
    with psycopg.connect(dsn) as conn:
        assert (
            conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = 'postroom'").fetchone() is None
        )


def test_demo_refuses_the_schema_named_by_the_global_schema_option(dsn: str) -> None:
    fails(dsn, "--schema", "shop", "demo", "--demo-schema", "shop", message="postroom schema")


def test_demo_never_drops_its_own_schema_once_it_holds_a_users_topic(dsn: str) -> None:
    ok(dsn, "demo", "--orders", "20", "--customers", "4", "--writers", "1", "--demo-schema", "d1")
    with postroom.connect(dsn, schema="d1") as client:
        client.create_topic("precious")
        client.publish("precious", {"keep": True})
    fails(dsn, "demo", "--orders", "10", "--demo-schema", "d1", message="refusing to drop it")
    with postroom.connect(dsn, schema="d1") as client:
        assert client.describe_topic("precious").high_water == 1
