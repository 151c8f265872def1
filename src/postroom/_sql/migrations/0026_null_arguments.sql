-- A NULL argument to a public SQL function is refused by the function itself, naming the
-- argument, with SQLSTATE 22004 (null_value_not_allowed), instead of a NOT NULL or foreign key
-- violation on the table it writes (issue 23, item 12). Each function below is its latest
-- definition (0025) with the checks added at the top and nothing else changed.

CREATE FUNCTION {schema}._null_argument(fn text, arg text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RAISE EXCEPTION '%(): argument % must not be NULL', fn, arg
        USING ERRCODE = 'null_value_not_allowed';
END;
$$;

REVOKE ALL ON FUNCTION {schema}._null_argument(text, text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION {schema}.claim_dead_letter(p_group text, p_message_id text) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    claimed boolean;

BEGIN
    IF claim_dead_letter.p_group IS NULL THEN
        RAISE EXCEPTION 'claim_dead_letter(): argument p_group must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF claim_dead_letter.p_message_id IS NULL THEN
        RAISE EXCEPTION 'claim_dead_letter(): argument p_message_id must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    DELETE FROM {schema}.dead_letter_claims d WHERE d.claimed_at < now() - interval '1 day';
    INSERT INTO {schema}.dead_letter_claims (group_name, message_id)
    VALUES (p_group, p_message_id)
    ON CONFLICT DO NOTHING
    RETURNING true INTO claimed;
    RETURN coalesce(claimed, false);

END;

$$;

CREATE OR REPLACE FUNCTION {schema}.claim_batch(p_group text, p_member text, p_topic_ids integer[], p_partitions integer[], p_epochs bigint[], p_limit integer, p_instance text DEFAULT NULL::text) RETURNS TABLE(topic_id integer, partition integer, "offset" bigint, key bytea, value bytea, headers jsonb, created_at timestamp with time zone)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    chosen record;
    lost record;

BEGIN
    IF claim_batch.p_group IS NULL THEN
        RAISE EXCEPTION 'claim_batch(): argument p_group must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF p_member IS NOT NULL THEN
        IF {schema}._instance_fenced(p_group, p_member, p_instance) THEN
            PERFORM {schema}._refuse_instance(p_group, p_member, 'claim');
        END IF;
        PERFORM {schema}._guard_idle(p_group, p_member);
        SELECT a.topic_id, a.partition INTO lost
        FROM unnest(p_topic_ids, p_partitions, p_epochs) AS a(topic_id, partition, epoch)
        LEFT JOIN (SELECT l.topic_id, l.partition, l.epoch FROM {schema}.leases l
                   WHERE l.group_name = p_group AND l.owner = p_member
                     AND l.topic_id = ANY(p_topic_ids)
                   ORDER BY l.topic_id, l.partition
                   FOR SHARE) held
          ON held.topic_id = a.topic_id AND held.partition = a.partition
             AND held.epoch = a.epoch
        WHERE held.topic_id IS NULL OR NOT {schema}._member_live(p_group, p_member)
        LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'member % of group % no longer holds partition % of topic id % '
                            '(session expired or handed over): claim refused',
                quote_literal(p_member), quote_literal(p_group), lost.partition, lost.topic_id
                USING ERRCODE = 'PRF01';
        END IF;
    END IF;
    -- Cursors deleted under running members (delete_group) start again at the earliest.
    INSERT INTO {schema}.cursors (group_name, topic_id, partition, next_offset)
    SELECT p_group, p.topic_id, p.partition,
           coalesce((SELECT min(m."offset") FROM {schema}.messages m
                     WHERE m.topic_id = p.topic_id AND m.partition = p.partition),
                    p.next_offset)
    FROM unnest(p_topic_ids, p_partitions) AS a(topic_id, partition)
    JOIN {schema}.partitions p ON p.topic_id = a.topic_id AND p.partition = a.partition
    WHERE NOT EXISTS (SELECT FROM {schema}.cursors c
                      WHERE c.group_name = p_group AND c.topic_id = p.topic_id
                        AND c.partition = p.partition)
    ORDER BY p.topic_id, p.partition
    ON CONFLICT DO NOTHING;
    SELECT c.topic_id, c.partition, c.next_offset INTO chosen
    FROM unnest(p_topic_ids, p_partitions) WITH ORDINALITY AS a(topic_id, partition, ord)
    JOIN {schema}.cursors c
      ON c.group_name = p_group AND c.topic_id = a.topic_id AND c.partition = a.partition
    JOIN {schema}.partitions p ON p.topic_id = c.topic_id AND p.partition = c.partition
    WHERE c.next_offset < p.next_offset
      AND (p_member IS NOT NULL OR NOT EXISTS (
              SELECT FROM {schema}.leases l
              WHERE l.group_name = p_group AND l.topic_id = c.topic_id
                AND l.partition = c.partition AND {schema}._member_live(p_group, l.owner)))
    ORDER BY a.ord
    LIMIT 1
    FOR UPDATE OF c SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    RETURN QUERY
    WITH batch AS (
        SELECT m.topic_id, m.partition, m."offset", m.key, m.value, m.headers, m.created_at
        FROM {schema}.messages m
        WHERE m.topic_id = chosen.topic_id AND m.partition = chosen.partition
          AND m."offset" >= chosen.next_offset
        ORDER BY m."offset"
        LIMIT p_limit
    ), advanced AS (
        UPDATE {schema}.cursors c SET next_offset = (SELECT max(b."offset") + 1 FROM batch b),
                                      updated_at = now()
        WHERE c.group_name = p_group AND c.topic_id = chosen.topic_id
          AND c.partition = chosen.partition AND EXISTS (SELECT FROM batch)
    )
    SELECT b.topic_id, b.partition, b."offset", b.key, b.value, b.headers, b.created_at
    FROM batch b ORDER BY b."offset";

END;

$$;

CREATE OR REPLACE FUNCTION {schema}.commit_offsets(p_group text, p_member text, p_topic_ids integer[], p_partitions integer[], p_epochs bigint[], p_offsets bigint[], p_instance text DEFAULT NULL::text) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    bad record;
    lost jsonb;
    stored integer;

BEGIN
    IF commit_offsets.p_group IS NULL THEN
        RAISE EXCEPTION 'commit_offsets(): argument p_group must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF commit_offsets.p_offsets IS NULL OR array_position(commit_offsets.p_offsets, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'commit_offsets(): argument p_offsets must not be NULL nor hold a NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    SELECT a.topic_id, a.partition, a.next_offset, p.next_offset AS high_water INTO bad
    FROM unnest(p_topic_ids, p_partitions, p_offsets) AS a(topic_id, partition, next_offset)
    LEFT JOIN {schema}.partitions p ON p.topic_id = a.topic_id AND p.partition = a.partition
    WHERE p.topic_id IS NULL OR a.next_offset > p.next_offset OR a.next_offset < 0
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'offset % is out of range for partition % of topic id %: allowed 0..%',
            bad.next_offset, bad.partition, bad.topic_id, coalesce(bad.high_water, 0)
            USING ERRCODE = 'PRO01';
    END IF;
    IF p_member IS NULL THEN
        SELECT l.topic_id, l.partition, l.owner INTO bad
        FROM unnest(p_topic_ids, p_partitions) AS a(topic_id, partition)
        JOIN {schema}.leases l
          ON l.group_name = p_group AND l.topic_id = a.topic_id AND l.partition = a.partition
        WHERE {schema}._member_live(p_group, l.owner)
        LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'partition % of topic id % is held by member % of group %: a '
                            'consumer with manual partitions cannot commit there',
                bad.partition, bad.topic_id, quote_literal(bad.owner), quote_literal(p_group)
                USING ERRCODE = 'PRF01';
        END IF;
    ELSE
        IF {schema}._instance_fenced(p_group, p_member, p_instance) THEN
            PERFORM {schema}._refuse_instance(p_group, p_member, 'commit');
        END IF;
        PERFORM {schema}._guard_idle(p_group, p_member);
        SELECT jsonb_agg(jsonb_build_array(a.topic_id, a.partition)
                         ORDER BY a.topic_id, a.partition) INTO lost
        FROM unnest(p_topic_ids, p_partitions, p_epochs) AS a(topic_id, partition, epoch)
        LEFT JOIN (SELECT l.topic_id, l.partition, l.epoch FROM {schema}.leases l
                   WHERE l.group_name = p_group AND l.owner = p_member
                     AND l.topic_id = ANY(p_topic_ids)
                   ORDER BY l.topic_id, l.partition
                   FOR SHARE) held
          ON held.topic_id = a.topic_id AND held.partition = a.partition
             AND held.epoch = a.epoch
        WHERE held.topic_id IS NULL OR NOT {schema}._member_live(p_group, p_member);
        IF lost IS NOT NULL THEN
            RAISE EXCEPTION 'member % of group % no longer holds partition % of topic id % '
                            '(session expired or handed over): commit refused',
                quote_literal(p_member), quote_literal(p_group), lost -> 0 ->> 1,
                lost -> 0 ->> 0
                USING ERRCODE = 'PRF01', DETAIL = lost::text;
        END IF;
    END IF;
    INSERT INTO {schema}.cursors AS c (group_name, topic_id, partition, next_offset)
    SELECT p_group, a.topic_id, a.partition, a.next_offset
    FROM unnest(p_topic_ids, p_partitions, p_offsets) AS a(topic_id, partition, next_offset)
    ORDER BY a.topic_id, a.partition
    ON CONFLICT (group_name, topic_id, partition) DO UPDATE
    SET next_offset = greatest(c.next_offset, excluded.next_offset), updated_at = now();
    GET DIAGNOSTICS stored = ROW_COUNT;
    RETURN stored;

END;

$$;

CREATE OR REPLACE FUNCTION {schema}.consume(p_group text, p_topic text, p_partition integer, p_limit integer DEFAULT 100) RETURNS TABLE("offset" bigint, key bytea, value bytea, headers jsonb, created_at timestamp with time zone)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    tid integer := {schema}._topic_id(p_topic);
    holder text;
    start_at bigint;

BEGIN
    IF consume.p_group IS NULL THEN
        RAISE EXCEPTION 'consume(): argument p_group must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF p_limit IS NULL OR p_limit < 1 THEN
        RAISE EXCEPTION 'invalid limit %: must be >= 1', p_limit
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT EXISTS (SELECT FROM {schema}.partitions p
                   WHERE p.topic_id = tid AND p.partition = p_partition) THEN
        RAISE EXCEPTION 'partition % does not exist in topic %', p_partition,
            quote_literal(p_topic) USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT l.owner INTO holder FROM {schema}.leases l
    WHERE l.group_name = p_group AND l.topic_id = tid AND l.partition = p_partition
      AND {schema}._member_live(p_group, l.owner);
    IF holder IS NOT NULL THEN
        RAISE EXCEPTION 'partition % of topic % is held by member % of group %',
            p_partition, quote_literal(p_topic), quote_literal(holder), quote_literal(p_group)
            USING ERRCODE = 'PRF01';
    END IF;
    INSERT INTO {schema}.cursors (group_name, topic_id, partition, next_offset)
    SELECT p_group, tid, p_partition,
           coalesce((SELECT min(m."offset") FROM {schema}.messages m
                     WHERE m.topic_id = tid AND m.partition = p_partition),
                    (SELECT p.next_offset FROM {schema}.partitions p
                     WHERE p.topic_id = tid AND p.partition = p_partition))
    ON CONFLICT DO NOTHING;
    SELECT c.next_offset INTO start_at FROM {schema}.cursors c
    WHERE c.group_name = p_group AND c.topic_id = tid AND c.partition = p_partition
    FOR UPDATE;
    RETURN QUERY
    WITH batch AS (
        SELECT m."offset", m.key, m.value, m.headers, m.created_at FROM {schema}.messages m
        WHERE m.topic_id = tid AND m.partition = p_partition AND m."offset" >= start_at
        ORDER BY m."offset" LIMIT p_limit
    ), advanced AS (
        UPDATE {schema}.cursors c SET next_offset = (SELECT max(b."offset") + 1 FROM batch b),
                                      updated_at = now()
        WHERE c.group_name = p_group AND c.topic_id = tid AND c.partition = p_partition
          AND EXISTS (SELECT FROM batch)
    )
    SELECT b."offset", b.key, b.value, b.headers, b.created_at FROM batch b ORDER BY b."offset";

END;

$$;

CREATE OR REPLACE FUNCTION {schema}.consume_topic(p_group text, p_topic text, p_partition integer DEFAULT NULL::integer, p_limit integer DEFAULT 100) RETURNS TABLE(partition integer, "offset" bigint, key bytea, value bytea, headers jsonb, created_at timestamp with time zone)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
#variable_conflict use_column
DECLARE
    tid integer := {schema}._topic_id(p_topic);
    r record;
    remaining integer := p_limit;
    take integer;
    chosen integer[] := ARRAY[]::integer[];
    shares integer[] := ARRAY[]::integer[];

BEGIN
    IF consume_topic.p_group IS NULL THEN
        RAISE EXCEPTION 'consume_topic(): argument p_group must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF p_limit IS NULL OR p_limit < 1 THEN
        RAISE EXCEPTION 'invalid limit %: must be >= 1', p_limit
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_partition IS NOT NULL THEN
        RETURN QUERY
        SELECT p_partition, c."offset", c.key, c.value, c.headers, c.created_at
        FROM {schema}.consume(p_group, p_topic, p_partition, p_limit) c;
        RETURN;
    END IF;
    -- The backlog of each partition free for SQL consumption, smallest first.
    FOR r IN
        WITH free AS (
            SELECT p.partition AS part,
                   greatest(p.next_offset - coalesce(
                       cur.next_offset,
                       (SELECT min(m."offset") FROM {schema}.messages m
                        WHERE m.topic_id = tid AND m.partition = p.partition),
                       p.next_offset), 0) AS backlog
            FROM {schema}.partitions p
            LEFT JOIN {schema}.cursors cur
              ON cur.group_name = p_group AND cur.topic_id = tid AND cur.partition = p.partition
            WHERE p.topic_id = tid
              AND NOT EXISTS (
                  SELECT FROM {schema}.leases l
                  WHERE l.group_name = p_group AND l.topic_id = tid
                    AND l.partition = p.partition AND {schema}._member_live(p_group, l.owner))
        )
        SELECT f.part, f.backlog,
               count(*) OVER (ORDER BY f.backlog DESC, f.part DESC) AS still  -- this one on
        FROM free f WHERE f.backlog > 0
        ORDER BY f.backlog, f.part
    LOOP
        EXIT WHEN remaining <= 0;
        take := least(r.backlog, ceil(remaining::numeric / r.still))::integer;
        chosen := chosen || r.part;
        shares := shares || take;
        remaining := remaining - take;
    END LOOP;
    FOR r IN
        SELECT s.part, s.take FROM unnest(chosen, shares) AS s(part, take) ORDER BY s.part
    LOOP
        RETURN QUERY
        SELECT r.part, c."offset", c.key, c.value, c.headers, c.created_at
        FROM {schema}.consume(p_group, p_topic, r.part, r.take) c;
    END LOOP;

END;

$$;

CREATE OR REPLACE FUNCTION {schema}.create_topic(name text, partitions integer DEFAULT 1, retention interval DEFAULT NULL::interval) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    new_id integer;

BEGIN
    IF create_topic.name IS NULL THEN
        RAISE EXCEPTION 'create_topic(): argument name must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF create_topic.partitions IS NULL THEN
        RAISE EXCEPTION 'create_topic(): argument partitions must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    INSERT INTO {schema}.topics (name, partitions, retention)
    VALUES (create_topic.name, create_topic.partitions, create_topic.retention)
    RETURNING id INTO new_id;
    INSERT INTO {schema}.partitions (topic_id, partition)
    SELECT new_id, p FROM generate_series(0, create_topic.partitions - 1) AS p;
    RETURN new_id;

END;

$$;

CREATE OR REPLACE FUNCTION {schema}.ensure_cursors(group_name text, topic_ids integer[], partitions integer[], reset text) RETURNS void
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT {schema}._null_argument('ensure_cursors', 'group_name')
    WHERE ensure_cursors.group_name IS NULL;
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
    PERFORM pg_notify('postroom_groups', p_group);
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

CREATE OR REPLACE FUNCTION {schema}.group_heartbeat(p_group text, p_member text, p_topic_ids integer[], p_session_ms integer, p_joining boolean, p_instance text DEFAULT NULL::text) RETURNS TABLE(rebalance boolean, next_expiry double precision)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    assigned_to text[];

BEGIN
    IF group_heartbeat.p_group IS NULL THEN
        RAISE EXCEPTION 'group_heartbeat(): argument p_group must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF group_heartbeat.p_member IS NULL THEN
        RAISE EXCEPTION 'group_heartbeat(): argument p_member must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF group_heartbeat.p_topic_ids IS NULL THEN
        RAISE EXCEPTION 'group_heartbeat(): argument p_topic_ids must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF p_session_ms IS NULL OR p_session_ms < 1 THEN
        RAISE EXCEPTION 'invalid session timeout % ms: must be > 0', p_session_ms
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT g.members INTO assigned_to FROM {schema}.groups g WHERE g.group_name = p_group;
    IF NOT FOUND THEN
        INSERT INTO {schema}.groups (group_name) VALUES (p_group) ON CONFLICT DO NOTHING;
    END IF;
    INSERT INTO {schema}.members AS m
        (group_name, member_id, topic_ids, session_timeout, expires_at, instance)
    VALUES (p_group, p_member, p_topic_ids, p_session_ms * interval '1 millisecond',
            now() + p_session_ms * interval '1 millisecond', p_instance)
    ON CONFLICT (group_name, member_id) DO UPDATE
    SET topic_ids = excluded.topic_ids, session_timeout = excluded.session_timeout,
        expires_at = excluded.expires_at,
        instance = CASE WHEN p_joining THEN excluded.instance ELSE m.instance END
    WHERE p_joining OR p_instance IS NULL OR m.instance IS NOT DISTINCT FROM p_instance;
    IF NOT FOUND THEN
        PERFORM {schema}._refuse_instance(p_group, p_member, 'heartbeat');
    END IF;
    IF p_joining THEN
        UPDATE {schema}.leases l SET epoch = nextval('{schema}.lease_epochs')
        WHERE l.group_name = p_group AND l.owner = p_member;
    END IF;
    RETURN QUERY
    WITH live AS (
        SELECT m.member_id, m.topic_ids, m.expires_at FROM {schema}.members m
        WHERE m.group_name = p_group AND m.expires_at > now()
    ), wanted AS (
        SELECT count(*) AS n FROM {schema}.partitions p
        WHERE p.topic_id IN (SELECT DISTINCT unnest(live.topic_ids) FROM live)
    )
    SELECT assigned_to IS DISTINCT FROM (SELECT array_agg(live.member_id ORDER BY live.member_id)
                                         FROM live)
           OR EXISTS (SELECT FROM {schema}.members m
                      WHERE m.group_name = p_group AND m.expires_at <= now())
           OR (SELECT n FROM wanted) <> (SELECT count(*) FROM {schema}.leases l
                                         WHERE l.group_name = p_group),
           (SELECT extract(epoch FROM min(live.expires_at) - now())::float8 FROM live
            WHERE live.member_id <> p_member);

END;

$$;

CREATE OR REPLACE FUNCTION {schema}.set_job_limit(limit_scope text, limit_name text, limit_max_running integer, limit_rate double precision, limit_burst double precision) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    IF set_job_limit.limit_scope IS NULL THEN
        RAISE EXCEPTION 'set_job_limit(): argument limit_scope must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF set_job_limit.limit_name IS NULL THEN
        RAISE EXCEPTION 'set_job_limit(): argument limit_name must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM {schema}._check_limit_access(limit_scope, limit_name, limit_max_running,
                                         limit_rate, limit_burst, false);
    INSERT INTO {schema}.job_limits AS l (scope, name, max_running, rate, burst, tokens,
                                          refilled_at)
    VALUES (limit_scope, limit_name, limit_max_running, limit_rate, limit_burst,
            coalesce(limit_burst, 0), clock_timestamp())
    ON CONFLICT (scope, name) DO UPDATE
    SET max_running = excluded.max_running, rate = excluded.rate, burst = excluded.burst,
        tokens = least(coalesce(excluded.burst, 0), l.tokens);

END;

$$;

CREATE OR REPLACE FUNCTION {schema}.upsert_schedule(schedule_name text, schedule_cron text, schedule_kind text, schedule_queue text, schedule_args jsonb, schedule_priority integer, schedule_max_attempts integer, first_run_at timestamp with time zone) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    IF upsert_schedule.schedule_name IS NULL THEN
        RAISE EXCEPTION 'upsert_schedule(): argument schedule_name must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF upsert_schedule.schedule_cron IS NULL THEN
        RAISE EXCEPTION 'upsert_schedule(): argument schedule_cron must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF upsert_schedule.schedule_kind IS NULL THEN
        RAISE EXCEPTION 'upsert_schedule(): argument schedule_kind must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF upsert_schedule.schedule_queue IS NULL THEN
        RAISE EXCEPTION 'upsert_schedule(): argument schedule_queue must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF upsert_schedule.schedule_args IS NULL THEN
        RAISE EXCEPTION 'upsert_schedule(): argument schedule_args must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF upsert_schedule.schedule_priority IS NULL THEN
        RAISE EXCEPTION 'upsert_schedule(): argument schedule_priority must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF upsert_schedule.schedule_max_attempts IS NULL THEN
        RAISE EXCEPTION 'upsert_schedule(): argument schedule_max_attempts must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF first_run_at IS NULL OR NOT {schema}._run_at_valid(first_run_at) THEN
        RAISE EXCEPTION 'invalid first run % of schedule %: a time from 1900-01-01 to 100 '
                        'years from now', coalesce(first_run_at::text, 'NULL'),
                        quote_literal(schedule_name)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM {schema}._check_queue_access(ARRAY[schedule_queue] || ARRAY(
        SELECT s.queue FROM {schema}.job_schedules s WHERE s.name = schedule_name));
    INSERT INTO {schema}.job_schedules AS s (name, cron, kind, queue, args, priority,
                                             max_attempts, next_run_at)
    VALUES (schedule_name, schedule_cron, schedule_kind, schedule_queue, schedule_args,
            schedule_priority, schedule_max_attempts, first_run_at)
    ON CONFLICT (name) DO UPDATE
    SET cron = excluded.cron, kind = excluded.kind, queue = excluded.queue, args = excluded.args,
        priority = excluded.priority, max_attempts = excluded.max_attempts,
        next_run_at = CASE WHEN s.cron = excluded.cron THEN s.next_run_at
                           ELSE excluded.next_run_at END,
        updated_at = now();

END;

$$;
