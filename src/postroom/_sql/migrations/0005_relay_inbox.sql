-- postroom migration 0005: the inbox, where receivers record the ids of the messages they have
-- processed, in their own transaction, to drop redeliveries (the relay delivers at least once).
-- `{schema}` is replaced by the quoted schema identifier; literal braces are doubled.

-- One row per (inbox name, message id). The primary key is the dedup: a second insert of the
-- same id conflicts, and one racing in a concurrent transaction waits for the first to end.
CREATE TABLE {schema}.inbox (
    name        text NOT NULL CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9._-]{{0,199}}$'),
    message_id  text NOT NULL CHECK (length(message_id) BETWEEN 1 AND 1000),
    seen_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (name, message_id)
);
-- Pruning deletes the oldest ids of an inbox first.
CREATE INDEX inbox_seen_at_idx ON {schema}.inbox (name, seen_at);
