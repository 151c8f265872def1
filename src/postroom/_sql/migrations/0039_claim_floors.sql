-- postroom migration 0039: claims that start where the worker's last claim left off (issue 19,
-- a pinned vacuum horizon). New functions and grants only: the claim of migration 0020 stays
-- as it is (workers of an older postroom keep claiming through it).
-- docs/queue.md "Claim floors".
-- `{schema}` is replaced by the quoted schema identifier; literal braces are doubled.

-- Why: a claim moves a job out of the ready index's predicate, but the old version's entry
-- stays until VACUUM removes it, and while a transaction holds the vacuum horizon (a session
-- idle in transaction, a REPEATABLE READ reader, a standby's feedback) VACUUM may not. A claim
-- that scans the queue's ready entries from the start visits the heap for every job claimed
-- since the horizon was pinned before it reaches a ready one: 75 ms a claim after 300,000
-- jobs (bench/RESULTS.md). A floor lets the scan start past them.

-- The claim of migration 0020, each queue's scan starting at a floor: (floor_priorities[i],
-- floor_run_ats[i]) for queues[i], the position in claim order (priority, run_at) below which
-- the worker expects no ready job of that queue. Two ordered scans a queue: every priority
-- before the floor's (more urgent jobs are never held back by a floor), then from the floor
-- on. A NULL floor scans the whole queue, as migration 0020's claim does. With job limits the
-- floors are ignored (migration 0020's limited path). A job that sorts below its queue's
-- floor (a rescued job keeps its run_at; a job enqueued with a past run_at, or by a
-- transaction that stayed open longer than the worker's margin) is found by
-- jobs_below_floors, and the worker lowers its floor. FOR UPDATE SKIP LOCKED, row locks on
-- the claimed jobs only.
CREATE FUNCTION {schema}.claim_jobs(queues text[], max_jobs integer, worker text, lease interval,
                                    floor_priorities smallint[], floor_run_ats timestamptz[])
RETURNS SETOF {schema}.jobs
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    now_ts timestamptz := clock_timestamp();
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
    IF EXISTS (SELECT 1 FROM {schema}.job_limits) THEN
        RETURN QUERY SELECT * FROM {schema}.claim_jobs(queues, max_jobs, worker, lease);
        RETURN;
    END IF;
    PERFORM {schema}._check_queue_access(queues);
    RETURN QUERY
    UPDATE {schema}.jobs j
    SET state = 'running', attempts = j.attempts + 1, worker = claim_jobs.worker,
        lease_expires_at = now_ts + lease, started_at = now_ts,
        claim_token = (SELECT gen_random_uuid())  -- one per claim: an InitPlan
    -- id = ANY(ARRAY(...)): the update finds the picked rows by primary key (migration 0020).
    WHERE j.id = ANY(ARRAY(
        SELECT c.id
        FROM unnest(queues, floor_priorities, floor_run_ats) AS qn(name, fp, ft)
        CROSS JOIN LATERAL (
            -- The first scan's rows all sort before the second's: the second runs only if
            -- the first found fewer than max_jobs. (FOR UPDATE is not allowed in a UNION
            -- branch itself, hence the subqueries.)
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
                      AND (r.priority, r.run_at) >= (qn.fp, qn.ft)  -- NULL floor: no rows
                    ORDER BY r.priority, r.run_at, r.id
                    LIMIT max_jobs
                    FOR UPDATE SKIP LOCKED
                ) from_floor
            ) both_scans
            LIMIT max_jobs
        ) c
        WHERE NOT EXISTS (SELECT 1 FROM {schema}.queue_pauses p WHERE p.queue = qn.name)
        ORDER BY c.priority, c.run_at, c.id
        LIMIT max_jobs
    ))
    RETURNING j.*;
END;
$$;
REVOKE ALL ON FUNCTION {schema}.claim_jobs(text[], integer, text, interval, smallint[],
                                           timestamptz[]) FROM PUBLIC;

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
