-- The log engine's runtime queries. Topics are resolved to numeric ids first; names never reach
-- SQL text. Counter rows (partitions) are always locked in ascending (topic_id, partition) order.

-- name: create_topic
-- Creates a topic and its counter rows through the SQL API function (unique violation if taken).
SELECT {schema}.create_topic(%(name)s, %(partitions)s, %(retention)s::interval);

-- name: topic_by_name
-- A topic's id and partition count (no locks).
SELECT id, partitions FROM {schema}.topics WHERE name = %(name)s;

-- name: list_topics
-- Every topic with its partition count, retention, total messages ever written, max_lag and
-- group_ttl (no locks).
SELECT t.name, t.partitions, t.retention, t.created_at,
       (SELECT coalesce(sum(p.next_offset), 0)::bigint FROM {schema}.partitions p
        WHERE p.topic_id = t.id) AS high_water,
       t.max_lag, t.group_ttl
FROM {schema}.topics t
ORDER BY t.name;

-- name: describe_partitions
-- Per partition of one topic: high-water mark, low-water mark, retained count and bytes (no locks).
-- Offsets are gapless and retention deletes a prefix, so the count is high - low.
SELECT p.partition, coalesce(s.low_water, p.next_offset) AS low_water,
       p.next_offset AS high_water,
       p.next_offset - coalesce(s.low_water, p.next_offset) AS messages,
       coalesce(s.bytes, 0)::bigint AS bytes
FROM {schema}.partitions p
LEFT JOIN LATERAL (
    SELECT min(m."offset") AS low_water,
           sum(octet_length(m.value) + coalesce(octet_length(m.key), 0)) AS bytes
    FROM {schema}.messages m
    WHERE m.topic_id = p.topic_id AND m.partition = p.partition
) s ON true
WHERE p.topic_id = %(topic_id)s
ORDER BY p.partition;

-- name: lock_topic_partitions
-- Locks a topic's counter rows (FOR UPDATE, ascending, as writers do) before delete_topic: waits
-- for in-flight writers, and blocks new ones until the delete commits (they then find no row).
SELECT p.partition FROM {schema}.partitions p JOIN {schema}.topics t ON t.id = p.topic_id
WHERE t.name = %(name)s
ORDER BY p.partition
FOR UPDATE OF p;

-- name: delete_topic
-- Deletes a topic and its messages; counter rows and cursors go with the topic (ON DELETE
-- CASCADE). Run after lock_topic_partitions in the same transaction, so this statement's
-- snapshot already sees every message written to the topic (messages have no foreign key).
WITH topic AS (
    DELETE FROM {schema}.topics WHERE name = %(name)s RETURNING id
), dropped AS (
    DELETE FROM {schema}.messages m USING topic t WHERE m.topic_id = t.id
)
SELECT id FROM topic;

-- name: lock_topic
-- Locks the topic row (FOR UPDATE) so concurrent add_partitions calls run one at a time.
SELECT id, partitions FROM {schema}.topics WHERE name = %(name)s FOR UPDATE;

-- name: add_partitions
-- Raises the topic's partition count and creates the new counter rows (topic row locked first).
WITH grown AS (
    UPDATE {schema}.topics SET partitions = %(total)s WHERE id = %(topic_id)s
)
INSERT INTO {schema}.partitions (topic_id, partition, max_lag)
SELECT %(topic_id)s, p, (SELECT t.max_lag FROM {schema}.topics t WHERE t.id = %(topic_id)s)
FROM generate_series(%(current)s::integer, %(total)s::integer - 1) AS p;

-- name: alter_topic
-- Sets a topic's max_lag, group_ttl and retention (NULL: off / the default / keep every
-- message) on the topic row, and max_lag on its counter rows (row locks on both; waits for
-- writers in flight on the topic). Returns the id.
WITH topic AS (
    UPDATE {schema}.topics SET max_lag = %(max_lag)s, group_ttl = %(group_ttl)s::interval,
                               retention = %(retention)s::interval
    WHERE name = %(name)s RETURNING id
), counters AS (
    UPDATE {schema}.partitions p SET max_lag = %(max_lag)s FROM topic WHERE p.topic_id = topic.id
)
SELECT id FROM topic;

-- name: topic_limits
-- A topic's max_lag, group_ttl and retention (no locks).
SELECT max_lag, group_ttl, retention FROM {schema}.topics WHERE name = %(name)s;

-- name: reserve_offsets
-- Reserves the given count of offsets on each given partition for this transaction and returns the first
-- of each range (SQL function reserve_offsets, migration 0003: counter rows locked FOR UPDATE in
-- ascending (topic_id, partition) order until the transaction ends, which orders writers by
-- commit). The messages are then copied in at those offsets (copy_messages) in the same
-- transaction; a trigger refuses rows outside the reserved ranges. A partition missing from the
-- result was deleted. Sends the consumers' wake-up hint, delivered at commit.
SELECT topic_id, partition, first_offset
FROM {schema}.reserve_offsets(%(topic_ids)s::integer[], %(partitions)s::integer[],
                              %(counts)s::bigint[]);

-- name: stage_messages
-- Stages messages in the caller's transaction, message i to partition %(partitions)s[i] of topic
-- %(topic_ids)s[i] (SQL function stage_messages, migration 0017: no locks; refuses a missing
-- partition (no_data_found) and a full backlog (PRB01) at once). They are written to the log
-- when that transaction commits: counter rows locked then, ascending, offsets in call order.
-- Binary parameters: a bytea[] sent as text costs ~6 us a value to escape (10,000 values: 60 ms).
SELECT {schema}.stage_messages(%(topic_ids)b::integer[], %(partitions)b::integer[],
                               %(keys)b::bytea[], %(values)b::bytea[], %(headers)b::jsonb[]);

-- name: copy_messages
-- Binary COPY of messages at offsets reserved by reserve_offsets in the same transaction:
-- cheaper per row than INSERT ... SELECT FROM unnest (no array building or function scan).
COPY {schema}.messages (topic_id, partition, "offset", key, value, headers)
FROM STDIN (FORMAT BINARY);

-- name: high_water
-- The next offset to be written in one partition (no locks).
SELECT next_offset FROM {schema}.partitions
WHERE topic_id = %(topic_id)s AND partition = %(partition)s;

-- name: ensure_cursors
-- Creates missing cursors of a group at the earliest retained or the latest offset, a partition
-- new to a group that reads its topic at the earliest (SQL function ensure_cursors, migrations
-- 0003 and 0004: inserts only, no waits on cursors other members advance).
SELECT {schema}.ensure_cursors(%(group)s, %(topic_ids)s::integer[], %(partitions)s::integer[],
                               %(reset)s);

-- name: read_cursors
-- A group's committed next offsets for the given partitions (no locks).
SELECT c.topic_id, c.partition, c.next_offset
FROM unnest(%(topic_ids)s::integer[], %(partitions)s::integer[]) AS a(topic_id, partition)
JOIN {schema}.cursors c
  ON c.group_name = %(group)s AND c.topic_id = a.topic_id AND c.partition = a.partition;

-- name: fetch_messages
-- Up to %(limit)s messages in all from the given positions on, partitions in the given order and
-- offsets in order within each, stopping once %(max_bytes)s of keys and values are reached (the
-- first message always comes) (no locks). A reader can never see offset n+1 without n: a
-- writer's rows become visible at its commit, and the next writer only reserves offsets after
-- that commit released the counter row lock.
-- A plain range read: the nested loop over the positions (WITH ORDINALITY: ordered by ord) and
-- each partition's index scan (ordered by offset) yields (ord, offset) order with no sort, and
-- LIMIT stops it. The limit is computed first (an InitPlan, same snapshot): a narrow pass sums
-- the keys and values of the next %(limit)s messages; if they fit in %(max_bytes)s (the common
-- case) it is %(limit)s, else the count of them that fit (at least 1), by a running sum in that
-- pass, evaluated only then. A sort and a window over the rows themselves cost 2.5x per row
-- (bench/RESULTS.md). tests/log/test_log_fetch.py checks the plan's shape.
SELECT a.topic_id, a.partition, m."offset", m.key, m.value, m.headers, m.created_at
FROM unnest(%(topic_ids)s::integer[], %(partitions)s::integer[],
            %(positions)s::bigint[]) WITH ORDINALITY AS a(topic_id, partition, position, ord)
CROSS JOIN LATERAL (
    SELECT m."offset", m.key, m.value, m.headers, m.created_at
    FROM {schema}.messages m
    WHERE m.topic_id = a.topic_id AND m.partition = a.partition AND m."offset" >= a.position
    ORDER BY m."offset"
    LIMIT %(limit)s
) m
ORDER BY a.ord
LIMIT (
    SELECT CASE WHEN coalesce(sum(s.size), 0) <= %(max_bytes)s THEN %(limit)s::bigint ELSE (
        SELECT greatest(count(*) FILTER (WHERE c.total <= %(max_bytes)s), 1)
        FROM (
            SELECT sum(r.size) OVER (ORDER BY r.ord, r."offset" ROWS UNBOUNDED PRECEDING)
                   AS total
            FROM (
                SELECT a.ord, m."offset",
                       octet_length(m.value) + coalesce(octet_length(m.key), 0) AS size
                FROM unnest(%(topic_ids)s::integer[], %(partitions)s::integer[],
                            %(positions)s::bigint[])
                     WITH ORDINALITY AS a(topic_id, partition, position, ord)
                CROSS JOIN LATERAL (
                    SELECT m."offset", m.key, m.value
                    FROM {schema}.messages m
                    WHERE m.topic_id = a.topic_id AND m.partition = a.partition
                      AND m."offset" >= a.position
                    ORDER BY m."offset"
                    LIMIT %(limit)s
                ) m
                ORDER BY a.ord, m."offset"
                LIMIT %(limit)s
            ) r
        ) c
    ) END
    FROM (
        SELECT octet_length(m.value) + coalesce(octet_length(m.key), 0) AS size
        FROM unnest(%(topic_ids)s::integer[], %(partitions)s::integer[],
                    %(positions)s::bigint[]) AS a(topic_id, partition, position)
        CROSS JOIN LATERAL (
            SELECT m.key, m.value
            FROM {schema}.messages m
            WHERE m.topic_id = a.topic_id AND m.partition = a.partition
              AND m."offset" >= a.position
            ORDER BY m."offset"
            LIMIT %(limit)s
        ) m
        LIMIT %(limit)s
    ) s
);

-- name: reset_cursors
-- Sets a group's cursors on one topic (optionally one partition) to earliest, latest, an offset
-- or the first offset at or after a time; creates missing cursors. Explicit, so it may go back.
INSERT INTO {schema}.cursors AS c (group_name, topic_id, partition, next_offset)
SELECT %(group)s, p.topic_id, p.partition,
       CASE %(mode)s
           WHEN 'latest' THEN p.next_offset
           WHEN 'offset' THEN %(offset)s::bigint
           WHEN 'timestamp' THEN coalesce(
               (SELECT min(m."offset") FROM {schema}.messages m
                WHERE m.topic_id = p.topic_id AND m.partition = p.partition
                  AND m.created_at >= %(timestamp)s::timestamptz),
               p.next_offset)
           ELSE coalesce(
               (SELECT min(m."offset") FROM {schema}.messages m
                WHERE m.topic_id = p.topic_id AND m.partition = p.partition),
               p.next_offset)
       END
FROM {schema}.partitions p
WHERE p.topic_id = %(topic_id)s
  AND (%(partition)s::integer IS NULL OR p.partition = %(partition)s::integer)
ORDER BY p.partition
ON CONFLICT (group_name, topic_id, partition)
DO UPDATE SET next_offset = excluded.next_offset, updated_at = now()
RETURNING c.partition, c.next_offset;

-- name: partition_high_waters
-- High-water marks of every partition of a topic (no locks).
SELECT partition, next_offset FROM {schema}.partitions
WHERE topic_id = %(topic_id)s ORDER BY partition;

-- name: list_groups
-- Every group with the topics it reads, its total lag (from its cursor or the low-water mark,
-- whichever is higher: see describe_group), last commit, live members, and state:
-- active (live members), idle (none), expired (not active on any of its topics: no member and no
-- commit within the topic's group_ttl, else %(expiry)s; it holds back neither retention nor
-- admission) (no locks).
SELECT c.group_name, array_agg(DISTINCT t.name ORDER BY t.name) AS topics,
       sum(greatest(p.next_offset - greatest(c.next_offset, low.low_water), 0))::bigint AS lag,
       max(c.updated_at) AS updated_at,
       coalesce(live.n, 0)::integer AS members,
       CASE WHEN coalesce(live.n, 0) > 0 THEN 'active'
            WHEN NOT bool_or({schema}._group_active(c.group_name, c.updated_at,
                                                    coalesce(t.group_ttl, %(expiry)s::interval)))
                 THEN 'expired'
            ELSE 'idle' END AS state
FROM {schema}.cursors c
JOIN {schema}.partitions p ON p.topic_id = c.topic_id AND p.partition = c.partition
JOIN {schema}.topics t ON t.id = c.topic_id
CROSS JOIN LATERAL (
    SELECT coalesce(min(m."offset"), p.next_offset) AS low_water FROM {schema}.messages m
    WHERE m.topic_id = p.topic_id AND m.partition = p.partition
) low
LEFT JOIN (SELECT m.group_name, count(*) AS n FROM {schema}.members m
           WHERE m.expires_at > now() GROUP BY m.group_name) live
  ON live.group_name = c.group_name
GROUP BY c.group_name, live.n
ORDER BY c.group_name;

-- name: expired_groups
-- Groups expired on some topic with a retention (see list_groups), with that topic and their
-- last commit: what apply_retention logs as no longer holding the log back (no locks).
SELECT c.group_name, t.name, max(c.updated_at)
FROM {schema}.cursors c JOIN {schema}.topics t ON t.id = c.topic_id
WHERE t.retention IS NOT NULL
GROUP BY c.group_name, t.name, t.group_ttl
HAVING NOT bool_or({schema}._group_active(c.group_name, c.updated_at,
                                          coalesce(t.group_ttl, %(expiry)s::interval)))
ORDER BY c.group_name, t.name;

-- name: describe_group
-- Per partition a group reads: committed offset, high-water mark, lag in messages, lag in seconds
-- (age of the oldest unread retained message), the live member holding it with its fencing
-- epoch, and the messages lost: deleted by retention before the group read them (its cursor is
-- below the low-water mark; the next member to take the partition moves it up, migration 0022).
-- Lag counts from the committed offset or the low-water mark, whichever is higher (no locks).
SELECT t.name AS topic, c.partition, c.next_offset AS committed, p.next_offset AS high_water,
       greatest(p.next_offset - greatest(c.next_offset, low.low_water), 0) AS lag,
       coalesce(extract(epoch FROM now() - (
           SELECT m.created_at FROM {schema}.messages m
           WHERE m.topic_id = c.topic_id AND m.partition = c.partition
             AND m."offset" >= c.next_offset
           ORDER BY m."offset" LIMIT 1)), 0)::float8 AS lag_seconds,
       c.updated_at, holder.owner AS member, holder.epoch,
       greatest(low.low_water - c.next_offset, 0) AS lost
FROM {schema}.cursors c
JOIN {schema}.partitions p ON p.topic_id = c.topic_id AND p.partition = c.partition
JOIN {schema}.topics t ON t.id = c.topic_id
CROSS JOIN LATERAL (
    SELECT coalesce(min(m."offset"), p.next_offset) AS low_water FROM {schema}.messages m
    WHERE m.topic_id = p.topic_id AND m.partition = p.partition
) low
LEFT JOIN LATERAL (
    SELECT l.owner, l.epoch FROM {schema}.leases l
    JOIN {schema}.members mb
      ON mb.group_name = l.group_name AND mb.member_id = l.owner AND mb.expires_at > now()
    WHERE l.group_name = c.group_name AND l.topic_id = c.topic_id AND l.partition = c.partition
) holder ON true
WHERE c.group_name = %(group)s
ORDER BY t.name, c.partition;

-- name: delete_group
-- Deletes every cursor of a group.
DELETE FROM {schema}.cursors WHERE group_name = %(group)s;

-- name: apply_retention
-- Deletes, in every partition of the topics that have a retention, up to the batch size of the
-- oldest messages that are both older than the retention and read by every active group (the
-- given group expiry for groups without a topic group_ttl); expired groups do not pin the log.
-- SQL function expire_messages (migration 0011: linear, row locks on the deleted messages only,
-- writers not blocked). Returns the count.
SELECT {schema}.expire_messages(%(group_expiry)s::interval, %(batch)s::integer);

-- name: run_retention
-- Retention with the defaults, for the retention runner: apply_retention with a group expiry
-- of 7 days and batches of 10,000 per partition (SQL function run_retention, migration 0011,
-- granted to producers and consumers). Returns the count deleted.
SELECT {schema}.run_retention();

-- name: try_retention_lock
-- Elects the retention runner of this round: a session advisory lock keyed by the schema (try,
-- no wait); false if another process holds it.
SELECT pg_try_advisory_lock(hashtext('postroom.retention-runner'), hashtext(%(schema)s));

-- name: retention_unlock
-- Releases the retention runner's session advisory lock.
SELECT pg_advisory_unlock(hashtext('postroom.retention-runner'), hashtext(%(schema)s));

-- name: may_vacuum_messages
-- Whether this role owns messages (VACUUM by anyone else is skipped with a warning).
SELECT pg_has_role(current_user, relowner, 'USAGE') FROM pg_class
WHERE oid = '{schema}.messages'::regclass;

-- name: flush_statistics
-- Makes this session send its pending table statistics now, not up to a second later (PG15+,
-- no locks): sent after the VACUUM they would count the rows it removed as dead again.
SELECT pg_stat_force_next_flush();

-- name: vacuum_staged
-- Vacuums staged_messages, where every message published in a caller's transaction leaves a
-- dead row (SHARE UPDATE EXCLUSIVE: writers go on meanwhile).
VACUUM {schema}.staged_messages;

-- name: vacuum_messages
-- Vacuums messages after retention deleted rows, whatever autovacuum does (SHARE UPDATE
-- EXCLUSIVE: writers and readers go on meanwhile).
VACUUM {schema}.messages;

-- name: log_dead_tuples
-- Dead and live row estimates of the log's small hot tables (counters, cursors, group state)
-- and of the dashboard's ring of samples, from the statistics views (no locks): each update of
-- a counter, a cursor or a sample's slot leaves a dead row.
SELECT c.relname, coalesce(s.n_dead_tup, 0), coalesce(s.n_live_tup, 0)
FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
WHERE c.oid IN ('{schema}.partitions'::regclass, '{schema}.cursors'::regclass,
                '{schema}.groups'::regclass, '{schema}.members'::regclass,
                '{schema}.leases'::regclass, '{schema}.group_activity'::regclass,
                '{schema}.web_samples'::regclass)
ORDER BY c.relname;

-- name: vacuum_partitions
-- Vacuums the counter rows (SHARE UPDATE EXCLUSIVE: writers go on meanwhile).
VACUUM {schema}.partitions;

-- name: vacuum_cursors
-- Vacuums the group cursors (SHARE UPDATE EXCLUSIVE: commits go on meanwhile).
VACUUM {schema}.cursors;

-- name: vacuum_groups
-- Vacuums the group rows (SHARE UPDATE EXCLUSIVE).
VACUUM {schema}.groups;

-- name: vacuum_members
-- Vacuums the member sessions, updated by every heartbeat (SHARE UPDATE EXCLUSIVE).
VACUUM {schema}.members;

-- name: vacuum_leases
-- Vacuums the partition leases (SHARE UPDATE EXCLUSIVE).
VACUUM {schema}.leases;

-- name: vacuum_group_activity
-- Vacuums the groups' activity marks (SHARE UPDATE EXCLUSIVE).
VACUUM {schema}.group_activity;

-- name: vacuum_web_samples
-- Vacuums the dashboard's ring of samples (migration 0036), whose overwrites are HOT updates
-- pruned in place but for the few a long transaction elsewhere kept from it (SHARE UPDATE
-- EXCLUSIVE: samplers and charts go on).
VACUUM {schema}.web_samples;
