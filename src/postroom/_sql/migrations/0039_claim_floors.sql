-- postroom migration 0039: claims that start where the worker's last claim left off (issue 19,
-- a pinned vacuum horizon). The claim gains floors in a new overload; migration 0020's claim
-- (workers of an older postroom claim through it) becomes that overload without floors.
-- docs/queue.md "Claim floors".
-- `{schema}` is replaced by the quoted schema identifier; literal braces are doubled.

-- Why: a claim moves a job out of the ready index's predicate, but the old version's entry
-- stays until VACUUM removes it, and while a transaction holds the vacuum horizon (a session
-- idle in transaction, a REPEATABLE READ reader, a standby's feedback) VACUUM may not. A claim
-- that scans the queue's ready entries from the start visits the heap for every job claimed
-- since the horizon was pinned before it reaches a ready one: 75 ms a claim after 300,000
-- jobs (bench/RESULTS.md). A floor lets the scan start past them.

-- One queue's claim of the limited path (migration 0020's _claim_some, which it replaces), its
-- scans from the floor (fp, ft) as claim_jobs's below. Runs as claim_jobs's owner.
DROP FUNCTION {schema}._claim_some(text, text, text[], integer, text, interval, timestamptz);
CREATE FUNCTION {schema}._claim_some(q text, only_kind text, excluded text[], want integer,
                                     worker text, lease interval, now_ts timestamptz,
                                     fp smallint, ft timestamptz)
RETURNS SETOF {schema}.jobs
LANGUAGE sql AS $$
    UPDATE {schema}.jobs j
    SET state = 'running', attempts = j.attempts + 1, worker = _claim_some.worker,
        lease_expires_at = now_ts + lease, started_at = now_ts,
        claim_token = (SELECT gen_random_uuid())
    WHERE j.id = ANY(ARRAY(
        SELECT s.id FROM (
            SELECT * FROM (
                SELECT r.id FROM {schema}.jobs r
                WHERE r.state = 'ready' AND r.queue = q AND r.run_at <= now_ts
                  AND (only_kind IS NULL OR r.kind = only_kind)
                  AND (excluded IS NULL OR r.kind <> ALL(excluded))
                  AND r.priority < coalesce(fp::integer, 32768)
                ORDER BY r.priority, r.run_at, r.id
                LIMIT want
                FOR UPDATE SKIP LOCKED
            ) before_floor
            UNION ALL
            SELECT * FROM (
                SELECT r.id FROM {schema}.jobs r
                WHERE r.state = 'ready' AND r.queue = q AND r.run_at <= now_ts
                  AND (only_kind IS NULL OR r.kind = only_kind)
                  AND (excluded IS NULL OR r.kind <> ALL(excluded))
                  AND (r.priority, r.run_at) >= (fp, ft)
                ORDER BY r.priority, r.run_at, r.id
                LIMIT want
                FOR UPDATE SKIP LOCKED
            ) from_floor
        ) s
        LIMIT want
    ))
    RETURNING j.*;
$$;
REVOKE ALL ON FUNCTION {schema}._claim_some(text, text, text[], integer, text, interval,
                                            timestamptz, smallint, timestamptz) FROM PUBLIC;

-- The claim of migration 0020, each queue's scan starting at a floor: (floor_priorities[i],
-- floor_run_ats[i]) for queues[i], the position in claim order (priority, run_at) below which
-- the worker expects no ready job of that queue. Two ordered scans a queue: every priority
-- before the floor's (more urgent jobs are never held back by a floor), then from the floor
-- on. A NULL floor scans the whole queue, as migration 0020's claim did. A job that sorts
-- below its queue's floor (a rescued job keeps its run_at; a job enqueued with a past run_at,
-- or by a transaction that stayed open longer than the worker's margin) is found by
-- jobs_below_floors, and the worker lowers its floor. FOR UPDATE SKIP LOCKED, row locks on the
-- claimed jobs only; with job limits, the limit rows FOR UPDATE (migration 0020).
CREATE FUNCTION {schema}.claim_jobs(queues text[], max_jobs integer, worker text, lease interval,
                                    floor_priorities smallint[], floor_run_ats timestamptz[])
RETURNS SETOF {schema}.jobs
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    lim {schema}.job_limits;
    now_ts timestamptz := clock_timestamp();
    kind_names text[] := '{{}}';
    kind_allow integer[] := '{{}}';
    queue_allow integer;
    want integer;
    remaining integer := max_jobs;
    got integer;
    q text;
    i integer;
    k integer;
BEGIN
    IF queues IS NULL OR max_jobs IS NULL OR worker IS NULL OR lease IS NULL
       OR floor_priorities IS NULL OR floor_run_ats IS NULL THEN
        RAISE EXCEPTION 'claim_jobs(): no argument may be NULL (a NULL floor is an element)'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF cardinality(floor_priorities) <> cardinality(queues)
       OR cardinality(floor_run_ats) <> cardinality(queues) THEN
        RAISE EXCEPTION 'claim_jobs(): % queues but % floor priorities and % floor run_ats: '
                        'one floor a queue', cardinality(queues),
                        cardinality(floor_priorities), cardinality(floor_run_ats)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM {schema}._check_queue_access(queues);
    IF EXISTS (SELECT 1 FROM {schema}.queue_pauses) THEN
        SELECT coalesce(array_agg(u.q ORDER BY u.i), '{{}}'),
               coalesce(array_agg(u.fp ORDER BY u.i), '{{}}'),
               coalesce(array_agg(u.ft ORDER BY u.i), '{{}}')
        INTO queues, floor_priorities, floor_run_ats
        FROM unnest(queues, floor_priorities, floor_run_ats) WITH ORDINALITY AS u(q, fp, ft, i)
        WHERE NOT EXISTS (SELECT 1 FROM {schema}.queue_pauses p WHERE p.queue = u.q);
    END IF;
    IF NOT EXISTS (SELECT 1 FROM {schema}.job_limits) THEN
        RETURN QUERY
        UPDATE {schema}.jobs j
        SET state = 'running', attempts = j.attempts + 1, worker = claim_jobs.worker,
            lease_expires_at = now_ts + lease, started_at = now_ts,
            claim_token = (SELECT gen_random_uuid())  -- one per claim: an InitPlan
        -- id = ANY(ARRAY(...)): the update finds the picked rows by primary key (0020).
        WHERE j.id = ANY(ARRAY(
            SELECT c.id
            FROM unnest(queues, floor_priorities, floor_run_ats) AS qn(name, fp, ft)
            CROSS JOIN LATERAL (
                -- The first scan's rows all sort before the second's: the second runs only
                -- if the first found fewer than max_jobs. (FOR UPDATE is not allowed in a
                -- UNION branch itself, hence the subqueries.)
                SELECT * FROM (
                    SELECT * FROM (
                        SELECT r.id, r.priority, r.run_at FROM {schema}.jobs r
                        WHERE r.state = 'ready' AND r.queue = qn.name AND r.run_at <= now_ts
                          AND r.priority < coalesce(qn.fp::integer, 32768)
                        ORDER BY r.priority, r.run_at, r.id
                        LIMIT max_jobs
                        FOR UPDATE SKIP LOCKED
                    ) before_floor
                    UNION ALL
                    SELECT * FROM (
                        SELECT r.id, r.priority, r.run_at FROM {schema}.jobs r
                        WHERE r.state = 'ready' AND r.queue = qn.name AND r.run_at <= now_ts
                          AND (r.priority, r.run_at) >= (qn.fp, qn.ft)  -- NULL floor: none
                        ORDER BY r.priority, r.run_at, r.id
                        LIMIT max_jobs
                        FOR UPDATE SKIP LOCKED
                    ) from_floor
                ) both_scans
                LIMIT max_jobs
            ) c
            ORDER BY c.priority, c.run_at, c.id
            LIMIT max_jobs
        ))
        RETURNING j.*;
        RETURN;
    END IF;
    -- Limited path (migration 0020's): what each limited kind may still start now, then per
    -- queue the limited kinds first, each up to its allowance, then every other kind.
    FOR lim IN
        SELECT * FROM {schema}.job_limits l
        WHERE l.scope = 'kind' OR (l.scope = 'queue' AND l.name = ANY(queues))
        ORDER BY l.scope, l.name
        FOR UPDATE
    LOOP
        IF lim.scope = 'kind' THEN
            kind_names := kind_names || lim.name;
            kind_allow := kind_allow || {schema}._limit_allowance(lim, now_ts);
        END IF;
    END LOOP;
    FOR i IN 1 .. cardinality(queues) LOOP
        EXIT WHEN remaining <= 0;
        q := queues[i];
        SELECT * INTO lim FROM {schema}.job_limits l WHERE l.scope = 'queue' AND l.name = q;
        queue_allow := CASE WHEN FOUND THEN {schema}._limit_allowance(lim, now_ts)
                            ELSE remaining END;
        FOR k IN 1 .. coalesce(array_length(kind_names, 1), 0) LOOP
            want := least(remaining, queue_allow, kind_allow[k]);
            CONTINUE WHEN want <= 0;
            RETURN QUERY SELECT * FROM {schema}._claim_some(q, kind_names[k], NULL, want, worker,
                                                             lease, now_ts, floor_priorities[i],
                                                             floor_run_ats[i]);
            GET DIAGNOSTICS got = ROW_COUNT;
            kind_allow[k] := kind_allow[k] - got;
            remaining := remaining - got;
            queue_allow := queue_allow - got;
            PERFORM {schema}._limit_spend('kind', kind_names[k], got, now_ts);
            PERFORM {schema}._limit_spend('queue', q, got, now_ts);
        END LOOP;
        want := least(remaining, queue_allow);
        IF want > 0 THEN
            RETURN QUERY SELECT * FROM {schema}._claim_some(q, NULL, kind_names, want, worker,
                                                             lease, now_ts, floor_priorities[i],
                                                             floor_run_ats[i]);
            GET DIAGNOSTICS got = ROW_COUNT;
            remaining := remaining - got;
            PERFORM {schema}._limit_spend('queue', q, got, now_ts);
        END IF;
    END LOOP;
END;
$$;
REVOKE ALL ON FUNCTION {schema}.claim_jobs(text[], integer, text, interval, smallint[],
                                           timestamptz[]) FROM PUBLIC;

-- Migration 0020's claim, now the one above without floors (every queue scanned whole): for
-- workers of an older postroom, and SQL callers. Same signature and rights; a NULL argument is
-- now refused (22004) instead of claiming nothing or failing on a constraint.
CREATE OR REPLACE FUNCTION {schema}.claim_jobs(queues text[], max_jobs integer, worker text,
                                               lease interval)
RETURNS SETOF {schema}.jobs
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT * FROM {schema}.claim_jobs(
        queues, max_jobs, worker, lease,
        array_fill(NULL::smallint, ARRAY[coalesce(cardinality(queues), 0)]),
        array_fill(NULL::timestamptz, ARRAY[coalesce(cardinality(queues), 0)]));
$$;

-- For each queue with a floor, the earliest due ready job below it (same priority, an earlier
-- run_at: every other priority is scanned by the claim), if any: the worker then lowers that
-- floor. No locks; only queues the caller may use (_check_queue_access). Behind a pinned
-- horizon this walks the dead entries the claim skips, so the worker runs it off the claim's
-- path, on a timer that stretches with its cost.
CREATE FUNCTION {schema}.jobs_below_floors(queues text[], floor_priorities smallint[],
                                           floor_run_ats timestamptz[])
RETURNS TABLE (queue text, run_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF queues IS NULL OR floor_priorities IS NULL OR floor_run_ats IS NULL THEN
        RAISE EXCEPTION 'jobs_below_floors(): no argument may be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF cardinality(floor_priorities) <> cardinality(queues)
       OR cardinality(floor_run_ats) <> cardinality(queues) THEN
        RAISE EXCEPTION 'jobs_below_floors(): % queues but % floor priorities and % floor '
                        'run_ats: one floor a queue', cardinality(queues),
                        cardinality(floor_priorities), cardinality(floor_run_ats)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM {schema}._check_queue_access(queues);
    RETURN QUERY
    SELECT qn.name, b.run_at
    FROM unnest(queues, floor_priorities, floor_run_ats) AS qn(name, fp, ft)
    CROSS JOIN LATERAL (
        SELECT r.run_at FROM {schema}.jobs r
        WHERE r.state = 'ready' AND r.queue = qn.name AND r.priority = qn.fp
          AND r.run_at < qn.ft AND r.run_at <= clock_timestamp()
        ORDER BY r.run_at
        LIMIT 1
    ) b;
END;
$$;
REVOKE ALL ON FUNCTION {schema}.jobs_below_floors(text[], smallint[], timestamptz[])
    FROM PUBLIC;

-- A parent succeeded (migration 0006's, otherwise unchanged): a dependent it releases is due
-- from its release (run_at no earlier than now), as a job enqueued then. It kept its enqueue's
-- run_at before, which sorts below the floor of a worker that claimed meanwhile: each step of a
-- workflow or a sequence then waited for the floor watch (up to about a second) on a busy queue.
CREATE OR REPLACE FUNCTION {schema}._parent_succeeded(parent bigint)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    child bigint;
    released text;
BEGIN
    FOR child IN
        SELECT d.job_id FROM {schema}.job_dependencies d WHERE d.parent_id = parent
        ORDER BY d.job_id
    LOOP
        PERFORM 1 FROM {schema}.jobs WHERE id = child FOR UPDATE;
        DELETE FROM {schema}.job_dependencies WHERE parent_id = parent AND job_id = child;
        UPDATE {schema}.jobs j
        SET state = 'ready', run_at = greatest(j.run_at, now()),
            last_error = CASE WHEN j.state = 'held' THEN NULL ELSE j.last_error END
        WHERE j.id = child AND j.state IN ('waiting', 'held')
          AND NOT EXISTS (SELECT 1 FROM {schema}.job_dependencies d WHERE d.job_id = child)
        RETURNING j.queue INTO released;
        IF released IS NOT NULL THEN
            PERFORM pg_notify('postroom_jobs', '{schema}:' || released);
        END IF;
    END LOOP;
END;
$$;

-- Existing worker roles (EXECUTE on migration 0020's claim_jobs) get what grant_worker_0039
-- now gives: the two functions above.
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT DISTINCT rol.rolname
        FROM pg_proc f, aclexplode(f.proacl) x, pg_roles rol
        WHERE f.oid = '{schema}.claim_jobs(text[], integer, text, interval)'::regprocedure
          AND x.privilege_type = 'EXECUTE' AND rol.oid = x.grantee AND x.grantee <> f.proowner
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s, %s TO %I',
                       '{schema}.claim_jobs(text[], integer, text, interval, smallint[], '
                       'timestamptz[])'::regprocedure,
                       '{schema}.jobs_below_floors(text[], smallint[], timestamptz[])'
                           ::regprocedure, r.rolname);
    END LOOP;
END;
$$;
