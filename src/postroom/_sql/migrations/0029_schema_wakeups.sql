-- Wake-ups scoped by schema (issue 16): the log's and the groups' notifications carry the
-- schema as the queue's always did, as "<schema>:<what>" (postroom/_wakeups.py), so two
-- postroom schemas in one database never wake each other's consumers and group members. Only
-- the payloads change: the functions are otherwise those of migrations 0004, 0018, 0020-0027.

CREATE OR REPLACE FUNCTION {schema}.group_assign(p_group text, p_members text[], p_topic_ids integer[], p_partitions integer[], p_targets text[]) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    new_generation bigint;

BEGIN
    IF group_assign.p_group IS NULL THEN
        RAISE EXCEPTION 'group_assign(): argument p_group must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF group_assign.p_members IS NULL THEN
        RAISE EXCEPTION 'group_assign(): argument p_members must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF group_assign.p_topic_ids IS NULL THEN
        RAISE EXCEPTION 'group_assign(): argument p_topic_ids must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF group_assign.p_partitions IS NULL THEN
        RAISE EXCEPTION 'group_assign(): argument p_partitions must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF group_assign.p_targets IS NULL THEN
        RAISE EXCEPTION 'group_assign(): argument p_targets must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    DELETE FROM {schema}.leases l
    USING (SELECT x.topic_id, x.partition FROM {schema}.leases x
           WHERE x.group_name = p_group
             AND NOT EXISTS (SELECT FROM unnest(p_topic_ids, p_partitions) AS a(topic_id, partition)
                             WHERE a.topic_id = x.topic_id AND a.partition = x.partition)
           FOR UPDATE SKIP LOCKED) gone
    WHERE l.group_name = p_group AND l.topic_id = gone.topic_id AND l.partition = gone.partition;
    UPDATE {schema}.leases l SET target = moved.target
    FROM (SELECT x.topic_id, x.partition, a.target
          FROM unnest(p_topic_ids, p_partitions, p_targets) AS a(topic_id, partition, target)
          JOIN {schema}.leases x
            ON x.group_name = p_group AND x.topic_id = a.topic_id AND x.partition = a.partition
          WHERE x.target IS DISTINCT FROM a.target
          ORDER BY x.topic_id, x.partition
          FOR UPDATE OF x SKIP LOCKED) moved
    WHERE l.group_name = p_group AND l.topic_id = moved.topic_id
      AND l.partition = moved.partition;
    INSERT INTO {schema}.leases (group_name, topic_id, partition, target, epoch)
    SELECT p_group, a.topic_id, a.partition, a.target, nextval('{schema}.lease_epochs')
    FROM unnest(p_topic_ids, p_partitions, p_targets) AS a(topic_id, partition, target)
    ORDER BY a.topic_id, a.partition
    ON CONFLICT (group_name, topic_id, partition) DO NOTHING;
    PERFORM pg_notify('postroom_groups', '{schema}:' || p_group);
    IF EXISTS (SELECT FROM {schema}.leases x
               LEFT JOIN unnest(p_topic_ids, p_partitions, p_targets) AS a(topic_id, partition, target)
                 ON a.topic_id = x.topic_id AND a.partition = x.partition
               WHERE x.group_name = p_group AND x.target IS DISTINCT FROM a.target) THEN
        RETURN NULL;  -- some lease was busy: the next heartbeat finishes the rebalance
    END IF;
    UPDATE {schema}.groups g
    SET members = (SELECT coalesce(array_agg(x ORDER BY x), '{{}}') FROM unnest(p_members) x),
        generation = g.generation + 1
    WHERE g.group_name = p_group
    RETURNING g.generation INTO new_generation;
    RETURN new_generation;

END;

$$;

CREATE OR REPLACE FUNCTION {schema}.group_leave(p_group text, p_member text, p_topic_ids integer[], p_partitions integer[], p_epochs bigint[], p_instance text DEFAULT NULL::text) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    IF {schema}._instance_fenced(p_group, p_member, p_instance) THEN
        RETURN;
    END IF;
    PERFORM {schema}.group_release(p_group, p_member, p_topic_ids, p_partitions, p_epochs,
                                   p_instance);
    DELETE FROM {schema}.members m
    WHERE m.group_name = p_group AND m.member_id = p_member
      AND (p_instance IS NULL OR m.instance IS NOT DISTINCT FROM p_instance)
      AND NOT EXISTS (SELECT FROM {schema}.leases l
                      WHERE l.group_name = p_group AND l.owner = p_member);
    PERFORM pg_notify('postroom_groups', '{schema}:' || p_group);

END;

$$;

CREATE OR REPLACE FUNCTION {schema}.group_release(p_group text, p_member text, p_topic_ids integer[], p_partitions integer[], p_epochs bigint[], p_instance text DEFAULT NULL::text) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    released integer;

BEGIN
    IF {schema}._instance_fenced(p_group, p_member, p_instance) THEN
        RETURN 0;
    END IF;
    PERFORM {schema}._guard_idle(p_group, p_member);
    UPDATE {schema}.leases l SET owner = NULL
    FROM unnest(p_topic_ids, p_partitions, p_epochs) AS a(topic_id, partition, epoch)
    WHERE l.group_name = p_group AND l.owner = p_member AND l.topic_id = a.topic_id
      AND l.partition = a.partition AND l.epoch = a.epoch;
    GET DIAGNOSTICS released = ROW_COUNT;
    IF released > 0 THEN
        PERFORM pg_notify('postroom_groups', '{schema}:' || p_group);
    END IF;
    RETURN released;

END;

$$;

CREATE OR REPLACE FUNCTION {schema}.reserve_offsets(topic_ids integer[], partitions integer[], counts bigint[]) RETURNS TABLE(topic_id integer, partition integer, first_offset bigint)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
#variable_conflict use_column
BEGIN
    IF topic_ids IS NULL OR partitions IS NULL OR counts IS NULL
       OR cardinality(topic_ids) <> cardinality(partitions)
       OR cardinality(topic_ids) <> cardinality(counts)
       OR EXISTS (SELECT FROM unnest(counts) AS c(n) WHERE n IS NULL OR n < 1 OR n > 10000000)
    THEN
        RAISE EXCEPTION 'reserve_offsets: topic_ids, partitions and counts must be arrays of '
                        'one length, each count from 1 to 10000000'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM pg_notify('postroom', '{schema}:' || d.id::text)
    FROM (SELECT DISTINCT t AS id FROM unnest(topic_ids) AS t) AS d;
    RETURN QUERY
    WITH wanted AS (
        SELECT a.topic_id, a.partition, a.n
        FROM unnest(topic_ids, partitions, counts) AS a(topic_id, partition, n)
    ), locked AS (
        SELECT p.topic_id, p.partition
        FROM {schema}.partitions p
        JOIN wanted w ON w.topic_id = p.topic_id AND w.partition = p.partition
        ORDER BY p.topic_id, p.partition
        FOR UPDATE OF p
    ), reserved AS (
        UPDATE {schema}.partitions p
        SET next_offset = p.next_offset + w.n  -- partitions_note_reservation records it
        FROM locked l, wanted w
        WHERE p.topic_id = l.topic_id AND p.partition = l.partition
          AND w.topic_id = l.topic_id AND w.partition = l.partition
        RETURNING p.topic_id, p.partition, p.next_offset - w.n AS first_offset
    )
    SELECT r.topic_id, r.partition, r.first_offset FROM reserved r
    ORDER BY r.topic_id, r.partition;

END;

$$;
