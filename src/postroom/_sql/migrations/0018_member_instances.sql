-- postroom migration 0018: every join of a group member gets its own instance token, so an
-- older instance of a static member (member_id=) that comes back after its replacement joined
-- is fenced for good (as Kafka fences a stale group.instance.id), and a refused commit names
-- every partition it refused. `{schema}` is replaced by the quoted schema identifier; literal
-- braces are doubled.
--
-- Membership was keyed by the member id alone: a frozen instance's heartbeat revived the
-- session its replacement had taken over, group_acquire handed it the replacement's leases and
-- epochs, and both delivered and committed the same offsets. Now the members row keeps the
-- token of the instance that joined last; heartbeats, acquires, commits and claims carry the
-- caller's token and an older one is refused (SQLSTATE PRF02, InstanceFenced in Python) for
-- good; a release or leave by an older instance changes nothing. A NULL token (SQL callers, the
-- cursor functions of migrations 0003 and 0004) is not checked: fencing is then by epoch alone,
-- as before.
--
-- The functions gain a trailing p_instance text DEFAULT NULL, so callers that pass the old
-- arguments keep working: each is created under its new signature, granted to the roles that
-- could run the old one, and the old one is dropped.

ALTER TABLE {schema}.members ADD COLUMN instance text;

-- Whether p_instance is refused: not NULL, and the members row of p_member holds the token of
-- another (later) instance. Locks that row FOR SHARE with p_lock, so a join that would replace
-- the token waits for the caller's statement (group_acquire: the old instance must not be
-- handed the leases the new one's join re-epoched). No row (expired and dropped): not fenced,
-- the heartbeat registers it again.
CREATE FUNCTION {schema}._instance_fenced(p_group text, p_member text, p_instance text,
                                          p_lock boolean DEFAULT false)
RETURNS boolean
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    current text;
BEGIN
    IF p_instance IS NULL OR p_member IS NULL THEN
        RETURN false;
    END IF;
    IF p_lock THEN
        SELECT m.instance INTO current FROM {schema}.members m
        WHERE m.group_name = p_group AND m.member_id = p_member FOR SHARE;
    ELSE
        SELECT m.instance INTO current FROM {schema}.members m
        WHERE m.group_name = p_group AND m.member_id = p_member;
    END IF;
    RETURN FOUND AND current IS DISTINCT FROM p_instance;
END;
$$;

-- Raises PRF02: p_member's instance p_instance was replaced by a later join with the same id.
CREATE FUNCTION {schema}._refuse_instance(p_group text, p_member text, p_what text)
RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RAISE EXCEPTION 'member % of group %: a newer instance with this member id joined the group, '
                    'so this one is fenced for good: % refused',
        quote_literal(p_member), quote_literal(p_group), p_what
        USING ERRCODE = 'PRF02',
              HINT = 'stop this process (or close this consumer): its replacement holds the '
                     'partitions; give each concurrent consumer its own member_id';
END;
$$;

-- A member's heartbeat: registers or extends its session and subscription. With p_joining (a
-- new consumer instance, maybe a static member restarting) the row takes p_instance, fencing
-- any older instance with the same id, and the epochs of the leases this member id holds are
-- bumped. Without it, a row holding another instance's token refuses the heartbeat (PRF02) and
-- is left alone: the check and the extension are one upsert. Returns whether the group needs a
-- rebalance and the seconds until the next other member's session expires.
CREATE FUNCTION {schema}.group_heartbeat(
    p_group text, p_member text, p_topic_ids integer[], p_session_ms integer, p_joining boolean,
    p_instance text DEFAULT NULL)
RETURNS TABLE (rebalance boolean, next_expiry double precision)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    assigned_to text[];
BEGIN
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

-- A live member takes the partitions targeted to it that are free (no owner, or an owner whose
-- session expired), each with a new epoch. Leases locked by a batch in flight are skipped (SKIP
-- LOCKED) and taken at a later call. Returns the member's leases: 'owned', 'revoking' (owned,
-- target moved: hand it over after the batch in flight) or 'pending' (target, not yet free).
-- An older instance (p_instance replaced) is refused (PRF02); its members row is locked FOR
-- SHARE for the call, so a join cannot re-epoch the leases between the check and the list.
CREATE FUNCTION {schema}.group_acquire(p_group text, p_member text, p_instance text DEFAULT NULL)
RETURNS TABLE (topic_id integer, partition integer, epoch bigint, state text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF {schema}._instance_fenced(p_group, p_member, p_instance, true) THEN
        PERFORM {schema}._refuse_instance(p_group, p_member, 'acquire');
    END IF;
    IF NOT {schema}._member_live(p_group, p_member) THEN
        RETURN;
    END IF;
    UPDATE {schema}.leases l SET owner = p_member, epoch = nextval('{schema}.lease_epochs')
    FROM (SELECT x.topic_id, x.partition FROM {schema}.leases x
          WHERE x.group_name = p_group AND x.target = p_member
            AND x.owner IS DISTINCT FROM p_member
            AND (x.owner IS NULL OR NOT {schema}._member_live(p_group, x.owner))
          ORDER BY x.topic_id, x.partition
          FOR UPDATE SKIP LOCKED) free
    WHERE l.group_name = p_group AND l.topic_id = free.topic_id AND l.partition = free.partition;
    RETURN QUERY
    SELECT l.topic_id, l.partition, l.epoch,
           CASE WHEN l.owner = p_member AND l.target = p_member THEN 'owned'
                WHEN l.owner = p_member THEN 'revoking'
                ELSE 'pending' END
    FROM {schema}.leases l
    WHERE l.group_name = p_group AND (l.owner = p_member OR l.target = p_member)
    ORDER BY l.topic_id, l.partition;
END;
$$;

-- A member hands partitions back (after its batch in flight): clears the owner where the epoch
-- is still the member's, and wakes the targets. Returns how many were released; an older
-- instance (p_instance replaced) releases nothing.
CREATE FUNCTION {schema}.group_release(
    p_group text, p_member text, p_topic_ids integer[], p_partitions integer[], p_epochs bigint[],
    p_instance text DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
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
        PERFORM pg_notify('postroom_groups', p_group);
    END IF;
    RETURN released;
END;
$$;

-- A clean leave: releases the leases the member holds at the given epochs and deletes its
-- membership, so the others rebalance at once (woken by the notification) instead of waiting
-- out the session timeout. A lease of the same member id at another epoch belongs to a newer
-- instance (a static member restarted): then that lease and the membership stay. An older
-- instance (p_instance replaced) leaves nothing: the row is its replacement's.
CREATE FUNCTION {schema}.group_leave(
    p_group text, p_member text, p_topic_ids integer[], p_partitions integer[], p_epochs bigint[],
    p_instance text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
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
    PERFORM pg_notify('postroom_groups', p_group);
END;
$$;

-- Stores a group's next offsets, never backward. p_member NULL is a manual assignment (no
-- membership): refused (PRF01) on a partition a live member of the group holds. A member's commit
-- is refused on a partition whose lease it does not hold at p_epochs (lost, expired, handed
-- over), and nothing of the call is stored; the error's DETAIL lists every refused partition as
-- a JSON array of [topic id, partition], so the member stops delivering them all at once. An
-- older instance (p_instance replaced) is refused (PRF02). An offset past the high-water mark is
-- refused (PRO01). Lease rows are locked FOR SHARE, so a take-over (or a join re-epoching them)
-- waits for this commit, and cursor rows are created if missing (a deleted group's members keep
-- committing).
CREATE FUNCTION {schema}.commit_offsets(
    p_group text, p_member text, p_topic_ids integer[], p_partitions integer[], p_epochs bigint[],
    p_offsets bigint[], p_instance text DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    bad record;
    lost jsonb;
    stored integer;
BEGIN
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

-- Transactional consumption: locks the first cursor (in the given order) with unread messages and
-- no other claimer (FOR UPDATE SKIP LOCKED), reads up to p_limit messages from it and advances
-- the cursor past them, all in the caller's transaction. For a member the lease is checked at
-- its epoch and locked FOR SHARE until the caller commits, so the partition cannot be handed over
-- mid-batch; a lost lease raises PRF01. p_member NULL (manual partitions) skips partitions a
-- live member holds. An older instance (p_instance replaced) is refused (PRF02).
CREATE FUNCTION {schema}.claim_batch(
    p_group text, p_member text, p_topic_ids integer[], p_partitions integer[], p_epochs bigint[],
    p_limit integer, p_instance text DEFAULT NULL)
RETURNS TABLE (topic_id integer, partition integer, "offset" bigint, key bytea, value bytea,
               headers jsonb, created_at timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    chosen record;
    lost record;
BEGIN
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

-- The new signatures: none for PUBLIC (grant_consumer grants them); every role that could run
-- an old one may run its successor; then the old ones go (callers passing the old arguments
-- now reach the new ones, p_instance NULL).
REVOKE EXECUTE ON FUNCTION
    {schema}.group_heartbeat(text, text, integer[], integer, boolean, text),
    {schema}.group_acquire(text, text, text),
    {schema}.group_release(text, text, integer[], integer[], bigint[], text),
    {schema}.group_leave(text, text, integer[], integer[], bigint[], text),
    {schema}.commit_offsets(text, text, integer[], integer[], bigint[], bigint[], text),
    {schema}.claim_batch(text, text, integer[], integer[], bigint[], integer, text)
FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION
    {schema}._instance_fenced(text, text, text, boolean),
    {schema}._refuse_instance(text, text, text)
FROM PUBLIC;

DO $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT rol.rolname, f.old_sig, f.new_sig
        FROM pg_roles rol
        CROSS JOIN (VALUES
            ('{schema}.group_heartbeat(text, text, integer[], integer, boolean)',
             '{schema}.group_heartbeat(text, text, integer[], integer, boolean, text)'),
            ('{schema}.group_acquire(text, text)', '{schema}.group_acquire(text, text, text)'),
            ('{schema}.group_release(text, text, integer[], integer[], bigint[])',
             '{schema}.group_release(text, text, integer[], integer[], bigint[], text)'),
            ('{schema}.group_leave(text, text, integer[], integer[], bigint[])',
             '{schema}.group_leave(text, text, integer[], integer[], bigint[], text)'),
            ('{schema}.commit_offsets(text, text, integer[], integer[], bigint[], bigint[])',
             '{schema}.commit_offsets(text, text, integer[], integer[], bigint[], bigint[], text)'),
            ('{schema}.claim_batch(text, text, integer[], integer[], bigint[], integer)',
             '{schema}.claim_batch(text, text, integer[], integer[], bigint[], integer, text)')
        ) AS f(old_sig, new_sig)
        WHERE NOT rol.rolsuper
          AND rol.oid <> (SELECT relowner FROM pg_class WHERE oid = '{schema}.members'::regclass)
          AND EXISTS (SELECT FROM pg_proc p, aclexplode(p.proacl) acl
                      WHERE p.oid = f.old_sig::regprocedure AND acl.grantee = rol.oid
                        AND acl.privilege_type = 'EXECUTE')
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', r.new_sig::regprocedure, r.rolname);
    END LOOP;
END;
$$;

DROP FUNCTION {schema}.group_heartbeat(text, text, integer[], integer, boolean);
DROP FUNCTION {schema}.group_acquire(text, text);
DROP FUNCTION {schema}.group_release(text, text, integer[], integer[], bigint[]);
DROP FUNCTION {schema}.group_leave(text, text, integer[], integer[], bigint[]);
DROP FUNCTION {schema}.commit_offsets(text, text, integer[], integer[], bigint[], bigint[]);
DROP FUNCTION {schema}.claim_batch(text, text, integer[], integer[], bigint[], integer);
