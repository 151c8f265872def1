-- postroom migration 0038: the worker registry (issue 17, Workers page): every running job
-- worker, idle ones included, with its host, pid, queues, concurrency, since when it runs and
-- its last heartbeat. New objects and grants only: no existing function is replaced.
-- docs/queue.md "The worker registry", docs/roles.md "Worker registry".
-- `{schema}` is replaced by the quoted schema identifier; literal braces are doubled.

-- One row per running worker, keyed by its name (jobs.worker of the jobs it holds). Written
-- only through the functions below: register_worker at start, worker_heartbeat every heartbeat
-- (expires_at = the beat + the worker's lease: past it the worker is gone, as its jobs' leases
-- are), unregister_worker on a clean stop; the rescuer of any worker deletes rows gone for a
-- while (prune_workers), so a crashed worker shows as gone, then disappears. role_name is the
-- session role that registered it: no other role may overwrite, beat or delete the row. A
-- handful of rows: no index but the key (a beat updates no indexed column: a HOT update).
CREATE TABLE {schema}.workers (
    worker       text PRIMARY KEY CHECK (length(worker) BETWEEN 1 AND 200),
    role_name    text NOT NULL,
    host         text NOT NULL CHECK (length(host) <= 255),
    pid          integer NOT NULL,
    queues       text[] NOT NULL,
    concurrency  integer NOT NULL CHECK (concurrency >= 1),
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL
) WITH (fillfactor = 50);  -- room for the heartbeats' HOT updates

-- Registers worker p_worker (host p_host, process p_pid, serving p_queues with p_concurrency
-- slots), alive for p_ttl from now: started now. Only in queues the caller may use
-- (_check_queue_access, as a claim). A row of the same name that the caller's role registered
-- is replaced (a restarted worker of a fixed name); false, and nothing written, if another
-- role's worker has the name. Row lock on that row only.
CREATE FUNCTION {schema}.register_worker(p_worker text, p_host text, p_pid integer,
                                         p_queues text[], p_concurrency integer, p_ttl interval)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    missing text;
BEGIN
    missing := CASE WHEN p_worker IS NULL THEN 'p_worker' WHEN p_host IS NULL THEN 'p_host'
                    WHEN p_pid IS NULL THEN 'p_pid' WHEN p_queues IS NULL THEN 'p_queues'
                    WHEN p_concurrency IS NULL THEN 'p_concurrency'
                    WHEN p_ttl IS NULL THEN 'p_ttl' END;
    IF missing IS NOT NULL THEN
        RAISE EXCEPTION 'register_worker(): argument % must not be NULL', missing
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF length(p_worker) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'register_worker(): p_worker must be 1 to 200 characters, not %',
            length(p_worker) USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_concurrency < 1 THEN
        RAISE EXCEPTION 'register_worker(): p_concurrency % must be 1 or more', p_concurrency
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_ttl < interval '1 second' OR p_ttl > interval '1 day' THEN
        RAISE EXCEPTION 'register_worker(): p_ttl % must be from 1 second to 1 day', p_ttl
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM {schema}._check_queue_access(p_queues);
    INSERT INTO {schema}.workers AS w
        (worker, role_name, host, pid, queues, concurrency, expires_at)
    VALUES (p_worker, session_user, left(p_host, 255), p_pid, p_queues, p_concurrency,
            now() + p_ttl)
    ON CONFLICT (worker) DO UPDATE
        SET host = excluded.host, pid = excluded.pid, queues = excluded.queues,
            concurrency = excluded.concurrency, started_at = now(), heartbeat_at = now(),
            expires_at = excluded.expires_at
        WHERE w.role_name = session_user;
    RETURN FOUND;
END;
$$;
REVOKE ALL ON FUNCTION {schema}.register_worker(text, text, integer, text[], integer, interval)
    FROM PUBLIC;

-- Worker p_worker's heartbeat: alive for p_ttl from now. False if the caller's role has no row
-- of that name (pruned while the worker was stopped, say: it registers again). Row lock on it.
CREATE FUNCTION {schema}.worker_heartbeat(p_worker text, p_ttl interval) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF p_ttl IS NULL THEN
        RAISE EXCEPTION 'worker_heartbeat(): argument p_ttl must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF p_ttl < interval '1 second' OR p_ttl > interval '1 day' THEN
        RAISE EXCEPTION 'worker_heartbeat(): p_ttl % must be from 1 second to 1 day', p_ttl
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    UPDATE {schema}.workers w SET heartbeat_at = now(), expires_at = now() + p_ttl
    WHERE w.worker = p_worker AND w.role_name = session_user;
    RETURN FOUND;
END;
$$;
REVOKE ALL ON FUNCTION {schema}.worker_heartbeat(text, interval) FROM PUBLIC;

-- Removes worker p_worker's row (a clean stop), if the caller's role registered it; whether
-- one was removed. Row lock on it.
CREATE FUNCTION {schema}.unregister_worker(p_worker text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    DELETE FROM {schema}.workers w WHERE w.worker = p_worker AND w.role_name = session_user;
    RETURN FOUND;
END;
$$;
REVOKE ALL ON FUNCTION {schema}.unregister_worker(text) FROM PUBLIC;

-- Deletes the rows of workers gone (expires_at passed) for longer than p_gone_for, whoever
-- registered them: their process stopped beating (a crash, a kill); returns how many. Row
-- locks on those rows, skipping any another pruner holds.
CREATE FUNCTION {schema}.prune_workers(p_gone_for interval) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    removed integer;
BEGIN
    IF p_gone_for IS NULL THEN
        RAISE EXCEPTION 'prune_workers(): argument p_gone_for must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF p_gone_for < interval '0' THEN
        RAISE EXCEPTION 'prune_workers(): p_gone_for % must be 0 or more', p_gone_for
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    DELETE FROM {schema}.workers w
    WHERE w.worker = ANY(ARRAY(SELECT g.worker FROM {schema}.workers g
                               WHERE g.expires_at < now() - p_gone_for
                               FOR UPDATE SKIP LOCKED));
    GET DIAGNOSTICS removed = ROW_COUNT;
    RETURN removed;
END;
$$;
REVOKE ALL ON FUNCTION {schema}.prune_workers(interval) FROM PUBLIC;

-- Existing worker roles (EXECUTE on claim_jobs) get what grant_worker_0038 now gives: the four
-- functions above. Roles that read jobs (the dashboard's read-only role: SELECT on jobs) may
-- read the registry too.
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
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s, %s, %s, %s TO %I',
                       '{schema}.register_worker(text, text, integer, text[], integer, interval)'
                           ::regprocedure,
                       '{schema}.worker_heartbeat(text, interval)'::regprocedure,
                       '{schema}.unregister_worker(text)'::regprocedure,
                       '{schema}.prune_workers(interval)'::regprocedure, r.rolname);
    END LOOP;
    FOR r IN
        SELECT DISTINCT rol.rolname
        FROM pg_class c, aclexplode(c.relacl) x, pg_roles rol
        WHERE c.oid = '{schema}.jobs'::regclass
          AND x.privilege_type = 'SELECT' AND rol.oid = x.grantee AND x.grantee <> c.relowner
    LOOP
        EXECUTE format('GRANT SELECT ON %s TO %I', '{schema}.workers'::regclass, r.rolname);
    END LOOP;
END;
$$;
