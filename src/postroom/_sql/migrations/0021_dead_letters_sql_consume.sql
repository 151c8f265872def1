-- postroom migration 0021: one dead letter per (group, message) however many processes handle
-- the message, and the SQL consumer's text/jsonb forms and one call over all partitions.
-- New objects only: no existing function is replaced. docs/log.md, "Dead letters" and
-- "Consuming from SQL".
-- `{schema}` is replaced by the quoted schema identifier; literal braces are doubled.

-- The dead letters written, by the group that failed and the id of the message it failed on.
-- Several relays (or runners) on one topic may each handle a message that fails (a member that
-- lost its partition while it retried, and its successor): the primary key makes the second
-- dead letter a no-op. Rows older than a day are pruned as new ones come.
CREATE TABLE {schema}.dead_letter_claims (
    group_name  text NOT NULL CHECK (group_name ~ '^[A-Za-z0-9][A-Za-z0-9._-]{{0,199}}$'),
    message_id  text NOT NULL CHECK (length(message_id) BETWEEN 1 AND 1000),
    claimed_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (group_name, message_id)
);
CREATE INDEX dead_letter_claims_claimed_at_idx ON {schema}.dead_letter_claims (claimed_at);

-- True if p_group may write the dead letter of p_message_id now: no dead letter of it was
-- claimed in the last day. Call it in the transaction that publishes the dead letter: a
-- concurrent claim of the same pair waits for that transaction, then gets false if it
-- committed (true if it rolled back). Row locks on the claim rows only.
CREATE FUNCTION {schema}.claim_dead_letter(p_group text, p_message_id text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    claimed boolean;
BEGIN
    DELETE FROM {schema}.dead_letter_claims d WHERE d.claimed_at < now() - interval '1 day';
    INSERT INTO {schema}.dead_letter_claims (group_name, message_id)
    VALUES (p_group, p_message_id)
    ON CONFLICT DO NOTHING
    RETURNING true INTO claimed;
    RETURN coalesce(claimed, false);
END;
$$;

-- Claims up to p_limit messages of p_group on topic p_topic, as consume() does, with the
-- partition of each: of p_partition, or with p_partition NULL of every partition no live
-- member of the group holds, shared fairly (max-min: a partition with a short backlog gets it
-- all, the rest is split evenly among the others). Cursor rows are locked in partition order
-- (no deadlock between SQL consumers of one group) until the caller's transaction ends.
CREATE FUNCTION {schema}.consume_topic(p_group text, p_topic text,
                                       p_partition integer DEFAULT NULL,
                                       p_limit integer DEFAULT 100)
RETURNS TABLE (partition integer, "offset" bigint, key bytea, value bytea, headers jsonb,
               created_at timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    tid integer := {schema}._topic_id(p_topic);
    r record;
    remaining integer := p_limit;
    take integer;
    chosen integer[] := ARRAY[]::integer[];
    shares integer[] := ARRAY[]::integer[];
BEGIN
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

-- consume_topic() with UTF-8 text keys and values (as publish(topic, text) writes them); a
-- value that is not UTF-8 raises, and the claim rolls back with the statement.
CREATE FUNCTION {schema}.consume_text(p_group text, p_topic text,
                                      p_partition integer DEFAULT NULL,
                                      p_limit integer DEFAULT 100)
RETURNS TABLE (partition integer, "offset" bigint, key text, value text, headers jsonb,
               created_at timestamptz)
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT c.partition, c."offset", convert_from(c.key, 'UTF8'), convert_from(c.value, 'UTF8'),
           c.headers, c.created_at
    FROM {schema}.consume_topic(p_group, p_topic, p_partition, p_limit) c;
$$;

-- consume_topic() with text keys and jsonb values (as publish(topic, jsonb) and the Python API
-- write JSON); a value that is not JSON raises, and the claim rolls back with the statement.
CREATE FUNCTION {schema}.consume_json(p_group text, p_topic text,
                                      p_partition integer DEFAULT NULL,
                                      p_limit integer DEFAULT 100)
RETURNS TABLE (partition integer, "offset" bigint, key text, value jsonb, headers jsonb,
               created_at timestamptz)
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT c.partition, c."offset", convert_from(c.key, 'UTF8'),
           convert_from(c.value, 'UTF8')::jsonb, c.headers, c.created_at
    FROM {schema}.consume_topic(p_group, p_topic, p_partition, p_limit) c;
$$;

REVOKE EXECUTE ON FUNCTION
    {schema}.claim_dead_letter(text, text),
    {schema}.consume_topic(text, text, integer, integer),
    {schema}.consume_text(text, text, integer, integer),
    {schema}.consume_json(text, text, integer, integer)
FROM PUBLIC;

-- Existing consumer roles (EXECUTE on claim_range) get the new functions, as grant_consumer
-- (grant_consumer_0021) now gives them.
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT DISTINCT rol.rolname
        FROM pg_proc f, aclexplode(f.proacl) x, pg_roles rol
        WHERE f.oid = '{schema}.claim_range(text, integer[], integer[], integer)'::regprocedure
          AND x.privilege_type = 'EXECUTE' AND rol.oid = x.grantee AND x.grantee <> f.proowner
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s, %s, %s, %s TO %I',
                       '{schema}.claim_dead_letter(text, text)'::regprocedure,
                       '{schema}.consume_topic(text, text, integer, integer)'::regprocedure,
                       '{schema}.consume_text(text, text, integer, integer)'::regprocedure,
                       '{schema}.consume_json(text, text, integer, integer)'::regprocedure,
                       r.rolname);
    END LOOP;
END;
$$;
