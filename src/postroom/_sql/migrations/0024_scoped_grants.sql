-- postroom migration 0024: grants scoped to consumer groups and topics (least privilege by
-- default), no group lock a foreign role can hold, and queue upkeep (sequences, job ids).
-- `{schema}` is replaced by the quoted schema identifier; literal braces are doubled.
--
-- Groups. group_roles (0008) says which roles may use which group. Until now any consumer role
-- took a group nobody held on first use, so a foreign service could squat a group before its
-- service started. From now on a role uses only the groups granted to it (or that it took
-- before), and takes new groups on first use only if it holds the grant '*' (every group nobody
-- holds yet). Roles able to consume before this migration get '*', so they keep working.
--
-- Topics. topic_roles says which roles may publish to which topic ('*': every topic); a
-- trigger on the counter rows checks it whenever offsets are reserved, whatever function or
-- path reserves them. Roles able to publish before this migration get '*'.
--
-- Admins (roles that may write the cursors table themselves: the schema owner, superusers,
-- roles granted "admin") use every group and topic and manage the grants, through the
-- functions grant_groups, revoke_groups, grant_topics, revoke_topics and role_grants.

-- 1. Groups ----------------------------------------------------------------------------------

-- Raises insufficient_privilege unless the session's login role may change p_group's state;
-- a group no role holds yet is taken by a role granted '*' (row lock on the new group_roles
-- row). '*' names no group.
CREATE OR REPLACE FUNCTION {schema}._authorize_group(p_group text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    holders text;
BEGIN
    IF has_table_privilege(session_user, '{schema}.cursors'::regclass, 'UPDATE') THEN
        RETURN;  -- an admin: it could write the table itself
    END IF;
    IF p_group IS NULL OR p_group = '*' THEN
        RAISE EXCEPTION 'invalid consumer group %: ''*'' stands for every group in grants and '
                        'names none', coalesce(quote_literal(p_group), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR i IN 1 .. 2 LOOP
        IF EXISTS (SELECT FROM {schema}.group_roles g
                   WHERE g.group_name = p_group
                     AND CASE WHEN EXISTS (SELECT FROM pg_roles r WHERE r.oid = g.role_oid)
                              THEN pg_has_role(session_user, g.role_oid, 'MEMBER')
                              ELSE false END) THEN
            RETURN;
        END IF;
        EXIT WHEN i = 2;
        -- Only a role granted every group ('*') takes a group nobody holds.
        EXIT WHEN NOT EXISTS (SELECT FROM {schema}.group_roles g
                              WHERE g.group_name = '*'
                                AND CASE WHEN EXISTS (SELECT FROM pg_roles r
                                                      WHERE r.oid = g.role_oid)
                                         THEN pg_has_role(session_user, g.role_oid, 'MEMBER')
                                         ELSE false END);
        INSERT INTO {schema}.group_roles (group_name, role_oid, owner)
        SELECT p_group, r.oid, true FROM pg_roles r
        WHERE r.rolname = session_user
          AND NOT EXISTS (SELECT FROM {schema}.group_roles g WHERE g.group_name = p_group)
        ON CONFLICT DO NOTHING;
        IF FOUND THEN
            RETURN;
        END IF;
        -- Held by someone, or another session took it just now: look again.
    END LOOP;
    SELECT string_agg(quote_ident(r.rolname), ', ' ORDER BY r.rolname) INTO holders
    FROM {schema}.group_roles g JOIN pg_roles r ON r.oid = g.role_oid
    WHERE g.group_name = p_group;
    IF holders IS NULL THEN
        RAISE EXCEPTION 'permission denied for consumer group %: role % has no grant for it',
            quote_literal(p_group), quote_ident(session_user)
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'have an admin grant it: client.grant(role, ''consumer'', '
                         'groups=[...]) or postroom grant ROLE consumer --group GROUP';
    END IF;
    RAISE EXCEPTION 'permission denied for consumer group %: it belongs to role %, and role % is not a member',
        quote_literal(p_group), holders, quote_ident(session_user)
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'use a group of your own, or have an admin share this one: '
                     'client.grant(role, ''consumer'', groups=[...])';
END;
$$;

-- Trigger: a row of a group's state is written; only the group's roles (and admins) may.
-- The common cases (an admin; a role of the group) are answered here, without a further call.
CREATE OR REPLACE FUNCTION {schema}._check_group_access()
RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF has_table_privilege(session_user, '{schema}.cursors'::regclass, 'UPDATE') THEN
        RETURN CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
    END IF;
    IF TG_OP = 'DELETE' THEN
        PERFORM {schema}._authorize_group(OLD.group_name);
        RETURN OLD;
    END IF;
    IF NEW.group_name IS NULL OR NEW.group_name = '*'
       OR NOT EXISTS (SELECT FROM {schema}.group_roles g
                      WHERE g.group_name = NEW.group_name
                        AND CASE WHEN EXISTS (SELECT FROM pg_roles r WHERE r.oid = g.role_oid)
                                 THEN pg_has_role(session_user, g.role_oid, 'MEMBER')
                                 ELSE false END) THEN
        PERFORM {schema}._authorize_group(NEW.group_name);
    END IF;
    IF TG_OP = 'UPDATE' AND OLD.group_name IS DISTINCT FROM NEW.group_name THEN
        PERFORM {schema}._authorize_group(OLD.group_name);
    END IF;
    RETURN NEW;
END;
$$;

-- Rebalance, step 1: checks the caller may use the group, locks the group row (FOR NO KEY
-- UPDATE NOWAIT: one rebalance at a time, and nobody waits behind a session that sits on the
-- lock; members' heartbeats go on), deletes expired members and returns the live ones with
-- their subscriptions. A busy lock raises lock_not_available (the caller tries again at its
-- next heartbeat). The lock lasts until the caller's transaction ends (group_assign commits).
CREATE OR REPLACE FUNCTION {schema}.group_lock(p_group text)
RETURNS TABLE (member_id text, topic_ids integer[])
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM {schema}._authorize_group(p_group);
    BEGIN
        PERFORM FROM {schema}.groups g WHERE g.group_name = p_group FOR NO KEY UPDATE NOWAIT;
    EXCEPTION WHEN lock_not_available THEN
        RAISE EXCEPTION 'consumer group % is being rebalanced by another session',
            quote_literal(p_group)
            USING ERRCODE = 'lock_not_available',
                  HINT = 'a member tries again at its next heartbeat';
    END;
    DELETE FROM {schema}.members m WHERE m.group_name = p_group AND m.expires_at <= now();
    RETURN QUERY SELECT m.member_id, m.topic_ids FROM {schema}.members m
    WHERE m.group_name = p_group ORDER BY m.member_id;
END;
$$;

-- Called first by every member-side claim, commit and release (claim_batch, commit_offsets,
-- group_release): checks the caller may use the group before those take their FOR SHARE lease
-- locks (a foreign role must not sit on them and stall a rebalance), then ends this
-- transaction's session if it idles past the member's session timeout (a paused member must
-- not hold those locks forever).
CREATE OR REPLACE FUNCTION {schema}._guard_idle(p_group text, p_member text)
RETURNS void
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
    SELECT {schema}._authorize_group(p_group);
    SELECT set_config('idle_in_transaction_session_timeout',
                      coalesce((SELECT (extract(epoch FROM m.session_timeout) * 1000)::bigint
                                FROM {schema}.members m
                                WHERE m.group_name = p_group AND m.member_id = p_member),
                               10000)::text || 'ms',
                      true);
$$;

-- 2. Topics ----------------------------------------------------------------------------------

-- Which roles may publish to which topic, by name (a grant may come before the topic; it
-- outlives a deleted topic, as Kafka's ACLs do). '*': every topic.
CREATE TABLE {schema}.topic_roles (
    topic_name  text NOT NULL,
    role_oid    oid NOT NULL,
    granted_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topic_name, role_oid)
);

-- Trigger (named to fire before the other counter triggers): offsets are being reserved on a counter row (reserve_offsets, publish_batch, any
-- write path), by a role that is not an admin (the WHEN clause): it must hold a grant for the
-- topic or '*'.
CREATE FUNCTION {schema}._check_topic_access()
RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    topic text;
BEGIN
    SELECT t.name INTO topic FROM {schema}.topics t WHERE t.id = NEW.topic_id;
    IF EXISTS (SELECT FROM {schema}.topic_roles g
               WHERE g.topic_name IN (topic, '*')
                 AND CASE WHEN EXISTS (SELECT FROM pg_roles r WHERE r.oid = g.role_oid)
                          THEN pg_has_role(session_user, g.role_oid, 'MEMBER')
                          ELSE false END) THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'permission denied to publish to topic %: role % has no grant for it',
        quote_literal(coalesce(topic, NEW.topic_id::text)), quote_ident(session_user)
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'have an admin grant it: client.grant(role, ''producer'', '
                     'topics=[...]) or postroom grant ROLE producer --topic TOPIC';
END;
$$;

CREATE TRIGGER partitions_access
BEFORE UPDATE OF next_offset ON {schema}.partitions
FOR EACH ROW
WHEN (NEW.next_offset > OLD.next_offset
      AND NOT pg_catalog.has_table_privilege(session_user, '{schema}.partitions'::regclass,
                                             'UPDATE'))
EXECUTE FUNCTION {schema}._check_topic_access();

-- 3. Managing grants (admins) ----------------------------------------------------------------

-- Raises insufficient_privilege unless the session's login role is an admin of this schema.
CREATE FUNCTION {schema}._require_admin(what text)
RETURNS void
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NOT has_table_privilege(session_user, '{schema}.cursors'::regclass, 'UPDATE') THEN
        RAISE EXCEPTION 'permission denied to %: only an admin of this schema may (role % is not)',
            what, quote_ident(session_user)
            USING ERRCODE = 'insufficient_privilege';
    END IF;
END;
$$;

-- The oid of role p_role; raises undefined_object if there is none.
CREATE FUNCTION {schema}._role_oid(p_role text)
RETURNS oid
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    found_oid oid;
BEGIN
    SELECT r.oid INTO found_oid FROM pg_roles r WHERE r.rolname = p_role;
    IF found_oid IS NULL THEN
        RAISE EXCEPTION 'role % does not exist', coalesce(quote_ident(p_role), 'NULL')
            USING ERRCODE = 'undefined_object';
    END IF;
    RETURN found_oid;
END;
$$;

-- Lets p_role use the consumer groups p_groups ('*': take any group nobody holds yet, on first
-- use) alongside the roles that hold them already. Admins only. Row locks on the new rows.
CREATE FUNCTION {schema}.grant_groups(p_role text, p_groups text[])
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    role_id oid;
    g text;
BEGIN
    PERFORM {schema}._require_admin('grant consumer groups');
    role_id := {schema}._role_oid(p_role);
    FOREACH g IN ARRAY coalesce(p_groups, '{{}}') LOOP
        IF g IS DISTINCT FROM '*' THEN
            PERFORM {schema}._check_name('group', g, '^[A-Za-z0-9][A-Za-z0-9._-]*$');
        END IF;
    END LOOP;
    INSERT INTO {schema}.group_roles (group_name, role_oid)
    SELECT DISTINCT g2, role_id FROM unnest(p_groups) AS g2
    ON CONFLICT DO NOTHING;
END;
$$;

-- Takes back p_role's grants on p_groups (as an owner too: a group nobody holds then goes to
-- the next role granted '*' that uses it). Admins only. Returns how many grants it removed.
CREATE FUNCTION {schema}.revoke_groups(p_role text, p_groups text[])
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    removed integer;
BEGIN
    PERFORM {schema}._require_admin('revoke consumer groups');
    DELETE FROM {schema}.group_roles g
    WHERE g.role_oid = {schema}._role_oid(p_role) AND g.group_name = ANY(p_groups);
    GET DIAGNOSTICS removed = ROW_COUNT;
    RETURN removed;
END;
$$;

-- Lets p_role publish to the topics p_topics ('*': every topic). Admins only.
CREATE FUNCTION {schema}.grant_topics(p_role text, p_topics text[])
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    role_id oid;
    t text;
BEGIN
    PERFORM {schema}._require_admin('grant topics');
    role_id := {schema}._role_oid(p_role);
    FOREACH t IN ARRAY coalesce(p_topics, '{{}}') LOOP
        IF t IS DISTINCT FROM '*' THEN
            PERFORM {schema}._check_name('topic', t, '^[A-Za-z0-9][A-Za-z0-9._-]*$');
        END IF;
    END LOOP;
    INSERT INTO {schema}.topic_roles (topic_name, role_oid)
    SELECT DISTINCT t2, role_id FROM unnest(p_topics) AS t2
    ON CONFLICT DO NOTHING;
END;
$$;

-- Takes back p_role's grants on p_topics. Admins only. Returns how many it removed.
CREATE FUNCTION {schema}.revoke_topics(p_role text, p_topics text[])
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    removed integer;
BEGIN
    PERFORM {schema}._require_admin('revoke topics');
    DELETE FROM {schema}.topic_roles g
    WHERE g.role_oid = {schema}._role_oid(p_role) AND g.topic_name = ANY(p_topics);
    GET DIAGNOSTICS removed = ROW_COUNT;
    RETURN removed;
END;
$$;

-- The scoped grants (of p_role, or of every role when NULL): 'group' or 'topic', the name or
-- '*', whether the role took the group on first use (owner). Admins only. No locks.
CREATE FUNCTION {schema}.role_grants(p_role text DEFAULT NULL)
RETURNS TABLE (role_name text, resource text, name text, owner boolean,
               granted_at timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM {schema}._require_admin('list grants');
    RETURN QUERY
    SELECT r.rolname::text, x.resource, x.name, x.owner, x.granted_at
    FROM (SELECT g.role_oid, 'group'::text AS resource, g.group_name AS name, g.owner,
                 g.granted_at
          FROM {schema}.group_roles g
          UNION ALL
          SELECT t.role_oid, 'topic', t.topic_name, false, t.granted_at
          FROM {schema}.topic_roles t) x
    JOIN pg_roles r ON r.oid = x.role_oid
    WHERE p_role IS NULL OR r.rolname = p_role
    ORDER BY 1, 2, 3;
END;
$$;

REVOKE EXECUTE ON FUNCTION
    {schema}._check_topic_access(),
    {schema}._require_admin(text),
    {schema}._role_oid(text)
FROM PUBLIC;

-- 4. The upgrade: roles that could consume or publish before keep what they could do --------

INSERT INTO {schema}.group_roles (group_name, role_oid)
SELECT '*', r.oid FROM pg_roles r
WHERE NOT r.rolsuper AND r.rolname !~ '^pg_'
  AND r.oid <> (SELECT relowner FROM pg_class WHERE oid = '{schema}.cursors'::regclass)
  AND NOT has_table_privilege(r.oid, '{schema}.cursors'::regclass, 'UPDATE')
  AND has_function_privilege(
          r.oid, '{schema}.group_heartbeat(text, text, integer[], integer, boolean, text)'::regprocedure,
          'EXECUTE')
ON CONFLICT DO NOTHING;

INSERT INTO {schema}.topic_roles (topic_name, role_oid)
SELECT '*', r.oid FROM pg_roles r
WHERE NOT r.rolsuper AND r.rolname !~ '^pg_'
  AND r.oid <> (SELECT relowner FROM pg_class WHERE oid = '{schema}.partitions'::regclass)
  AND NOT has_table_privilege(r.oid, '{schema}.partitions'::regclass, 'UPDATE')
  AND has_function_privilege(
          r.oid, '{schema}.reserve_offsets(integer[], integer[], bigint[])'::regprocedure,
          'EXECUTE')
ON CONFLICT DO NOTHING;

-- 5. Queue upkeep ----------------------------------------------------------------------------

-- A sequence's row goes when its last job leaves the jobs table for good (done, deleted), so
-- job_sequences no longer keeps one row per key ever used. A last job that was cancelled
-- keeps it (the next job of the sequence is held, as before), and so does a failed one (it
-- stays in jobs). Rows an enqueuer holds (it is about to chain a new job) are skipped.
CREATE INDEX job_sequences_last_job_idx ON {schema}.job_sequences (last_job_id);

CREATE FUNCTION {schema}._sequence_done()
RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    DELETE FROM {schema}.job_sequences s
    USING (SELECT s2.key FROM {schema}.job_sequences s2
           JOIN gone g ON g.id = s2.last_job_id
           WHERE NOT EXISTS (SELECT FROM {schema}.finished_jobs f
                             WHERE f.id = g.id AND f.state = 'cancelled')
           ORDER BY s2.key
           FOR UPDATE OF s2 SKIP LOCKED) d
    WHERE s.key = d.key;
    RETURN NULL;
END;
$$;

CREATE TRIGGER jobs_sequence_done AFTER DELETE ON {schema}.jobs
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}._sequence_done();

-- An enqueuer of a sequence locks its row from its first statement on (the INSERT ... ON
-- CONFLICT DO NOTHING that makes sure the row exists), so _sequence_done cannot delete it
-- between that insert and the enqueuer's own FOR UPDATE: the new job would then chain to no
-- row. A row deleted meanwhile is waited for and then inserted afresh.
CREATE FUNCTION {schema}._sequence_hold()
RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM FROM {schema}.job_sequences s WHERE s.key = NEW.key FOR UPDATE;
    RETURN NEW;
END;
$$;

CREATE TRIGGER job_sequences_hold BEFORE INSERT ON {schema}.job_sequences
    FOR EACH ROW EXECUTE FUNCTION {schema}._sequence_hold();

-- A job inserted by hand with an id beyond the id sequence moves the sequence past it, so
-- later enqueues never collide with it (they raised a raw unique violation on jobs_pkey). The
-- WHEN clause keeps ids from the sequence (every enqueue) out of the trigger.
CREATE FUNCTION {schema}._follow_given_job_id()
RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM setval('{schema}.jobs_id_seq'::regclass,
                   greatest(NEW.id, coalesce(pg_sequence_last_value('{schema}.jobs_id_seq'::regclass), 0)));
    RETURN NEW;
END;
$$;

CREATE TRIGGER jobs_follow_given_id BEFORE INSERT ON {schema}.jobs
    FOR EACH ROW
    WHEN (NEW.id > coalesce(pg_catalog.pg_sequence_last_value('{schema}.jobs_id_seq'::regclass), 0))
    EXECUTE FUNCTION {schema}._follow_given_job_id();
CREATE TRIGGER finished_jobs_follow_given_id BEFORE INSERT ON {schema}.finished_jobs
    FOR EACH ROW
    WHEN (NEW.id > coalesce(pg_catalog.pg_sequence_last_value('{schema}.jobs_id_seq'::regclass), 0))
    EXECUTE FUNCTION {schema}._follow_given_job_id();

-- Ids given by hand before this migration: the sequence starts past them now.
SELECT setval('{schema}.jobs_id_seq'::regclass,
              greatest((SELECT max(id) FROM {schema}.jobs), (SELECT max(id) FROM {schema}.finished_jobs)))
WHERE greatest((SELECT max(id) FROM {schema}.jobs), (SELECT max(id) FROM {schema}.finished_jobs))
      > coalesce(pg_sequence_last_value('{schema}.jobs_id_seq'::regclass), 0);
