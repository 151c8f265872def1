-- postroom migration 0004: consumer group membership, partition leases with fencing epochs, and
-- the SECURITY DEFINER functions members use (docs/log.md, "Consumer groups").
--
-- A rebalance runs under the group row lock (FOR NO KEY UPDATE, so members' heartbeats, whose
-- foreign key checks take FOR KEY SHARE, never wait for it): it reads the live members, computes
-- the sticky assignment in Python (postroom.log.assignment) and writes each partition's target.
-- The holder of a partition (owner) hands it over cooperatively: it releases the lease once its
-- in-flight batch is committed or abandoned; the target then takes it with a new epoch. A commit
-- carries the epoch it was read under and is refused (SQLSTATE PRF01) when it is not current.

CREATE SEQUENCE {schema}.lease_epochs;

CREATE TABLE {schema}.groups (
    group_name  text PRIMARY KEY CHECK (group_name ~ '^[A-Za-z0-9][A-Za-z0-9._-]{{0,199}}$'),
    generation  bigint NOT NULL DEFAULT 0,
    -- The live members the last rebalance assigned to, sorted: a heartbeat that finds another
    -- set (a join, a leave, an expiry) asks for a rebalance.
    members     text[] NOT NULL DEFAULT '{{}}',
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE {schema}.members (
    group_name       text NOT NULL REFERENCES {schema}.groups (group_name) ON DELETE CASCADE,
    member_id        text NOT NULL CHECK (member_id ~ '^[A-Za-z0-9][A-Za-z0-9._:-]{{0,199}}$'),
    topic_ids        integer[] NOT NULL,
    session_timeout  interval NOT NULL CHECK (session_timeout > interval '0'),
    expires_at       timestamptz NOT NULL,
    joined_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (group_name, member_id)
);

-- Who holds each partition of a group (owner) and who should (target). A member's ownership is
-- valid while its members row is live (expires_at in the future) and the epoch is unchanged.
CREATE TABLE {schema}.leases (
    group_name  text NOT NULL REFERENCES {schema}.groups (group_name) ON DELETE CASCADE,
    topic_id    integer NOT NULL,
    partition   integer NOT NULL,
    owner       text,
    target      text,
    epoch       bigint NOT NULL,
    PRIMARY KEY (group_name, topic_id, partition),
    FOREIGN KEY (topic_id, partition) REFERENCES {schema}.partitions (topic_id, partition)
        ON DELETE CASCADE
) WITH (fillfactor = 70);

-- Whether member_id is a live member of the group (its session has not expired).
CREATE FUNCTION {schema}._member_live(p_group text, p_member text) RETURNS boolean
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
RETURN EXISTS (SELECT FROM {schema}.members m
               WHERE m.group_name = p_group AND m.member_id = p_member AND m.expires_at > now());

-- Ends the caller's transaction if it idles past the member's session timeout: a member paused
-- (SIGSTOP, GC) between taking its lease locks and committing must not hold them for ever.
-- Transaction-local (set_config(..., true)); no locks.
CREATE FUNCTION {schema}._guard_idle(p_group text, p_member text) RETURNS void
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
    SELECT set_config('idle_in_transaction_session_timeout',
                      coalesce((SELECT (extract(epoch FROM m.session_timeout) * 1000)::bigint
                                FROM {schema}.members m
                                WHERE m.group_name = p_group AND m.member_id = p_member),
                               10000)::text || 'ms',
                      true);
$$;

-- A member's heartbeat: registers or extends its session and subscription. With p_joining (a
-- new consumer instance, maybe a static member restarting) it bumps the epochs of the leases
-- this member id holds, fencing any older instance with the same id. Returns whether the group
-- needs a rebalance and the seconds until the next other member's session expires.
CREATE FUNCTION {schema}.group_heartbeat(
    p_group text, p_member text, p_topic_ids integer[], p_session_ms integer, p_joining boolean)
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
    INSERT INTO {schema}.members AS m (group_name, member_id, topic_ids, session_timeout, expires_at)
    VALUES (p_group, p_member, p_topic_ids, p_session_ms * interval '1 millisecond',
            now() + p_session_ms * interval '1 millisecond')
    ON CONFLICT (group_name, member_id) DO UPDATE
    SET topic_ids = excluded.topic_ids, session_timeout = excluded.session_timeout,
        expires_at = excluded.expires_at;
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

-- Rebalance, step 1: locks the group row (FOR NO KEY UPDATE: one rebalance at a time; members'
-- heartbeats go on), deletes expired members and returns the live ones with their subscriptions.
-- The lock lasts until the caller's transaction ends (group_assign commits it).
CREATE FUNCTION {schema}.group_lock(p_group text)
RETURNS TABLE (member_id text, topic_ids integer[])
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM FROM {schema}.groups g WHERE g.group_name = p_group FOR NO KEY UPDATE;
    DELETE FROM {schema}.members m WHERE m.group_name = p_group AND m.expires_at <= now();
    RETURN QUERY SELECT m.member_id, m.topic_ids FROM {schema}.members m
    WHERE m.group_name = p_group ORDER BY m.member_id;
END;
$$;

-- Rebalance, step 2: every partition of the given topics with its live holder (the target if it
-- is live, else the owner if live, else NULL), the input of the sticky assignment. No locks.
CREATE FUNCTION {schema}.group_holders(p_group text, p_topic_ids integer[])
RETURNS TABLE (topic_id integer, partition integer, holder text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT p.topic_id, p.partition,
           CASE WHEN {schema}._member_live(p_group, l.target) THEN l.target
                WHEN {schema}._member_live(p_group, l.owner) THEN l.owner END
    FROM {schema}.partitions p
    LEFT JOIN {schema}.leases l
      ON l.group_name = p_group AND l.topic_id = p.topic_id AND l.partition = p.partition
    WHERE p.topic_id = ANY(p_topic_ids)
    ORDER BY p.topic_id, p.partition;
$$;

-- Rebalance, step 3 (under group_lock): writes the new targets, drops leases of partitions no
-- live member reads, and wakes the members (notification at commit). Lease rows locked by a
-- batch in flight (FOR SHARE in claim_batch/commit_offsets) are skipped, never waited for: then
-- the member set is not recorded, so the next heartbeat asks for the rebalance again. Otherwise
-- records the member set and bumps the generation. Returns the generation, NULL if incomplete.
CREATE FUNCTION {schema}.group_assign(
    p_group text, p_members text[], p_topic_ids integer[], p_partitions integer[],
    p_targets text[])
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    new_generation bigint;
BEGIN
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

-- A live member takes the partitions targeted to it that are free (no owner, or an owner whose
-- session expired), each with a new epoch. Leases locked by a batch in flight are skipped (SKIP
-- LOCKED) and taken at a later call. Returns the member's leases: 'owned', 'revoking' (owned,
-- target moved: hand it over after the batch in flight) or 'pending' (target, not yet free).
CREATE FUNCTION {schema}.group_acquire(p_group text, p_member text)
RETURNS TABLE (topic_id integer, partition integer, epoch bigint, state text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
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
-- is still the member's, and wakes the targets. Returns how many were released.
CREATE FUNCTION {schema}.group_release(
    p_group text, p_member text, p_topic_ids integer[], p_partitions integer[], p_epochs bigint[])
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    released integer;
BEGIN
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
-- instance (a static member restarted): then that lease and the membership stay.
CREATE FUNCTION {schema}.group_leave(
    p_group text, p_member text, p_topic_ids integer[], p_partitions integer[], p_epochs bigint[])
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM {schema}.group_release(p_group, p_member, p_topic_ids, p_partitions, p_epochs);
    DELETE FROM {schema}.members m
    WHERE m.group_name = p_group AND m.member_id = p_member
      AND NOT EXISTS (SELECT FROM {schema}.leases l
                      WHERE l.group_name = p_group AND l.owner = p_member);
    PERFORM pg_notify('postroom_groups', p_group);
END;
$$;

-- Stores a group's next offsets, never backward. p_member NULL is a manual assignment (no
-- membership): refused (PRF01) on a partition a live member of the group holds. A member's commit
-- is refused on a partition whose lease it does not hold at p_epochs (lost, expired, handed
-- over), and nothing of the call is stored. An offset past the high-water mark is refused
-- (PRO01). Lease rows are locked FOR SHARE, so a take-over waits for this commit, and cursor
-- rows are created if missing (a deleted group's members keep committing).
CREATE FUNCTION {schema}.commit_offsets(
    p_group text, p_member text, p_topic_ids integer[], p_partitions integer[], p_epochs bigint[],
    p_offsets bigint[])
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    bad record;
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
        PERFORM {schema}._guard_idle(p_group, p_member);
        SELECT a.topic_id, a.partition INTO bad
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
                            '(session expired or handed over): commit refused',
                quote_literal(p_member), quote_literal(p_group), bad.partition, bad.topic_id
                USING ERRCODE = 'PRF01';
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
-- live member holds.
CREATE FUNCTION {schema}.claim_batch(
    p_group text, p_member text, p_topic_ids integer[], p_partitions integer[], p_epochs bigint[],
    p_limit integer)
RETURNS TABLE (topic_id integer, partition integer, "offset" bigint, key bytea, value bytea,
               headers jsonb, created_at timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    chosen record;
    lost record;
BEGIN
    IF p_member IS NOT NULL THEN
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

-- SQL API for consumers in any language. They take no part in the assignment: like a consumer
-- with manual partitions they are refused (PRF01) on a partition a live member of the group
-- holds. Use a group of their own, or see docs/log.md ("Consuming from SQL").

-- The topic id of p_topic, or an error naming it.
CREATE FUNCTION {schema}._topic_id(p_topic text) RETURNS integer
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    found integer;
BEGIN
    SELECT t.id INTO found FROM {schema}.topics t WHERE t.name = p_topic;
    IF found IS NULL THEN
        RAISE EXCEPTION 'unknown topic %', quote_literal(p_topic) USING ERRCODE = 'no_data_found';
    END IF;
    RETURN found;
END;
$$;

-- Claims up to p_limit messages of one partition for p_group and advances its cursor past them,
-- in the caller's transaction: commit your own writes with it (exactly-once effects), or roll
-- back and the messages come again. Locks the cursor row (FOR UPDATE, waiting) until the
-- caller's transaction ends; creates the cursor at the earliest retained offset if missing.
CREATE FUNCTION {schema}.consume(p_group text, p_topic text, p_partition integer,
                                 p_limit integer DEFAULT 100)
RETURNS TABLE ("offset" bigint, key bytea, value bytea, headers jsonb,
               created_at timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    tid integer := {schema}._topic_id(p_topic);
    holder text;
    start_at bigint;
BEGIN
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

-- Stores p_group's next offset on one partition (forward only; refused past the high-water mark
-- or on a partition a live member holds), for consumers that read with SELECT and commit later.
CREATE FUNCTION {schema}.commit(p_group text, p_topic text, p_partition integer,
                                p_next_offset bigint) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT {schema}.commit_offsets(p_group, NULL, ARRAY[{schema}._topic_id(p_topic)],
                                   ARRAY[p_partition], NULL, ARRAY[p_next_offset]);
$$;

-- Moves p_group's cursor on one partition to p_offset (backwards too: an explicit reset),
-- within 0 .. high-water mark. Row lock on the cursor.
CREATE FUNCTION {schema}.seek(p_group text, p_topic text, p_partition integer, p_offset bigint)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    tid integer := {schema}._topic_id(p_topic);
    high bigint;
BEGIN
    SELECT p.next_offset INTO high FROM {schema}.partitions p
    WHERE p.topic_id = tid AND p.partition = p_partition;
    IF high IS NULL OR p_offset IS NULL OR p_offset < 0 OR p_offset > high THEN
        RAISE EXCEPTION 'offset % is out of range for partition % of topic %: allowed 0..%',
            p_offset, p_partition, quote_literal(p_topic), coalesce(high, 0)
            USING ERRCODE = 'PRO01';
    END IF;
    INSERT INTO {schema}.cursors AS c (group_name, topic_id, partition, next_offset)
    VALUES (p_group, tid, p_partition, p_offset)
    ON CONFLICT (group_name, topic_id, partition)
    DO UPDATE SET next_offset = excluded.next_offset, updated_at = now();
END;
$$;

-- p_group's lag per partition of p_topic: committed offset, high-water mark, lag (no locks).
CREATE FUNCTION {schema}.lag(p_group text, p_topic text)
RETURNS TABLE (partition integer, committed bigint, high_water bigint, lag bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT p.partition, c.next_offset, p.next_offset,
           greatest(p.next_offset - coalesce(c.next_offset, 0), 0)
    FROM {schema}.partitions p
    LEFT JOIN {schema}.cursors c
      ON c.group_name = p_group AND c.topic_id = p.topic_id AND c.partition = p.partition
    WHERE p.topic_id = {schema}._topic_id(p_topic)
    ORDER BY p.partition;
$$;

-- Migration 0003's cursor functions, kept for their callers but held to the same rules: a
-- partition added to a topic a group already reads starts at the earliest offset whatever the
-- reset policy (its messages are all new to the group), and commits and claims without a member
-- are refused on partitions a live member holds (they were a way around fencing).
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
$$;

CREATE OR REPLACE FUNCTION {schema}.commit_cursors(group_name text, topic_ids integer[],
                                                   partitions integer[], offsets bigint[])
RETURNS integer
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT {schema}.commit_offsets(commit_cursors.group_name, NULL, topic_ids, partitions, NULL,
                                   offsets);
$$;

CREATE OR REPLACE FUNCTION {schema}.claim_range(group_name text, topic_ids integer[],
                                                partitions integer[], max_messages integer)
RETURNS TABLE (topic_id integer, partition integer, "offset" bigint, key bytea, value bytea,
               headers jsonb, created_at timestamptz)
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT * FROM {schema}.claim_batch(claim_range.group_name, NULL, topic_ids, partitions,
                                       NULL, max_messages);
$$;

-- SECURITY DEFINER functions are executable by PUBLIC unless revoked; grant_consumer grants them.
REVOKE EXECUTE ON FUNCTION
    {schema}.group_heartbeat(text, text, integer[], integer, boolean),
    {schema}.group_lock(text),
    {schema}.group_holders(text, integer[]),
    {schema}.group_assign(text, text[], integer[], integer[], text[]),
    {schema}.group_acquire(text, text),
    {schema}.group_release(text, text, integer[], integer[], bigint[]),
    {schema}.group_leave(text, text, integer[], integer[], bigint[]),
    {schema}.commit_offsets(text, text, integer[], integer[], bigint[], bigint[]),
    {schema}.claim_batch(text, text, integer[], integer[], bigint[], integer),
    {schema}.consume(text, text, integer, integer),
    {schema}.commit(text, text, integer, bigint),
    {schema}.seek(text, text, integer, bigint),
    {schema}.lag(text, text)
FROM PUBLIC;

-- Roles granted "consumer" before this migration (they can run ensure_cursors) get the group
-- functions too.
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT rol.rolname FROM pg_roles rol
        WHERE NOT rol.rolsuper
          AND rol.oid <> (SELECT relowner FROM pg_class WHERE oid = '{schema}.cursors'::regclass)
          AND has_function_privilege(
                  rol.oid, '{schema}.ensure_cursors(text, integer[], integer[], text)'::regprocedure,
                  'EXECUTE')
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s TO %I',
            '{schema}.group_heartbeat(text, text, integer[], integer, boolean)'::regprocedure,
            '{schema}.group_lock(text)'::regprocedure,
            '{schema}.group_holders(text, integer[])'::regprocedure,
            '{schema}.group_assign(text, text[], integer[], integer[], text[])'::regprocedure,
            '{schema}.group_acquire(text, text)'::regprocedure,
            '{schema}.group_release(text, text, integer[], integer[], bigint[])'::regprocedure,
            '{schema}.group_leave(text, text, integer[], integer[], bigint[])'::regprocedure,
            '{schema}.commit_offsets(text, text, integer[], integer[], bigint[], bigint[])'::regprocedure,
            '{schema}.claim_batch(text, text, integer[], integer[], bigint[], integer)'::regprocedure,
            '{schema}.consume(text, text, integer, integer)'::regprocedure,
            '{schema}.commit(text, text, integer, bigint)'::regprocedure,
            '{schema}.seek(text, text, integer, bigint)'::regprocedure,
            '{schema}.lag(text, text)'::regprocedure,
            r.rolname);
    END LOOP;
END;
$$;
