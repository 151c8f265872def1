-- postroom migration 0022: a cursor below its partition's low-water mark no longer wedges it
-- (issue 23, items 7 and 12). `{schema}` is replaced by the quoted schema identifier; literal
-- braces are doubled.
--
-- Retention deletes what an expired group has not read (it holds nothing back). When such a
-- group came back, its cursor stayed below the low-water mark: with every message behind it
-- gone, no fetch or claim ever moved it, its lag counted the deleted messages for ever, and on
-- a topic with max_lag every write was refused until someone reset the group. Now, as Kafka's
-- auto.offset.reset does for an out-of-range offset (earliest):
--   * a consumer's cursors are moved up to the low-water mark as it takes its partitions
--     (ensure_cursors, which every consumer runs before it fetches or claims);
--   * lag counts from the low-water mark, and what the group missed is reported as lost
--     (lag(), and the describe_group / list_groups queries);
--   * admission (max_lag) counts the slowest group from max(cursor, low-water mark).
-- And partition_for_key refuses a partition count below 1 by name (it divided by zero at 0 and
-- returned a partition of a negative count).

-- Creates the missing cursors of a group (as in 0004), then moves those of the given
-- partitions that are below the low-water mark up to it (the messages in between were deleted
-- by retention: nothing is skipped that could still be read). Row locks on the moved cursors,
-- SKIP LOCKED: a cursor locked by a claim in flight is left for the next call.
CREATE OR REPLACE FUNCTION {schema}.ensure_cursors(group_name text, topic_ids integer[],
                                                   partitions integer[], reset text)
RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    INSERT INTO {schema}.cursors (group_name, topic_id, partition, next_offset)
    SELECT ensure_cursors.group_name, p.topic_id, p.partition,
           CASE WHEN reset = 'latest' AND NOT EXISTS (
                    SELECT FROM {schema}.cursors k
                    WHERE k.group_name = ensure_cursors.group_name AND k.topic_id = p.topic_id)
                THEN p.next_offset
                ELSE coalesce((SELECT min(m."offset") FROM {schema}.messages m
                               WHERE m.topic_id = p.topic_id AND m.partition = p.partition),
                              p.next_offset)
           END
    FROM unnest(topic_ids, partitions) AS a(topic_id, partition)
    JOIN {schema}.partitions p ON p.topic_id = a.topic_id AND p.partition = a.partition
    WHERE NOT EXISTS (
        SELECT FROM {schema}.cursors c
        WHERE c.group_name = ensure_cursors.group_name
          AND c.topic_id = p.topic_id AND c.partition = p.partition
    )
    ORDER BY p.topic_id, p.partition
    ON CONFLICT DO NOTHING;
    WITH low AS MATERIALIZED (
        SELECT p.topic_id, p.partition,
               coalesce((SELECT min(m."offset") FROM {schema}.messages m
                         WHERE m.topic_id = p.topic_id AND m.partition = p.partition),
                        p.next_offset) AS low_water
        FROM unnest(topic_ids, partitions) AS a(topic_id, partition)
        JOIN {schema}.partitions p ON p.topic_id = a.topic_id AND p.partition = a.partition
    ), behind AS (
        SELECT c.topic_id, c.partition, low.low_water
        FROM {schema}.cursors c
        JOIN low ON c.topic_id = low.topic_id AND c.partition = low.partition
        WHERE c.group_name = ensure_cursors.group_name AND c.next_offset < low.low_water
        ORDER BY c.topic_id, c.partition
        FOR UPDATE OF c SKIP LOCKED
    )
    UPDATE {schema}.cursors c SET next_offset = behind.low_water, updated_at = now()
    FROM behind
    WHERE c.group_name = ensure_cursors.group_name AND c.topic_id = behind.topic_id
      AND c.partition = behind.partition AND c.next_offset < behind.low_water;
$$;

-- p_group's lag per partition of p_topic: committed offset, high-water mark, and lag counted
-- from the committed offset or the low-water mark, whichever is higher (messages deleted by
-- retention before the group read them are lost, not lag) (no locks).
CREATE OR REPLACE FUNCTION {schema}.lag(p_group text, p_topic text)
RETURNS TABLE (partition integer, committed bigint, high_water bigint, lag bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT p.partition, c.next_offset, p.next_offset,
           greatest(p.next_offset - greatest(coalesce(c.next_offset, 0), coalesce(
               (SELECT min(m."offset") FROM {schema}.messages m
                WHERE m.topic_id = p.topic_id AND m.partition = p.partition),
               p.next_offset)), 0)
    FROM {schema}.partitions p
    LEFT JOIN {schema}.cursors c
      ON c.group_name = p_group AND c.topic_id = p.topic_id AND c.partition = p.partition
    WHERE p.topic_id = {schema}._topic_id(p_topic)
    ORDER BY p.partition;
$$;

-- Admission control (as in 0009), the slowest active group counted from its cursor or the
-- partition's low-water mark, whichever is higher: a group whose unread messages retention
-- deleted is not behind by them. The low-water mark is looked up only for a group found behind
-- by its cursor (the fast path reads no messages).
CREATE OR REPLACE FUNCTION {schema}._admit_write() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    t record;
    slowest record;
    low_water bigint;
BEGIN
    SELECT tp.name, coalesce(tp.group_ttl, interval '7 days') AS ttl INTO t
    FROM {schema}.topics tp WHERE tp.id = NEW.topic_id;
    SELECT c.group_name, c.next_offset INTO slowest
    FROM {schema}.cursors c
    WHERE c.topic_id = NEW.topic_id AND c.partition = NEW.partition
      AND c.next_offset <= OLD.next_offset - NEW.max_lag
      AND {schema}._group_active(c.group_name, c.updated_at, t.ttl)
    ORDER BY c.next_offset
    LIMIT 1;
    IF NOT FOUND THEN
        RETURN NEW;
    END IF;
    SELECT coalesce(min(m."offset"), OLD.next_offset) INTO low_water
    FROM {schema}.messages m
    WHERE m.topic_id = NEW.topic_id AND m.partition = NEW.partition;
    IF low_water > slowest.next_offset THEN
        -- Every group below the low-water mark is behind by the same count from it.
        IF low_water > OLD.next_offset - NEW.max_lag THEN
            RETURN NEW;
        END IF;
        slowest.next_offset := low_water;
    END IF;
    RAISE EXCEPTION 'backlog full on topic % partition %: group % is % messages behind '
                    '(max_lag %)', quote_literal(t.name), NEW.partition,
                    quote_literal(slowest.group_name), OLD.next_offset - slowest.next_offset,
                    NEW.max_lag
        USING ERRCODE = 'PRB01';
END;
$$;

-- Raises invalid_parameter_value for a partition count below 1 (partition_for_key's guard,
-- in a function of its own so that partition_for_key stays a single inlinable expression).
CREATE FUNCTION {schema}._invalid_partition_count(partitions integer) RETURNS integer
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RAISE EXCEPTION 'invalid partition count %: a topic has at least 1 partition', partitions
        USING ERRCODE = 'invalid_parameter_value';
END;
$$;

CREATE OR REPLACE FUNCTION {schema}.partition_for_key(key bytea, partitions integer)
RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN CASE WHEN partitions >= 1
            THEN ({schema}.murmur2(key) & 2147483647) % partitions
            ELSE {schema}._invalid_partition_count(partitions) END;
