-- postroom migration 0011: retention runs by itself. The log's retention (the linear batched
-- DELETE of apply_retention) becomes SQL functions, so that the retention runner of every group
-- member and queue worker can apply it under a producer or consumer role, which has no rights on
-- the messages table. docs/log.md, "Retention".
-- `{schema}` is replaced by the quoted schema identifier; literal braces are doubled.

-- Deletes, in every partition of the topics that have a retention, up to p_batch of the oldest
-- messages that are both older than the retention and read by every active group
-- (_group_active, migration 0009: a live member, or activity within the topic's group_ttl, else
-- p_group_expiry); expired groups do not pin the log. Row locks on the deleted messages only;
-- writers append above them and are not blocked. Returns the count. Linear: the bounds are
-- computed once per partition (MATERIALIZED, else the planner inlines them into the delete and
-- evaluates them per row), the search for the first unexpired message looks at one batch of
-- offsets at most, and the delete is a primary-key range scan.
CREATE FUNCTION {schema}.expire_messages(p_group_expiry interval, p_batch integer)
RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    WITH bounds AS MATERIALIZED (
        SELECT p.topic_id, p.partition,
               least(active.floor, coalesce(fresh."offset", batch.upto)) AS keep_from
        FROM {schema}.partitions p
        JOIN {schema}.topics t ON t.id = p.topic_id
        CROSS JOIN LATERAL (
            SELECT coalesce(min(c.next_offset), p.next_offset) AS floor
            FROM {schema}.cursors c
            WHERE c.topic_id = p.topic_id AND c.partition = p.partition
              AND {schema}._group_active(c.group_name, c.updated_at,
                                         coalesce(t.group_ttl, p_group_expiry))
        ) active
        CROSS JOIN LATERAL (
            SELECT least(coalesce(min(m."offset"), p.next_offset) + p_batch, p.next_offset)
                   AS upto
            FROM {schema}.messages m
            WHERE m.topic_id = p.topic_id AND m.partition = p.partition
        ) batch
        LEFT JOIN LATERAL (
            SELECT m."offset"
            FROM {schema}.messages m
            WHERE m.topic_id = p.topic_id AND m.partition = p.partition
              AND m."offset" < batch.upto AND m.created_at >= now() - t.retention
            ORDER BY m."offset"
            LIMIT 1
        ) fresh ON true
        WHERE t.retention IS NOT NULL
    ), deleted AS (
        DELETE FROM {schema}.messages m
        USING bounds b
        WHERE m.topic_id = b.topic_id AND m.partition = b.partition AND m."offset" < b.keep_from
        RETURNING 1
    )
    SELECT count(*) FROM deleted;
$$;

-- Retention with the defaults (a group without a topic group_ttl is active for 7 days, batches
-- of 10,000 per partition), for the periodic retention runner of every postroom process: the
-- producer and consumer roles may run it (it removes only what the topics' settings allow), not
-- pick a shorter expiry.
CREATE FUNCTION {schema}.run_retention()
RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT {schema}.expire_messages(interval '7 days', 10000);
$$;

REVOKE EXECUTE ON FUNCTION
    {schema}.expire_messages(interval, integer),
    {schema}.run_retention()
FROM PUBLIC;

-- Existing roles: admins (table-wide UPDATE on the counter rows) get the new functions, as
-- grant_admin gives them all; producers and consumers (EXECUTE on reserve_offsets or
-- claim_range) get run_retention, as grant_producer and grant_consumer now do.
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT DISTINCT rol.rolname
        FROM pg_class c, aclexplode(c.relacl) x, pg_roles rol
        WHERE c.oid = '{schema}.partitions'::regclass AND x.privilege_type = 'UPDATE'
          AND rol.oid = x.grantee AND x.grantee <> c.relowner
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s, %s TO %I',
                       '{schema}.expire_messages(interval, integer)'::regprocedure,
                       '{schema}.run_retention()'::regprocedure, r.rolname);
    END LOOP;
    FOR r IN
        SELECT DISTINCT rol.rolname
        FROM pg_proc f, aclexplode(f.proacl) x, pg_roles rol
        WHERE f.oid IN ('{schema}.reserve_offsets(integer[], integer[], bigint[])'::regprocedure,
                        '{schema}.claim_range(text, integer[], integer[], integer)'::regprocedure)
          AND x.privilege_type = 'EXECUTE' AND rol.oid = x.grantee AND x.grantee <> f.proowner
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I',
                       '{schema}.run_retention()'::regprocedure, r.rolname);
    END LOOP;
END;
$$;
