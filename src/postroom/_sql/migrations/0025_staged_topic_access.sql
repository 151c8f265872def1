-- Topic grants (migration 0024) checked when a publish in the caller's transaction stages its
-- messages (migration 0017). Those publishes touch the counter rows, where 0024's trigger checks
-- the grant, only at COMMIT: a role without the topic's grant saw its own COMMIT fail instead of
-- the publish call. This statement trigger refuses the publish itself, before anything is staged
-- (the counter rows' trigger still checks at commit). Admins (who may update the counter rows)
-- skip it, as they skip 0024's.

CREATE FUNCTION {schema}._check_staged_access() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    topic text;
BEGIN
    SELECT t.name INTO topic
    FROM (SELECT DISTINCT s.topic_id FROM staged s) d
    JOIN {schema}.topics t ON t.id = d.topic_id
    WHERE NOT EXISTS (
        SELECT FROM {schema}.topic_roles g
        WHERE g.topic_name IN (t.name, '*')
          AND CASE WHEN EXISTS (SELECT FROM pg_roles r WHERE r.oid = g.role_oid)
                   THEN pg_has_role(session_user, g.role_oid, 'MEMBER')
                   ELSE false END)
    ORDER BY t.name
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'permission denied to publish to topic %: role % has no grant for it',
            quote_literal(topic), quote_ident(session_user)
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'have an admin grant it: client.grant(role, ''producer'', '
                         'topics=[...]) or postroom grant ROLE producer --topic TOPIC';
    END IF;
    RETURN NULL;
END;
$$;

REVOKE ALL ON FUNCTION {schema}._check_staged_access() FROM PUBLIC;

CREATE TRIGGER staged_messages_access
AFTER INSERT ON {schema}.staged_messages
REFERENCING NEW TABLE AS staged
FOR EACH STATEMENT
WHEN (NOT pg_catalog.has_table_privilege(session_user, '{schema}.partitions'::regclass,
                                         'UPDATE'))
EXECUTE FUNCTION {schema}._check_staged_access();
