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

-- name: record_sink_error
-- Records %(error)s as relay member %(member)s's sink error in group %(group)s (NULL clears
-- it); false if the member is not registered (migration 0037). Row locks on that row and the
-- group's rows of departed members, which it deletes.
SELECT {schema}.relay_sink_error(%(group)s, %(member)s, %(error)s);

-- name: relay_sink_errors
-- The sink errors of the live members of relay groups %(groups)s, oldest run first (no locks).
SELECT e.group_name, e.member_id, e.error, e.since, e.seen_at
FROM {schema}.relay_sink_errors e
JOIN {schema}.members m
  ON m.group_name = e.group_name AND m.member_id = e.member_id AND m.expires_at > now()
WHERE e.group_name = ANY(%(groups)s::text[])
ORDER BY e.group_name, e.since, e.member_id;

-- name: grant_consumer_0037
-- The consumer capability's rights of migration 0037: record a relay's sink errors, and read
-- relay status and describe_group (partition leases, the members' columns but the instance
-- token that fences a member's older instances, group activity, the sink errors).
GRANT EXECUTE ON FUNCTION {schema}.relay_sink_error(text, text, text) TO {role};
GRANT SELECT ON {schema}.leases, {schema}.group_activity, {schema}.relay_sink_errors TO {role};
GRANT SELECT (group_name, member_id, topic_ids, session_timeout, expires_at, joined_at)
    ON {schema}.members TO {role};
