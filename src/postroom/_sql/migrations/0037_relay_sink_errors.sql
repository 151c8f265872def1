-- postroom migration 0037: each relay member's last sink error, and relay status for consumer
-- roles. New objects and grants only: no existing function is replaced. docs/outbox.md
-- "Sink errors", docs/roles.md "Relay status".
-- `{schema}` is replaced by the quoted schema identifier; literal braces are doubled.

-- The sink error a relay member (a consumer group member, members) is failing on now: one row
-- per member while its sink fails, deleted when a send succeeds. since: the first failure of the
-- run; seen_at: the last one the relay wrote (it refreshes it every few seconds at most, not per
-- attempt); error: the latest text, scrubbed of passwords by the relay and cut to 500
-- characters. No foreign key to members (a member's row comes and goes with its session, under
-- other roles' locks): readers join the live members, writers prune the departed ones.
CREATE TABLE {schema}.relay_sink_errors (
    group_name  text NOT NULL,
    member_id   text NOT NULL,
    error       text NOT NULL CHECK (length(error) BETWEEN 1 AND 500),
    since       timestamptz NOT NULL DEFAULT now(),
    seen_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (group_name, member_id)
);

-- Records p_error as member p_member's sink error in group p_group (p_error NULL: clears it).
-- A new row starts its run (since = now()); an existing one keeps since and takes the new text
-- and seen_at. Only for a group the caller may use (_authorize_group), and only while the member
-- is registered (false otherwise: the relay writes again later). Deletes the group's rows of
-- members that are gone. Row locks on the rows written or deleted only.
CREATE FUNCTION {schema}.relay_sink_error(p_group text, p_member text, p_error text)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM {schema}._authorize_group(p_group);
    DELETE FROM {schema}.relay_sink_errors e
    WHERE e.group_name = p_group
      AND ((e.member_id = p_member AND nullif(p_error, '') IS NULL)
           OR NOT EXISTS (SELECT FROM {schema}.members m
                          WHERE m.group_name = e.group_name AND m.member_id = e.member_id));
    IF nullif(p_error, '') IS NULL THEN
        RETURN true;
    END IF;
    INSERT INTO {schema}.relay_sink_errors AS e (group_name, member_id, error)
    SELECT p_group, p_member, left(p_error, 500)
    WHERE EXISTS (SELECT FROM {schema}.members m
                  WHERE m.group_name = p_group AND m.member_id = p_member)
    ON CONFLICT (group_name, member_id)
        DO UPDATE SET error = excluded.error, seen_at = now();
    RETURN FOUND;
END;
$$;
REVOKE ALL ON FUNCTION {schema}.relay_sink_error(text, text, text) FROM PUBLIC;

-- Existing consumer roles (EXECUTE on claim_range) get what grant_consumer_0037 now gives: the
-- writer above, and the reads of relay status and describe_group (leases; the members' columns
-- but the instance token, which fences a member's older instances; group_activity; the sink
-- errors). Before, relay_status() under a consumer role failed on "permission denied for table
-- leases".
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
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I',
                       '{schema}.relay_sink_error(text, text, text)'::regprocedure, r.rolname);
        EXECUTE format('GRANT SELECT ON %s, %s, %s TO %I',
                       '{schema}.leases'::regclass, '{schema}.group_activity'::regclass,
                       '{schema}.relay_sink_errors'::regclass, r.rolname);
        EXECUTE format('GRANT SELECT (group_name, member_id, topic_ids, session_timeout, '
                       'expires_at, joined_at) ON %s TO %I',
                       '{schema}.members'::regclass, r.rolname);
    END LOOP;
END;
$$;
