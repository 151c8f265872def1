-- Schema management. The migration lock is a transaction-level advisory lock keyed by the schema
-- name, so processes migrating the same schema at once run one after the other.

-- name: lock_migrations
-- Takes the advisory transaction lock that serializes migrations of this schema.
SELECT pg_advisory_xact_lock(hashtext('postroom.migrate'), hashtext(%(schema)s));

-- name: create_schema
-- Creates the schema and the migration ledger if missing (under lock_migrations).
CREATE SCHEMA IF NOT EXISTS {schema};
CREATE TABLE IF NOT EXISTS {schema}.schema_migrations (
    version     integer PRIMARY KEY,
    name        text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
);

-- name: applied_migrations
-- The versions already applied (no locks); fails with undefined_table before the first migrate.
SELECT version FROM {schema}.schema_migrations ORDER BY version;

-- name: record_migration
-- Records one applied migration (under lock_migrations).
INSERT INTO {schema}.schema_migrations (version, name) VALUES (%(version)s, %(name)s);

-- name: schema_exists
-- Whether the schema's migration ledger exists (catalog read, no locks). The schema name is
-- quoted, so a mixed-case name is found.
SELECT to_regclass(quote_ident(%(schema)s) || '.schema_migrations') IS NOT NULL;
