-- postroom migration 0008: the worker role works through SECURITY DEFINER functions only.
-- `{schema}` is replaced by the quoted schema identifier; literal braces are doubled.
--
-- Every statement a worker issues (claim, heartbeat, write-backs, rescue, purge, limits, cron
-- schedules, start-up checks) is a function running with the owner's rights and a pinned
-- search_path, so the worker role needs no table rights: it cannot read the args of jobs it does
-- not hold, set a state, rewrite args, insert a job in any state or touch another worker's lease.
-- Each write-back is the statement it was (one statement per batch, arrays in, rows found by
-- primary key), wrapped in a LANGUAGE sql function, fenced by worker name and attempt.

-- The claim: unchanged, now with the owner's rights (plpgsql caches its plans per session as
-- before).
ALTER FUNCTION {schema}.claim_jobs(text[], integer, text, interval)
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

-- Finishes successful jobs held by worker_name at the given attempts: moves them to
-- finished_jobs with their results (row locks on the deleted rows).
CREATE FUNCTION {schema}.complete_jobs_archived(worker_name text, job_ids bigint[],
                                                job_attempts integer[], job_results jsonb[])
RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    WITH finished AS (
        DELETE FROM {schema}.jobs j
        WHERE j.id = ANY(job_ids)
          AND j.attempts = job_attempts[array_position(job_ids, j.id)]
          AND j.worker = worker_name AND j.lease_expires_at IS NOT NULL
        RETURNING j.*, job_results[array_position(job_ids, j.id)] AS result
    )
    INSERT INTO {schema}.finished_jobs (id, queue, kind, args, priority, run_at, attempts,
                                        max_attempts, state, worker, last_error, unique_key,
                                        result, created_at, started_at)
    SELECT id, queue, kind, args, priority, run_at, attempts, max_attempts, 'done', worker,
           last_error, unique_key, result, created_at, started_at
    FROM finished;
$$;

-- Finishes successful jobs without keeping them (row locks on the deleted rows).
CREATE FUNCTION {schema}.complete_jobs_deleted(worker_name text, job_ids bigint[],
                                               job_attempts integer[])
RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    DELETE FROM {schema}.jobs j
    WHERE j.id = ANY(job_ids)
      AND j.attempts = job_attempts[array_position(job_ids, j.id)]
      AND j.worker = worker_name AND j.lease_expires_at IS NOT NULL;
$$;

-- Records failed attempts: back to ready after the delay, or failed (row locks).
CREATE FUNCTION {schema}.fail_jobs(worker_name text, job_ids bigint[], job_attempts integer[],
                                   job_errors text[], job_delays float8[],
                                   job_finals boolean[])
RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    UPDATE {schema}.jobs j
    SET state = CASE WHEN c.final OR j.attempts >= j.max_attempts THEN 'failed' ELSE 'ready' END,
        run_at = clock_timestamp() + make_interval(secs => c.delay),
        last_error = c.error, lease_expires_at = NULL
    FROM (
        SELECT j2.id, job_errors[pos] AS error, job_delays[pos] AS delay,
               job_finals[pos] AS final
        FROM {schema}.jobs j2,
             LATERAL array_position(job_ids, j2.id) AS pos
        WHERE j2.id = ANY(job_ids)
          AND j2.attempts = job_attempts[pos]
          AND j2.worker = worker_name AND j2.lease_expires_at IS NOT NULL
    ) c
    WHERE j.id = c.id AND j.worker = worker_name AND j.lease_expires_at IS NOT NULL;
$$;

-- Gives back claimed jobs unrun: ready at once; unstarted ones get their attempt back.
CREATE FUNCTION {schema}.release_jobs(worker_name text, job_ids bigint[],
                                      job_attempts integer[], job_started boolean[],
                                      reason text)
RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    UPDATE {schema}.jobs j
    SET state = CASE WHEN c.started AND j.attempts >= j.max_attempts THEN 'failed'
                     ELSE 'ready' END,
        attempts = CASE WHEN c.started THEN j.attempts ELSE j.attempts - 1 END,
        run_at = clock_timestamp(), lease_expires_at = NULL,
        last_error = CASE WHEN c.started THEN reason ELSE j.last_error END
    FROM (
        SELECT j2.id, job_started[pos] AS started
        FROM {schema}.jobs j2,
             LATERAL array_position(job_ids, j2.id) AS pos
        WHERE j2.id = ANY(job_ids)
          AND j2.attempts = job_attempts[pos]
          AND j2.worker = worker_name AND j2.lease_expires_at IS NOT NULL
    ) c
    WHERE j.id = c.id AND j.worker = worker_name AND j.lease_expires_at IS NOT NULL;
$$;

-- Moves held running jobs whose cancellation took effect to finished_jobs as cancelled.
CREATE FUNCTION {schema}.finish_cancelled_jobs(worker_name text, job_ids bigint[],
                                               job_attempts integer[], job_reasons text[])
RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    WITH finished AS (
        DELETE FROM {schema}.jobs j
        WHERE j.id = ANY(job_ids)
          AND j.attempts = job_attempts[array_position(job_ids, j.id)]
          AND j.worker = worker_name AND j.lease_expires_at IS NOT NULL
        RETURNING j.*, job_reasons[array_position(job_ids, j.id)] AS reason
    )
    INSERT INTO {schema}.finished_jobs (id, queue, kind, args, priority, run_at, attempts,
                                        max_attempts, state, worker, last_error, unique_key,
                                        created_at, started_at)
    SELECT id, queue, kind, args, priority, run_at, attempts, max_attempts, 'cancelled', worker,
           coalesce(reason, 'cancelled while running'), unique_key, created_at, started_at
    FROM finished;
$$;

-- Puts snoozed held jobs back to ready after their delay, attempt given back (row locks).
CREATE FUNCTION {schema}.snooze_jobs(worker_name text, job_ids bigint[],
                                     job_attempts integer[], job_delays float8[])
RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    UPDATE {schema}.jobs j
    SET state = 'ready', attempts = j.attempts - 1, lease_expires_at = NULL,
        run_at = clock_timestamp() + make_interval(secs => c.delay)
    FROM (
        SELECT j2.id, job_delays[pos] AS delay
        FROM {schema}.jobs j2,
             LATERAL array_position(job_ids, j2.id) AS pos
        WHERE j2.id = ANY(job_ids)
          AND j2.attempts = job_attempts[pos]
          AND j2.worker = worker_name AND j2.lease_expires_at IS NOT NULL
    ) c
    WHERE j.id = c.id AND j.worker = worker_name AND j.lease_expires_at IS NOT NULL;
$$;

-- Extends the leases of the held jobs (HOT row updates); returns those still held with their
-- cancellation flag.
CREATE FUNCTION {schema}.heartbeat_jobs(worker_name text, job_ids bigint[],
                                        job_attempts integer[], lease interval)
RETURNS TABLE (id bigint, cancel_requested boolean)
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    UPDATE {schema}.jobs j
    SET lease_expires_at = clock_timestamp() + lease
    WHERE j.id = ANY(job_ids)
      AND j.attempts = job_attempts[array_position(job_ids, j.id)]
      AND j.worker = worker_name AND j.lease_expires_at IS NOT NULL
    RETURNING j.id, j.cancel_requested;
$$;

-- Returns up to `batch` running jobs whose lease expired to ready (failed when attempts are
-- used up; cancelled ones finish as cancelled). FOR UPDATE SKIP LOCKED. Returns how many.
CREATE FUNCTION {schema}.rescue_expired_jobs(batch integer)
RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    WITH expired AS (
        SELECT id FROM {schema}.jobs
        WHERE state = 'running' AND lease_expires_at < clock_timestamp()
        ORDER BY id
        LIMIT batch
        FOR UPDATE SKIP LOCKED
    ), cancelled AS (
        DELETE FROM {schema}.jobs j USING expired e
        WHERE j.id = e.id AND j.cancel_requested
        RETURNING j.*
    ), archived AS (
        INSERT INTO {schema}.finished_jobs (id, queue, kind, args, priority, run_at, attempts,
                                            max_attempts, state, worker, last_error, unique_key,
                                            created_at, started_at)
        SELECT id, queue, kind, args, priority, run_at, attempts, max_attempts, 'cancelled',
               worker, 'cancelled; its worker stopped heartbeating', unique_key, created_at,
               started_at
        FROM cancelled
    ), rescued AS (
        UPDATE {schema}.jobs j
        SET state = CASE WHEN j.attempts >= j.max_attempts THEN 'failed' ELSE 'ready' END,
            lease_expires_at = NULL,
            last_error = format('lease expired: worker %s stopped heartbeating during attempt %s',
                                j.worker, j.attempts)
        FROM expired e
        WHERE j.id = e.id AND NOT j.cancel_requested
        RETURNING j.id
    )
    SELECT (SELECT count(*) FROM rescued) + (SELECT count(*) FROM cancelled);
$$;

-- Deletes up to `batch` finished (done or cancelled) jobs that finished before the cutoff, for
-- the worker's keep_finished retention; returns how many (row locks on them).
CREATE FUNCTION {schema}.purge_finished_jobs(cutoff timestamptz, job_state text, job_kind text,
                                             batch integer)
RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    WITH purged AS (
        DELETE FROM {schema}.finished_jobs
        WHERE id IN (
            SELECT id FROM {schema}.finished_jobs
            WHERE finished_at < cutoff AND (job_state IS NULL OR state = job_state)
              AND (job_kind IS NULL OR kind = job_kind)
            LIMIT batch
        )
        RETURNING 1
    )
    SELECT count(*) FROM purged;
$$;

-- Kinds not in `kinds` with jobs due for longer than `threshold`, from at most 1000 such jobs
-- (names and counts only, no args; no locks).
CREATE FUNCTION {schema}.waiting_unregistered_kinds(threshold interval, kinds text[])
RETURNS TABLE (queue text, kind text, jobs bigint, waited interval)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT w.queue, w.kind, count(*), max(clock_timestamp() - w.run_at)
    FROM (
        SELECT j.queue, j.kind, j.run_at FROM {schema}.jobs j
        WHERE j.state = 'ready' AND j.run_at < clock_timestamp() - threshold
          AND j.kind <> ALL(kinds)
        LIMIT 1000
    ) AS w
    GROUP BY w.queue, w.kind
    ORDER BY w.queue, w.kind;
$$;

-- Which of the queues have (or had, and kept) a job (no locks).
CREATE FUNCTION {schema}.queues_ever_used(queues text[])
RETURNS SETOF text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT q FROM unnest(queues) AS q
    WHERE EXISTS (SELECT 1 FROM {schema}.jobs j WHERE j.queue = q)
       OR EXISTS (SELECT 1 FROM {schema}.finished_jobs f WHERE f.queue = q);
$$;

-- Creates or replaces one concurrency/rate limit (row lock on it); the bucket starts full.
CREATE FUNCTION {schema}.set_job_limit(limit_scope text, limit_name text,
                                       limit_max_running integer, limit_rate float8,
                                       limit_burst float8)
RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    INSERT INTO {schema}.job_limits AS l (scope, name, max_running, rate, burst, tokens,
                                          refilled_at)
    VALUES (limit_scope, limit_name, limit_max_running, limit_rate, limit_burst,
            coalesce(limit_burst, 0), clock_timestamp())
    ON CONFLICT (scope, name) DO UPDATE
    SET max_running = excluded.max_running, rate = excluded.rate, burst = excluded.burst,
        tokens = least(coalesce(excluded.burst, 0), l.tokens);
$$;

-- Removes one limit (row lock on it).
CREATE FUNCTION {schema}.delete_job_limit(limit_scope text, limit_name text)
RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    DELETE FROM {schema}.job_limits WHERE scope = limit_scope AND name = limit_name;
$$;

-- Registers a periodic job (row lock on its schedule row). An unchanged cron keeps its next
-- tick; a changed one starts from the tick the caller computed.
CREATE FUNCTION {schema}.upsert_schedule(schedule_name text, schedule_cron text,
                                         schedule_kind text, schedule_queue text,
                                         schedule_args jsonb, schedule_priority integer,
                                         schedule_max_attempts integer, first_run_at timestamptz)
RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    INSERT INTO {schema}.job_schedules AS s (name, cron, kind, queue, args, priority,
                                             max_attempts, next_run_at)
    VALUES (schedule_name, schedule_cron, schedule_kind, schedule_queue, schedule_args,
            schedule_priority, schedule_max_attempts, first_run_at)
    ON CONFLICT (name) DO UPDATE
    SET cron = excluded.cron, kind = excluded.kind, queue = excluded.queue, args = excluded.args,
        priority = excluded.priority, max_attempts = excluded.max_attempts,
        next_run_at = CASE WHEN s.cron = excluded.cron THEN s.next_run_at
                           ELSE excluded.next_run_at END,
        updated_at = now();
$$;

-- Locks the given schedules whose tick has come (FOR UPDATE SKIP LOCKED, held until the
-- caller's transaction ends) and returns them with the database clock.
CREATE FUNCTION {schema}.due_schedules(names text[])
RETURNS TABLE (name text, cron text, kind text, queue text, args jsonb, priority smallint,
               max_attempts integer, next_run_at timestamptz, now timestamptz)
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT s.name, s.cron, s.kind, s.queue, s.args, s.priority, s.max_attempts, s.next_run_at,
           clock_timestamp()
    FROM {schema}.job_schedules s
    WHERE s.name = ANY(names) AND s.next_run_at <= clock_timestamp()
    ORDER BY s.name
    FOR UPDATE SKIP LOCKED;
$$;

-- Moves a due schedule from its current tick to a later one (row lock on it). Only forward and
-- only from the tick it is at: a second call for the same tick changes nothing.
CREATE FUNCTION {schema}.advance_schedule(schedule_name text, tick timestamptz,
                                          following timestamptz)
RETURNS boolean
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    WITH moved AS (
        UPDATE {schema}.job_schedules s SET next_run_at = following, last_run_at = tick
        WHERE s.name = schedule_name AND s.next_run_at = tick AND following > tick
        RETURNING 1
    )
    SELECT EXISTS (SELECT 1 FROM moved);
$$;

-- The earliest next tick among the given schedules, from now (no locks).
CREATE FUNCTION {schema}.next_schedule_at(names text[])
RETURNS interval
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT min(s.next_run_at) - clock_timestamp() FROM {schema}.job_schedules s
    WHERE s.name = ANY(names);
$$;

-- Functions run with their owner's rights: only the roles granted EXECUTE may call them.
REVOKE EXECUTE ON FUNCTION
    {schema}.claim_jobs(text[], integer, text, interval),
    {schema}.complete_jobs_archived(text, bigint[], integer[], jsonb[]),
    {schema}.complete_jobs_deleted(text, bigint[], integer[]),
    {schema}.fail_jobs(text, bigint[], integer[], text[], float8[], boolean[]),
    {schema}.release_jobs(text, bigint[], integer[], boolean[], text),
    {schema}.finish_cancelled_jobs(text, bigint[], integer[], text[]),
    {schema}.snooze_jobs(text, bigint[], integer[], float8[]),
    {schema}.heartbeat_jobs(text, bigint[], integer[], interval),
    {schema}.rescue_expired_jobs(integer),
    {schema}.purge_finished_jobs(timestamptz, text, text, integer),
    {schema}.waiting_unregistered_kinds(interval, text[]),
    {schema}.queues_ever_used(text[]),
    {schema}.set_job_limit(text, text, integer, float8, float8),
    {schema}.delete_job_limit(text, text),
    {schema}.upsert_schedule(text, text, text, text, jsonb, integer, integer, timestamptz),
    {schema}.due_schedules(text[]),
    {schema}.advance_schedule(text, timestamptz, timestamptz),
    {schema}.next_schedule_at(text[])
FROM PUBLIC;

-- Roles granted "worker" before this migration had table rights on the queue tables. They are
-- the non-owners with DELETE on jobs but not TRUNCATE (an admin's rights are ALL): take the
-- table rights back and grant the functions instead. Admins get the new functions too.
DO $$
DECLARE
    r record;
    owner_oid oid := (SELECT relowner FROM pg_class WHERE oid = '{schema}.jobs'::regclass);
    functions text := concat_ws(', ',
        '{schema}.claim_jobs(text[], integer, text, interval)'::regprocedure,
        '{schema}.complete_jobs_archived(text, bigint[], integer[], jsonb[])'::regprocedure,
        '{schema}.complete_jobs_deleted(text, bigint[], integer[])'::regprocedure,
        '{schema}.fail_jobs(text, bigint[], integer[], text[], float8[], boolean[])'::regprocedure,
        '{schema}.release_jobs(text, bigint[], integer[], boolean[], text)'::regprocedure,
        '{schema}.finish_cancelled_jobs(text, bigint[], integer[], text[])'::regprocedure,
        '{schema}.snooze_jobs(text, bigint[], integer[], float8[])'::regprocedure,
        '{schema}.heartbeat_jobs(text, bigint[], integer[], interval)'::regprocedure,
        '{schema}.rescue_expired_jobs(integer)'::regprocedure,
        '{schema}.purge_finished_jobs(timestamptz, text, text, integer)'::regprocedure,
        '{schema}.waiting_unregistered_kinds(interval, text[])'::regprocedure,
        '{schema}.queues_ever_used(text[])'::regprocedure,
        '{schema}.set_job_limit(text, text, integer, float8, float8)'::regprocedure,
        '{schema}.delete_job_limit(text, text)'::regprocedure,
        '{schema}.upsert_schedule(text, text, text, text, jsonb, integer, integer, timestamptz)'::regprocedure,
        '{schema}.due_schedules(text[])'::regprocedure,
        '{schema}.advance_schedule(text, timestamptz, timestamptz)'::regprocedure,
        '{schema}.next_schedule_at(text[])'::regprocedure);
BEGIN
    FOR r IN
        SELECT DISTINCT rol.rolname
        FROM pg_class c, aclexplode(c.relacl) x, pg_roles rol
        WHERE c.oid = '{schema}.jobs'::regclass AND x.privilege_type IN ('DELETE', 'TRUNCATE')
          AND rol.oid = x.grantee AND x.grantee <> owner_oid
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', functions, r.rolname);
    END LOOP;
    FOR r IN
        SELECT rol.rolname FROM pg_roles rol
        WHERE rol.oid <> owner_oid
          AND has_table_privilege(rol.oid, '{schema}.jobs'::regclass, 'DELETE')
          AND NOT has_table_privilege(rol.oid, '{schema}.jobs'::regclass, 'TRUNCATE')
          AND EXISTS (SELECT 1 FROM pg_class c, aclexplode(c.relacl) x
                      WHERE c.oid = '{schema}.jobs'::regclass AND x.grantee = rol.oid)
    LOOP
        EXECUTE format('REVOKE SELECT, INSERT, UPDATE, DELETE ON %s, %s, %s, %s, %s FROM %I',
                       '{schema}.jobs'::regclass, '{schema}.finished_jobs'::regclass,
                       '{schema}.job_limits'::regclass, '{schema}.job_schedules'::regclass,
                       '{schema}.job_dependencies'::regclass, r.rolname);
        EXECUTE format('REVOKE SELECT ON %s, %s FROM %I', '{schema}.all_jobs'::regclass,
                       '{schema}.queue_pauses'::regclass, r.rolname);
    END LOOP;
END;
$$;

-- Consumer groups belong to roles. A group belongs to the first login role (session_user: a
-- SECURITY DEFINER function runs as its owner, but session_user stays the role that logged
-- in) that changes its state without being an admin, and to the roles an admin shares it with
-- (client.grant(role, "consumer", groups=[...])). Admins, the roles that may write the cursors
-- table themselves (the schema owner, superusers, roles granted "admin"), use every group and
-- claim none. Triggers on every table holding a group's state (cursors, groups, members,
-- leases) enforce it, so every function that commits, claims, seeks, joins or leaves is
-- covered, whichever migration defines it.
CREATE TABLE {schema}.group_roles (
    group_name  text NOT NULL,
    role_oid    oid NOT NULL,
    owner       boolean NOT NULL DEFAULT false,     -- false: shared by an admin
    granted_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (group_name, role_oid)
);
-- One owner per group: of two roles claiming a new group at once, the second waits and loses.
CREATE UNIQUE INDEX group_roles_owner_idx ON {schema}.group_roles (group_name) WHERE owner;

-- Raises insufficient_privilege unless the session's login role may change p_group's state;
-- a group no role holds yet is claimed for it (row lock on the new group_roles row).
CREATE FUNCTION {schema}._authorize_group(p_group text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    holders text;
BEGIN
    IF has_table_privilege(session_user, '{schema}.cursors'::regclass, 'UPDATE') THEN
        RETURN;  -- an admin: it could write the table itself
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
        INSERT INTO {schema}.group_roles (group_name, role_oid, owner)
        SELECT p_group, r.oid, true FROM pg_roles r
        WHERE r.rolname = session_user
          AND NOT EXISTS (SELECT FROM {schema}.group_roles g WHERE g.group_name = p_group)
        ON CONFLICT DO NOTHING;
        IF FOUND THEN
            RETURN;
        END IF;
        -- Held by someone, or another session claimed it just now: look again.
    END LOOP;
    SELECT string_agg(quote_ident(r.rolname), ', ' ORDER BY r.rolname) INTO holders
    FROM {schema}.group_roles g JOIN pg_roles r ON r.oid = g.role_oid
    WHERE g.group_name = p_group;
    RAISE EXCEPTION 'permission denied for consumer group %: it belongs to role %, and role % is not a member',
        quote_literal(p_group), coalesce(holders, '(none)'), quote_ident(session_user)
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'use a group of your own, or have an admin share this one: '
                     'client.grant(role, ''consumer'', groups=[...])';
END;
$$;

-- Trigger: a row of a group's state is written; only the group's roles (and admins) may.
-- The common cases (an admin; a role of the group) are answered here, without a further call.
CREATE FUNCTION {schema}._check_group_access()
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
    IF NOT EXISTS (SELECT FROM {schema}.group_roles g
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

CREATE TRIGGER cursors_group_access BEFORE INSERT OR UPDATE OR DELETE ON {schema}.cursors
    FOR EACH ROW EXECUTE FUNCTION {schema}._check_group_access();
CREATE TRIGGER groups_group_access BEFORE INSERT OR UPDATE OR DELETE ON {schema}.groups
    FOR EACH ROW EXECUTE FUNCTION {schema}._check_group_access();
CREATE TRIGGER members_group_access BEFORE INSERT OR UPDATE OR DELETE ON {schema}.members
    FOR EACH ROW EXECUTE FUNCTION {schema}._check_group_access();
CREATE TRIGGER leases_group_access BEFORE INSERT OR UPDATE OR DELETE ON {schema}.leases
    FOR EACH ROW EXECUTE FUNCTION {schema}._check_group_access();

REVOKE EXECUTE ON FUNCTION {schema}._authorize_group(text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION {schema}._check_group_access() FROM PUBLIC;
