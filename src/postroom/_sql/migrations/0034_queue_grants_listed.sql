-- Queue scopes (migration 0020's queue_roles) listed beside group and topic grants: role_grants
-- now returns them as resource 'queue', so `postroom grants` shows every scope a role has, and
-- revoke_queues takes them back. A role left with no queue_roles row may use no queue.

CREATE OR REPLACE FUNCTION {schema}.role_grants(p_role text DEFAULT NULL)
RETURNS TABLE(role_name text, resource text, name text, owner boolean, granted_at timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM {schema}._require_admin('list grants');
    RETURN QUERY
    SELECT r.rolname::text, x.resource, x.name, x.owner, x.granted_at
    FROM (SELECT g.role_oid, 'group'::text AS resource, g.group_name AS name, g.owner,
                 g.granted_at
          FROM {schema}.group_roles g
          UNION ALL
          SELECT q.role_oid, 'queue', q.queue, false, q.granted_at
          FROM {schema}.queue_roles q
          UNION ALL
          SELECT t.role_oid, 'topic', t.topic_name, false, t.granted_at
          FROM {schema}.topic_roles t) x
    JOIN pg_roles r ON r.oid = x.role_oid
    WHERE p_role IS NULL OR r.rolname = p_role
    ORDER BY 1, 2, 3;
END;
$$;

-- Takes back role p_role's grants on queues p_queues (names or '*'); returns how many. Admins
-- only (row locks on the deleted queue_roles rows).
CREATE FUNCTION {schema}.revoke_queues(p_role text, p_queues text[]) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    removed integer;
BEGIN
    IF revoke_queues.p_role IS NULL THEN
        RAISE EXCEPTION 'revoke_queues(): argument p_role must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF revoke_queues.p_queues IS NULL THEN
        RAISE EXCEPTION 'revoke_queues(): argument p_queues must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM {schema}._require_admin('revoke queues');
    DELETE FROM {schema}.queue_roles g
    WHERE g.role_oid = {schema}._role_oid(p_role) AND g.queue = ANY(p_queues);
    GET DIAGNOSTICS removed = ROW_COUNT;
    RETURN removed;
END;
$$;

REVOKE ALL ON FUNCTION {schema}.revoke_queues(text, text[]) FROM PUBLIC;
