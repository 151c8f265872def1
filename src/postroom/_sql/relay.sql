-- The inbox (migration 0005): receivers record processed message ids in their transaction.

-- name: inbox_record
-- Records %(message_id)s in inbox %(name)s unless it is there; returns a row only if it was new.
-- Takes the row's unique-index lock: a concurrent insert of the same id waits for this
-- transaction to end, then conflicts (so exactly one of two racing receivers sees it new).
INSERT INTO {schema}.inbox (name, message_id) VALUES (%(name)s, %(message_id)s)
ON CONFLICT DO NOTHING
RETURNING 1;

-- name: inbox_prune
-- Deletes up to %(batch)s ids recorded before %(before)s (in inbox %(name)s, or every inbox if
-- it is null), oldest first; returns how many. Row locks on the deleted rows only (a second
-- pruner racing for the same rows waits, then finds them gone).
WITH doomed AS (
    SELECT name, message_id FROM {schema}.inbox
    WHERE seen_at < %(before)s AND (%(name)s::text IS NULL OR name = %(name)s::text)
    ORDER BY seen_at
    LIMIT %(batch)s
)
DELETE FROM {schema}.inbox i USING doomed d
WHERE i.name = d.name AND i.message_id = d.message_id;

-- name: grant_inbox
-- Keep an inbox: record ids, and prune them (part of the consumer capability).
GRANT SELECT, INSERT, DELETE ON {schema}.inbox TO {role};
