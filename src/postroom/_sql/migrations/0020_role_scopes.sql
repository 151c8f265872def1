-- postroom migration 0020: a role cannot be turned against the others (issue 23, items 1, 2, 3,
-- 5 and 6). docs/roles.md has the table of what each role may do.
-- `{schema}` is replaced by the quoted schema identifier; literal braces are doubled.
--
--  1. Every column of a message the database trusts is checked on the COPY path too: offsets
--     (migration 0003), key, value and header sizes and shape (the CHECKs of 0003), and now
--     created_at, which must come from the server's clock.
--  2. A reservation is filled in its transaction or not at all: a deferred constraint trigger
--     refuses a commit that leaves reserved offsets unwritten (no gap in the offsets).
--  3. A worker's write-backs are fenced by a per-claim token that only the claiming connection
--     learns (the worker name and attempt leak through job_outcome's last_error).
--  5. Queue roles are scoped to queues (queue_roles): enqueue, claim, read outcomes, purge,
--     limit and schedule only in the queues a role is granted.
--  6. enqueue, enqueue_batch and schedules refuse an infinite or absurd run_at.

-- 1. created_at from the server's clock ------------------------------------------------------

-- The statement trigger of migration 0003, one aggregate more: every row's created_at must be
-- this transaction's start (the column default, now()) or a later reading of the server's clock
-- within this transaction (clock_timestamp() here bounds them all). A producer copying
-- 'infinity' there made every reader of the partition fail in the driver. One pass over the
-- statement's rows, as before: no per-row trigger on the COPY path.
CREATE OR REPLACE FUNCTION {schema}._check_reserved_offsets()
RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    bad record;
BEGIN
    SELECT n.topic_id, n.partition, n.lo, n.hi, n.t_lo, n.t_hi,
           p.reserved_by IS DISTINCT FROM pg_current_xact_id()
           OR n.lo < p.reserved_from OR n.hi >= p.next_offset AS unreserved
    INTO bad
    FROM (SELECT w.topic_id, w.partition, min(w."offset") AS lo, max(w."offset") AS hi,
                 min(w.created_at) AS t_lo, max(w.created_at) AS t_hi
          FROM written w GROUP BY w.topic_id, w.partition) AS n
    LEFT JOIN {schema}.partitions p ON p.topic_id = n.topic_id AND p.partition = n.partition
    WHERE p.reserved_by IS DISTINCT FROM pg_current_xact_id()
       OR n.lo < p.reserved_from OR n.hi >= p.next_offset
       OR n.t_lo < now() OR n.t_hi > clock_timestamp()
    LIMIT 1;
    IF FOUND AND bad.unreserved THEN
        RAISE EXCEPTION 'offsets %..% of topic id % partition % were not reserved by this '
                        'transaction: write messages with publish() or reserve_offsets()',
                        bad.lo, bad.hi, bad.topic_id, bad.partition
            USING ERRCODE = 'check_violation', CONSTRAINT = 'messages_offsets_reserved';
    ELSIF FOUND THEN
        RAISE EXCEPTION 'invalid created_at % of a message of topic id % partition %: it is '
                        'set by the server (leave the column out, its default is now())',
                        CASE WHEN bad.t_lo < now() THEN bad.t_lo ELSE bad.t_hi END,
                        bad.topic_id, bad.partition
            USING ERRCODE = 'check_violation', CONSTRAINT = 'messages_created_at_server';
    END IF;
    RETURN NULL;
END;
$$;

-- 2. A reservation is filled before its transaction commits ----------------------------------

-- At commit, once per partition a transaction reserved offsets on: every offset of its range
-- [reserved_from, next_offset) must hold a message. The statement trigger above keeps each
-- written row inside the range and the primary key keeps offsets unique, so a count equal to
-- the range's size means the range is full. Otherwise the commit fails and the reservation
-- is rolled back with it: the high-water mark never covers an offset that holds nothing.
-- One primary-key range count per reserved partition per transaction (on rows the transaction
-- just wrote, in cache).
CREATE FUNCTION {schema}._check_reservation_filled()
RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    r record;
    filled bigint;
BEGIN
    SELECT p.reserved_by, p.reserved_from, p.next_offset INTO r
    FROM {schema}.partitions p
    WHERE p.topic_id = NEW.topic_id AND p.partition = NEW.partition;
    IF NOT FOUND OR r.reserved_by IS DISTINCT FROM pg_current_xact_id() THEN
        RETURN NULL;  -- the partition is gone (its topic dropped in this transaction)
    END IF;
    SELECT count(*) INTO filled FROM {schema}.messages m
    WHERE m.topic_id = NEW.topic_id AND m.partition = NEW.partition
      AND m."offset" >= r.reserved_from AND m."offset" < r.next_offset;
    IF filled <> r.next_offset - r.reserved_from THEN
        RAISE EXCEPTION 'offsets %..% of topic % partition % were reserved by this transaction '
                        'and % of them written: write every reserved offset before committing',
                        r.reserved_from, r.next_offset - 1,
                        coalesce((SELECT quote_literal(t.name) FROM {schema}.topics t
                                  WHERE t.id = NEW.topic_id), NEW.topic_id::text),
                        NEW.partition, filled
            USING ERRCODE = 'check_violation', CONSTRAINT = 'partitions_reservation_filled';
    END IF;
    RETURN NULL;
END;
$$;

-- Queued when a transaction's first reservation on a partition is recorded (the BEFORE trigger
-- partitions_note_reservation sets reserved_by), checked at commit; later reservations of the
-- same transaction extend the range and queue nothing more.
CREATE CONSTRAINT TRIGGER partitions_reservation_filled
AFTER UPDATE OF next_offset ON {schema}.partitions
DEFERRABLE INITIALLY DEFERRED
FOR EACH ROW WHEN (NEW.reserved_by IS DISTINCT FROM OLD.reserved_by)
EXECUTE FUNCTION {schema}._check_reservation_filled();

REVOKE EXECUTE ON FUNCTION {schema}._check_reservation_filled() FROM PUBLIC;

-- 5. Queue scopes (used by 3 and 6 below) ----------------------------------------------------

-- The queues each role may use as an enqueuer or worker: a queue name, or '*' for every queue
-- (what client.grant(role, "worker") without queues= records, and what roles granted before
-- this migration get). Admins (the schema owner, superusers, roles granted "admin": the roles
-- that may UPDATE jobs themselves) use every queue. A login role may use the queues of the
-- roles it is a member of (session_user: a SECURITY DEFINER function runs as its owner, but
-- session_user stays the role that logged in, as for consumer groups).
CREATE TABLE {schema}.queue_roles (
    queue       text NOT NULL,
    role_oid    oid NOT NULL,
    granted_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue, role_oid),
    CHECK (queue = '*' OR (queue ~ '^[A-Za-z0-9][A-Za-z0-9._-]*$' AND length(queue) <= 200))
);

-- The queues the session's login role may use; NULL for every queue. A few catalog lookups
-- (no locks).
CREATE FUNCTION {schema}._role_queues()
RETURNS text[]
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE
        WHEN has_table_privilege(session_user, '{schema}.jobs'::regclass, 'UPDATE') THEN NULL
        ELSE (SELECT CASE WHEN bool_or(g.queue = '*') THEN NULL
                          ELSE coalesce(array_agg(g.queue), '{{}}') END
              FROM {schema}.queue_roles g JOIN pg_roles r ON r.oid = g.role_oid
              WHERE pg_has_role(session_user, r.oid, 'MEMBER'))
    END;
$$;

-- Raises insufficient_privilege naming the first of `queues` the session's login role may not
-- use (no locks).
CREATE FUNCTION {schema}._check_queue_access(queues text[])
RETURNS void
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    allowed text[] := {schema}._role_queues();
    bad text;
BEGIN
    IF allowed IS NULL THEN
        RETURN;
    END IF;
    SELECT q INTO bad FROM unnest(queues) AS q WHERE NOT coalesce(q = ANY(allowed), false)
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'permission denied for queue %: role % may use %', quote_literal(bad),
            quote_ident(session_user),
            CASE WHEN cardinality(allowed) = 0 THEN 'no queue'
                 ELSE 'queues ' || array_to_string(allowed, ', ') END
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'an admin grants queues: client.grant(role, ''worker'', queues=[...])';
    END IF;
END;
$$;

-- Raises insufficient_privilege if a job of `job_ids` (live or kept) is in a queue the
-- session's login role may not use (no locks). Unknown ids pass: the caller reports them.
CREATE FUNCTION {schema}._check_job_access(job_ids bigint[])
RETURNS void
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    allowed text[] := {schema}._role_queues();
BEGIN
    IF allowed IS NOT NULL THEN
        PERFORM {schema}._check_queue_access(ARRAY(
            SELECT a.queue FROM {schema}.all_jobs a WHERE a.id = ANY(job_ids)));
    END IF;
END;
$$;

-- 6. A run_at readers can show ----------------------------------------------------------------

-- Whether a job's run_at is a time postroom can schedule and every reader can show: from
-- 1900-01-01 to 100 years from now (the longest delay), so not infinite (which broke
-- list_jobs, get_job, job_stats and `postroom job list` in the driver).
CREATE FUNCTION {schema}._run_at_valid(run_at timestamptz)
RETURNS boolean
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
RETURN run_at >= '1900-01-01 00:00:00+00' AND run_at <= now() + interval '100 years';

-- The same bound for any writer (a worker's snooze or retry delay too), checked by the table:
-- fixed dates, as a CHECK must not read the clock. NOT VALID: rows stored before are kept.
ALTER TABLE {schema}.jobs ADD CONSTRAINT jobs_run_at_range
    CHECK (run_at >= '1900-01-01 00:00:00+00' AND run_at < '9000-01-01 00:00:00+00') NOT VALID;

CREATE OR REPLACE FUNCTION {schema}.enqueue_job(
    kind text, args jsonb, queue text, priority integer, run_at timestamptz, delay float8,
    max_attempts integer, unique_key text, after bigint[], sequence_key text,
    on_parent_failure text)
RETURNS TABLE (id bigint, created boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    parents bigint[] := coalesce(after, '{{}}');
    strict_count integer;
    prev bigint;
    p bigint;
    live text;
    done_state text;
    new_state text := 'ready';
    failed_parent bigint;
    failed_how text;
    new_id bigint;
    due timestamptz;
BEGIN
    PERFORM {schema}._check_name('job kind', kind, '^[A-Za-z0-9_][A-Za-z0-9._:-]*$');
    PERFORM {schema}._check_name('queue', queue, '^[A-Za-z0-9][A-Za-z0-9._-]*$');
    IF args IS NULL OR jsonb_typeof(args) <> 'object' THEN
        RAISE EXCEPTION 'invalid args %: a JSON object of argument names to values',
            coalesce(args::text, 'NULL') USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF priority IS NULL OR priority NOT BETWEEN -32768 AND 32767 THEN
        RAISE EXCEPTION 'invalid priority %: an integer from -32768 to 32767 (lower runs first)',
            coalesce(priority::text, 'NULL') USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF max_attempts IS NULL OR max_attempts NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'invalid max_attempts %: an integer from 1 to 1000',
            coalesce(max_attempts::text, 'NULL') USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF unique_key IS NOT NULL AND length(unique_key) NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'invalid unique_key: a non-empty text of at most 1000 characters'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF sequence_key IS NOT NULL AND length(sequence_key) NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'invalid sequence: a non-empty text of at most 1000 characters'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF on_parent_failure IS NULL OR on_parent_failure NOT IN ('hold', 'cancel') THEN
        RAISE EXCEPTION 'invalid on_parent_failure %: ''hold'' or ''cancel''',
            coalesce(quote_literal(on_parent_failure), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF delay IS NOT NULL AND (delay < 0 OR delay > 3155760000 OR delay = 'NaN') THEN
        RAISE EXCEPTION 'invalid delay %: from 0 to 3155760000 seconds (100 years)', delay
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- A waiting job does not hold its key (the unique index covers ready and running jobs),
    -- so its release could collide with another holder: the two do not mix.
    IF unique_key IS NOT NULL AND (cardinality(parents) > 0 OR sequence_key IS NOT NULL) THEN
        RAISE EXCEPTION 'a unique_key cannot be combined with after or sequence'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF array_position(parents, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'invalid after %: job ids, no NULL', parents
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF run_at IS NOT NULL AND NOT {schema}._run_at_valid(run_at) THEN
        RAISE EXCEPTION 'invalid run_at %: a time from 1900-01-01 to 100 years from now', run_at
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM {schema}._check_queue_access(ARRAY[queue]);
    IF cardinality(parents) > 0 THEN
        PERFORM {schema}._check_job_access(parents);
    END IF;
    due := coalesce(run_at, now() + make_interval(secs => coalesce(delay, 0)));
    strict_count := cardinality(parents);

    IF sequence_key IS NOT NULL THEN
        -- The sequence row lock orders enqueuers of one key.
        INSERT INTO {schema}.job_sequences (key, last_job_id) VALUES (sequence_key, 0)
        ON CONFLICT DO NOTHING;
        SELECT s.last_job_id INTO prev FROM {schema}.job_sequences s
        WHERE s.key = sequence_key FOR UPDATE;
        IF prev > 0 AND NOT prev = ANY(parents) THEN
            parents := parents || prev;
        END IF;
    END IF;

    -- Lock and flag the live parents (ascending ids: no deadlock between enqueuers).
    PERFORM 1 FROM (
        SELECT x FROM unnest(parents) AS x ORDER BY x
    ) s, LATERAL (SELECT 1 FROM {schema}.jobs WHERE jobs.id = s.x FOR NO KEY UPDATE) l;
    UPDATE {schema}.jobs j SET has_dependents = true
    WHERE j.id = ANY(parents) AND NOT j.has_dependents;
    FOR i IN 1 .. cardinality(parents) LOOP
        p := parents[i];
        SELECT j.state INTO live FROM {schema}.jobs j WHERE j.id = p;
        IF live IS NULL THEN
            SELECT f.state INTO done_state FROM {schema}.finished_jobs f WHERE f.id = p;
            IF done_state IS NULL AND i <= strict_count THEN
                RAISE EXCEPTION 'parent job % not found: pass jobs that are live or kept',
                    p USING ERRCODE = 'invalid_parameter_value';
            END IF;
            parents[i] := NULL;  -- finished: no edge, unless it was cancelled
            IF done_state = 'cancelled' THEN
                failed_parent := p;
                failed_how := 'was cancelled';
                parents[i] := p;
            END IF;
        ELSIF live = 'failed' THEN
            failed_parent := p;
            failed_how := 'failed';
        END IF;
        IF parents[i] IS NOT NULL AND new_state = 'ready' THEN
            new_state := 'waiting';
        END IF;
    END LOOP;
    parents := array_remove(parents, NULL);
    IF failed_parent IS NOT NULL THEN
        new_state := 'held';
    END IF;

    LOOP
        INSERT INTO {schema}.jobs AS j (kind, args, queue, priority, run_at, max_attempts,
                                        unique_key, state, last_error)
        VALUES (enqueue_job.kind, enqueue_job.args, enqueue_job.queue, enqueue_job.priority,
                due, enqueue_job.max_attempts, enqueue_job.unique_key, new_state,
                CASE WHEN new_state = 'held'
                     THEN format('held: parent job %s %s', failed_parent, failed_how) END)
        ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND state IN ('ready', 'running')
        DO NOTHING
        RETURNING j.id INTO new_id;
        IF new_id IS NOT NULL THEN
            EXIT;
        END IF;
        SELECT j.id INTO new_id FROM {schema}.jobs j
        WHERE j.unique_key = enqueue_job.unique_key AND j.state IN ('ready', 'running');
        IF new_id IS NOT NULL THEN
            RETURN QUERY SELECT new_id, false;
            RETURN;
        END IF;
        -- The holder finished between the insert and the lookup: try again.
    END LOOP;

    INSERT INTO {schema}.job_dependencies (parent_id, job_id, on_failure)
    SELECT x, new_id, on_parent_failure FROM unnest(parents) AS x;
    IF sequence_key IS NOT NULL THEN
        UPDATE {schema}.job_sequences s SET last_job_id = new_id WHERE s.key = sequence_key;
    END IF;
    IF new_state = 'held' AND on_parent_failure = 'cancel' THEN
        PERFORM {schema}._parent_failed(failed_parent, failed_how);
    ELSIF new_state = 'ready' THEN
        PERFORM pg_notify('postroom_jobs', '{schema}:' || enqueue_job.queue);
    END IF;
    RETURN QUERY SELECT new_id, true;
END;
$$;
-- enqueue_batch as in migration 0014, with the run_at, delay and queue checks of enqueue_job.
CREATE OR REPLACE FUNCTION {schema}.enqueue_batch(queues text[], kinds text[], args text[],
                                                  priorities smallint[], run_ats timestamptz[],
                                                  delays float8[], max_attempts integer[],
                                                  unique_keys text[] DEFAULT NULL)
RETURNS TABLE (id bigint, unique_key text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    -- One job per element of args; any other array has one element per job, or one element
    -- for every job.
    n integer := coalesce(cardinality(args), 0);
    one_queue text;
    one_kind text;
    one_priority smallint;
    one_run_at timestamptz;
    one_delay float8;
    one_max_attempts integer;
    bad_run_at timestamptz;
    bad_delay float8;
BEGIN
    IF n = 0 THEN
        RETURN;
    END IF;
    IF coalesce(cardinality(queues), 0) NOT IN (1, n)
       OR coalesce(cardinality(kinds), 0) NOT IN (1, n)
       OR coalesce(cardinality(priorities), 0) NOT IN (1, n)
       OR coalesce(cardinality(run_ats), 0) NOT IN (1, n)
       OR coalesce(cardinality(delays), 0) NOT IN (1, n)
       OR coalesce(cardinality(max_attempts), 0) NOT IN (1, n)
       OR coalesce(cardinality(unique_keys), n) <> n THEN
        RAISE EXCEPTION 'enqueue_batch: % jobs (one per element of args): every other array '
                        'has one element per job or one for all (unique_keys: one per job, or '
                        'NULL)', n
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT r INTO bad_run_at FROM unnest(run_ats) AS r
    WHERE r IS NOT NULL AND NOT {schema}._run_at_valid(r) LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'invalid run_at %: a time from 1900-01-01 to 100 years from now',
            bad_run_at USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT d INTO bad_delay FROM unnest(delays) AS d
    WHERE d < 0 OR d > 3155760000 OR d = 'NaN' LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'invalid delay %: from 0 to 3155760000 seconds (100 years)', bad_delay
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM {schema}._check_queue_access(queues);
    -- Shared values are read once; unnest pads the shorter arrays with NULL, so each column
    -- takes the shared value where there is one, else the job's own.
    IF cardinality(queues) = 1 THEN one_queue := queues[1]; END IF;
    IF cardinality(kinds) = 1 THEN one_kind := kinds[1]; END IF;
    IF cardinality(priorities) = 1 THEN one_priority := priorities[1]; END IF;
    IF cardinality(run_ats) = 1 THEN one_run_at := run_ats[1]; END IF;
    IF cardinality(delays) = 1 THEN one_delay := delays[1]; END IF;
    IF cardinality(max_attempts) = 1 THEN one_max_attempts := max_attempts[1]; END IF;
    IF unique_keys IS NULL THEN
        -- No key, so no conflict to arbitrate: a plain insert.
        RETURN QUERY
        INSERT INTO {schema}.jobs AS j (queue, kind, args, priority, run_at, max_attempts)
        SELECT coalesce(one_queue, b.queue), coalesce(one_kind, b.kind),
               b.args::jsonb, coalesce(one_priority, b.priority),
               coalesce(one_run_at, b.run_at,
                        now() + make_interval(secs => coalesce(one_delay, b.delay, 0))),
               coalesce(one_max_attempts, b.max_attempts)
        FROM unnest(queues, kinds, args, priorities, run_ats, delays, max_attempts)
             WITH ORDINALITY AS b(queue, kind, args, priority, run_at, delay, max_attempts, ord)
        ORDER BY b.ord
        RETURNING j.id, j.unique_key;
    ELSE
        RETURN QUERY
        INSERT INTO {schema}.jobs AS j (queue, kind, args, priority, run_at, max_attempts,
                                        unique_key)
        SELECT coalesce(one_queue, b.queue), coalesce(one_kind, b.kind),
               b.args::jsonb, coalesce(one_priority, b.priority),
               coalesce(one_run_at, b.run_at,
                        now() + make_interval(secs => coalesce(one_delay, b.delay, 0))),
               coalesce(one_max_attempts, b.max_attempts), b.unique_key
        FROM unnest(queues, kinds, args, priorities, run_ats, delays, max_attempts,
                    unique_keys)
             WITH ORDINALITY AS b(queue, kind, args, priority, run_at, delay, max_attempts,
                                  unique_key, ord)
        ORDER BY b.ord
        ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND state IN ('ready', 'running')
        DO NOTHING
        RETURNING j.id, j.unique_key;
    END IF;
END;
$$;
-- 3. Write-backs fenced by a per-claim token -------------------------------------------------

-- Set by every claim, from the server's strong random source (gen_random_uuid, 122 random
-- bits), and returned to the claiming connection only: no function shows it to anyone else.
-- One token per claim statement, shared by the jobs it claims (as unguessable, and 1 us per
-- claim instead of per job: gen_random_uuid costs about 1.1 us here).
-- A write-back must name it, so knowing a job's worker name and attempt (which job_outcome's
-- last_error shows after a lease expiry) no longer lets another worker role write its outcome.
ALTER TABLE {schema}.jobs ADD COLUMN claim_token uuid;

-- The claim as in migrations 0006 and 0008, checking the queues against the role's scope first
-- and giving each claimed job a fresh claim token.
CREATE OR REPLACE FUNCTION {schema}.claim_jobs(queues text[], max_jobs integer, worker text,
                                               lease interval)
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

BEGIN
    PERFORM {schema}._check_queue_access(queues);
    IF EXISTS (SELECT 1 FROM {schema}.queue_pauses) THEN
        queues := ARRAY(SELECT qn FROM unnest(queues) AS qn
                        WHERE NOT EXISTS (SELECT 1 FROM {schema}.queue_pauses p
                                          WHERE p.queue = qn));
    END IF;
    IF NOT EXISTS (SELECT 1 FROM {schema}.job_limits) THEN
        RETURN QUERY
        UPDATE {schema}.jobs j
        SET state = 'running', attempts = j.attempts + 1, worker = claim_jobs.worker,
            lease_expires_at = now_ts + lease, started_at = now_ts,
            claim_token = (SELECT gen_random_uuid())  -- one per claim: an InitPlan
        -- id = ANY(ARRAY(...)) makes the update find the picked rows by primary key; a join
        -- would hash the whole table and cost O(backlog) per claim.
        WHERE j.id = ANY(ARRAY(
            SELECT c.id FROM unnest(queues) AS qn(name)
            CROSS JOIN LATERAL (
                SELECT r.id, r.priority, r.run_at FROM {schema}.jobs r
                WHERE r.state = 'ready' AND r.queue = qn.name AND r.run_at <= now_ts
                ORDER BY r.priority, r.run_at, r.id
                LIMIT max_jobs
                FOR UPDATE SKIP LOCKED
            ) c
            ORDER BY c.priority, c.run_at, c.id
            LIMIT max_jobs
        ))
        RETURNING j.*;
        RETURN;
    END IF;
    -- Limited path: compute what each limited kind may still start now.
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
    FOREACH q IN ARRAY queues LOOP
        EXIT WHEN remaining <= 0;
        SELECT * INTO lim FROM {schema}.job_limits l WHERE l.scope = 'queue' AND l.name = q;
        queue_allow := CASE WHEN FOUND THEN {schema}._limit_allowance(lim, now_ts)
                            ELSE remaining END;
        -- Limited kinds first, each up to its allowance, then every other kind.
        FOR i IN 1 .. coalesce(array_length(kind_names, 1), 0) LOOP
            want := least(remaining, queue_allow, kind_allow[i]);
            CONTINUE WHEN want <= 0;
            RETURN QUERY SELECT * FROM {schema}._claim_some(q, kind_names[i], NULL, want,
                                                             worker, lease, now_ts);
            GET DIAGNOSTICS got = ROW_COUNT;
            kind_allow[i] := kind_allow[i] - got;
            remaining := remaining - got;
            queue_allow := queue_allow - got;
            PERFORM {schema}._limit_spend('kind', kind_names[i], got, now_ts);
            PERFORM {schema}._limit_spend('queue', q, got, now_ts);
        END LOOP;
        want := least(remaining, queue_allow);
        IF want > 0 THEN
            RETURN QUERY SELECT * FROM {schema}._claim_some(q, NULL, kind_names, want, worker,
                                                             lease, now_ts);
            GET DIAGNOSTICS got = ROW_COUNT;
            remaining := remaining - got;
            PERFORM {schema}._limit_spend('queue', q, got, now_ts);
        END IF;
    END LOOP;
END;
$$;

CREATE OR REPLACE FUNCTION {schema}._claim_some(q text, only_kind text, excluded text[],
                                                want integer, worker text, lease interval,
                                                now_ts timestamptz)
RETURNS SETOF {schema}.jobs
LANGUAGE sql AS $$
    UPDATE {schema}.jobs j
    SET state = 'running', attempts = j.attempts + 1, worker = _claim_some.worker,
        lease_expires_at = now_ts + lease, started_at = now_ts,
        claim_token = (SELECT gen_random_uuid())
    WHERE j.id = ANY(ARRAY(
        SELECT r.id FROM {schema}.jobs r
        WHERE r.state = 'ready' AND r.queue = q AND r.run_at <= now_ts
          AND (only_kind IS NULL OR r.kind = only_kind)
          AND (excluded IS NULL OR r.kind <> ALL(excluded))
        ORDER BY r.priority, r.run_at, r.id
        LIMIT want
        FOR UPDATE SKIP LOCKED
    ))
    RETURNING j.*;
$$;

-- The write-backs of migrations 0010, 0015 and 0016 with the claim token in place of the
-- attempt (the functions fenced by name and attempt are dropped: a role granted them could
-- still forge). Same statements otherwise: rows by primary key, entries through a jsonb map.
DROP FUNCTION {schema}.complete_jobs_archived(text, bigint[], integer[], jsonb[]);
DROP FUNCTION {schema}.complete_jobs_deleted(text, bigint[], integer[]);
DROP FUNCTION {schema}.fail_jobs(text, bigint[], integer[], text[], float8[], boolean[]);
DROP FUNCTION {schema}.release_jobs(text, bigint[], integer[], boolean[], text);
DROP FUNCTION {schema}.finish_cancelled_jobs(text, bigint[], integer[], text[]);
DROP FUNCTION {schema}.snooze_jobs(text, bigint[], integer[], float8[]);
DROP FUNCTION {schema}.heartbeat_jobs(text, bigint[], integer[], interval);

CREATE FUNCTION {schema}.complete_jobs_archived(worker_name text, job_ids bigint[],
                                                           job_tokens uuid[],
                                                           job_results jsonb[])
RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    WITH positions AS MATERIALIZED (
        SELECT jsonb_object_agg(u.id, u.pos) AS map
        FROM unnest(job_ids) WITH ORDINALITY AS u(id, pos)
    ),
    finished AS (
        DELETE FROM {schema}.jobs j
        WHERE j.id = ANY(job_ids)
          AND j.claim_token = job_tokens[((SELECT map FROM positions) ->> j.id::text)::integer]
          AND j.worker = worker_name AND j.lease_expires_at IS NOT NULL
        RETURNING j.*,
                  job_results[((SELECT map FROM positions) ->> j.id::text)::integer] AS result
    )
    INSERT INTO {schema}.finished_jobs (id, queue, kind, args, priority, run_at, attempts,
                                        max_attempts, state, worker, last_error, unique_key,
                                        result, created_at, started_at)
    SELECT id, queue, kind, args, priority, run_at, attempts, max_attempts, 'done', worker,
           last_error, unique_key, result, created_at, started_at
    FROM finished;
$$;

CREATE FUNCTION {schema}.complete_jobs_deleted(worker_name text, job_ids bigint[],
                                                          job_tokens uuid[])
RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    WITH positions AS MATERIALIZED (
        SELECT jsonb_object_agg(u.id, u.pos) AS map
        FROM unnest(job_ids) WITH ORDINALITY AS u(id, pos)
    )
    DELETE FROM {schema}.jobs j
    WHERE j.id = ANY(job_ids)
      AND j.claim_token = job_tokens[((SELECT map FROM positions) ->> j.id::text)::integer]
      AND j.worker = worker_name AND j.lease_expires_at IS NOT NULL;
$$;

CREATE FUNCTION {schema}.fail_jobs(worker_name text, job_ids bigint[],
                                              job_tokens uuid[], job_errors text[],
                                              job_delays double precision[],
                                              job_finals boolean[])
RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    WITH positions AS MATERIALIZED (
        SELECT jsonb_object_agg(u.id, u.pos) AS map
        FROM unnest(job_ids) WITH ORDINALITY AS u(id, pos)
    )
    UPDATE {schema}.jobs j
    SET state = CASE WHEN c.final OR j.attempts >= j.max_attempts THEN 'failed' ELSE 'ready' END,
        run_at = clock_timestamp() + make_interval(secs => c.delay),
        last_error = c.error, lease_expires_at = NULL
    FROM (
        SELECT j2.id, job_errors[p.pos] AS error, job_delays[p.pos] AS delay,
               job_finals[p.pos] AS final
        FROM {schema}.jobs j2,
             LATERAL (SELECT ((SELECT map FROM positions) ->> j2.id::text)::integer AS pos) p
        WHERE j2.id = ANY(job_ids)
          AND j2.claim_token = job_tokens[p.pos]
          AND j2.worker = worker_name AND j2.lease_expires_at IS NOT NULL
    ) c
    WHERE j.id = c.id AND j.worker = worker_name AND j.lease_expires_at IS NOT NULL;
$$;

CREATE FUNCTION {schema}.release_jobs(worker_name text, job_ids bigint[],
                                                 job_tokens uuid[], job_started boolean[],
                                                 reason text)
RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    WITH positions AS MATERIALIZED (
        SELECT jsonb_object_agg(u.id, u.pos) AS map
        FROM unnest(job_ids) WITH ORDINALITY AS u(id, pos)
    )
    UPDATE {schema}.jobs j
    SET state = CASE WHEN c.started AND j.attempts >= j.max_attempts THEN 'failed'
                     ELSE 'ready' END,
        attempts = CASE WHEN c.started THEN j.attempts ELSE j.attempts - 1 END,
        run_at = clock_timestamp(), lease_expires_at = NULL,
        last_error = CASE WHEN c.started THEN reason ELSE j.last_error END
    FROM (
        SELECT j2.id, job_started[p.pos] AS started
        FROM {schema}.jobs j2,
             LATERAL (SELECT ((SELECT map FROM positions) ->> j2.id::text)::integer AS pos) p
        WHERE j2.id = ANY(job_ids)
          AND j2.claim_token = job_tokens[p.pos]
          AND j2.worker = worker_name AND j2.lease_expires_at IS NOT NULL
    ) c
    WHERE j.id = c.id AND j.worker = worker_name AND j.lease_expires_at IS NOT NULL;
$$;

CREATE FUNCTION {schema}.finish_cancelled_jobs(worker_name text, job_ids bigint[],
                                                          job_tokens uuid[],
                                                          job_reasons text[])
RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    WITH positions AS MATERIALIZED (
        SELECT jsonb_object_agg(u.id, u.pos) AS map
        FROM unnest(job_ids) WITH ORDINALITY AS u(id, pos)
    ), finished AS (
        DELETE FROM {schema}.jobs j
        WHERE j.id = ANY(job_ids)
          AND j.claim_token = job_tokens[((SELECT map FROM positions) ->> j.id::text)::integer]
          AND j.worker = worker_name AND j.lease_expires_at IS NOT NULL
        RETURNING j.*, job_reasons[((SELECT map FROM positions) ->> j.id::text)::integer]
                       AS reason
    )
    INSERT INTO {schema}.finished_jobs (id, queue, kind, args, priority, run_at, attempts,
                                        max_attempts, state, worker, last_error, unique_key,
                                        created_at, started_at)
    SELECT id, queue, kind, args, priority, run_at, attempts, max_attempts, 'cancelled', worker,
           coalesce(reason, 'cancelled while running'), unique_key, created_at, started_at
    FROM finished;
$$;

CREATE FUNCTION {schema}.snooze_jobs(worker_name text, job_ids bigint[],
                                                job_tokens uuid[],
                                                job_delays double precision[])
RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    WITH positions AS MATERIALIZED (
        SELECT jsonb_object_agg(u.id, u.pos) AS map
        FROM unnest(job_ids) WITH ORDINALITY AS u(id, pos)
    )
    UPDATE {schema}.jobs j
    SET state = 'ready', attempts = j.attempts - 1, lease_expires_at = NULL,
        run_at = clock_timestamp() + make_interval(secs => c.delay)
    FROM (
        SELECT j2.id, job_delays[p.pos] AS delay
        FROM {schema}.jobs j2,
             LATERAL (SELECT ((SELECT map FROM positions) ->> j2.id::text)::integer AS pos) p
        WHERE j2.id = ANY(job_ids)
          AND j2.claim_token = job_tokens[p.pos]
          AND j2.worker = worker_name AND j2.lease_expires_at IS NOT NULL
    ) c
    WHERE j.id = c.id AND j.worker = worker_name AND j.lease_expires_at IS NOT NULL;
$$;

CREATE FUNCTION {schema}.heartbeat_jobs(worker_name text, job_ids bigint[],
                                                   job_tokens uuid[], lease interval)
RETURNS TABLE(id bigint, cancel_requested boolean)
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    WITH positions AS MATERIALIZED (
        SELECT jsonb_object_agg(u.id, u.pos) AS map
        FROM unnest(job_ids) WITH ORDINALITY AS u(id, pos)
    )
    UPDATE {schema}.jobs j
    SET lease_expires_at = clock_timestamp() + lease
    WHERE j.id = ANY(job_ids)
      AND j.claim_token = job_tokens[((SELECT map FROM positions) ->> j.id::text)::integer]
      AND j.worker = worker_name AND j.lease_expires_at IS NOT NULL
    RETURNING j.id, j.cancel_requested;
$$;

-- 5. Queue scopes in the functions that read or change a queue's jobs, limits or schedules ---

-- A job's state, result and last error, for a role that may use its queue (for anyone else the
-- job does not exist). No locks.
CREATE OR REPLACE FUNCTION {schema}.job_outcome(job_id bigint)
RETURNS TABLE (state text, result jsonb, last_error text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT a.state, a.result, a.last_error FROM {schema}.all_jobs a
    WHERE a.id = job_id
      AND coalesce(a.queue = ANY((SELECT {schema}._role_queues())::text[]), true);
$$;

-- As in migration 0008, in the role's queues only.
CREATE OR REPLACE FUNCTION {schema}.purge_finished_jobs(cutoff timestamptz, job_state text,
                                                        job_kind text, batch integer)
RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    WITH scope AS MATERIALIZED (
        SELECT {schema}._role_queues() AS queues
    ), purged AS (
        DELETE FROM {schema}.finished_jobs
        WHERE id IN (
            SELECT id FROM {schema}.finished_jobs
            WHERE finished_at < cutoff AND (job_state IS NULL OR state = job_state)
              AND (job_kind IS NULL OR kind = job_kind)
              AND coalesce(queue = ANY((SELECT queues FROM scope)::text[]), true)
            LIMIT batch
        )
        RETURNING 1
    )
    SELECT count(*) FROM purged;
$$;

-- As in migration 0008, in the role's queues only.
CREATE OR REPLACE FUNCTION {schema}.waiting_unregistered_kinds(threshold interval, kinds text[])
RETURNS TABLE (queue text, kind text, jobs bigint, waited interval)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT w.queue, w.kind, count(*), max(clock_timestamp() - w.run_at)
    FROM (
        SELECT j.queue, j.kind, j.run_at FROM {schema}.jobs j
        WHERE j.state = 'ready' AND j.run_at < clock_timestamp() - threshold
          AND j.kind <> ALL(kinds)
          AND coalesce(j.queue = ANY((SELECT {schema}._role_queues())::text[]), true)
        LIMIT 1000
    ) AS w
    GROUP BY w.queue, w.kind
    ORDER BY w.queue, w.kind;
$$;

-- Raises insufficient_privilege unless the session's login role may set or remove a limit:
-- on a queue it may use, or on a kind (which spans every queue) if it may use every queue.
-- A role scoped to some queues may still set a kind limit to what it is already (a worker
-- re-asserts its decorators' limits at start; an admin set them). Row lock: none.
CREATE FUNCTION {schema}._check_limit_access(limit_scope text, limit_name text,
                                             limit_max_running integer, limit_rate float8,
                                             limit_burst float8, removing boolean)
RETURNS void
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF limit_scope = 'queue' THEN
        PERFORM {schema}._check_queue_access(ARRAY[limit_name]);
    ELSIF {schema}._role_queues() IS NOT NULL
          AND (removing OR NOT EXISTS (
                   SELECT FROM {schema}.job_limits l
                   WHERE l.scope = limit_scope AND l.name = limit_name
                     AND l.max_running IS NOT DISTINCT FROM limit_max_running
                     AND l.rate IS NOT DISTINCT FROM limit_rate
                     AND l.burst IS NOT DISTINCT FROM limit_burst)) THEN
        RAISE EXCEPTION 'permission denied for the limit of kind %: a kind limit applies in '
                        'every queue, and role % may use some queues only',
                        quote_literal(limit_name), quote_ident(session_user)
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'limit a queue of yours instead, or have an admin set it '
                         '(client.set_job_limit) or grant this role every queue';
    END IF;
END;
$$;

CREATE OR REPLACE FUNCTION {schema}.set_job_limit(limit_scope text, limit_name text,
                                                  limit_max_running integer,
                                                  limit_rate float8, limit_burst float8)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM {schema}._check_limit_access(limit_scope, limit_name, limit_max_running,
                                         limit_rate, limit_burst, false);
    INSERT INTO {schema}.job_limits AS l (scope, name, max_running, rate, burst, tokens,
                                          refilled_at)
    VALUES (limit_scope, limit_name, limit_max_running, limit_rate, limit_burst,
            coalesce(limit_burst, 0), clock_timestamp())
    ON CONFLICT (scope, name) DO UPDATE
    SET max_running = excluded.max_running, rate = excluded.rate, burst = excluded.burst,
        tokens = least(coalesce(excluded.burst, 0), l.tokens);
END;
$$;

CREATE OR REPLACE FUNCTION {schema}.delete_job_limit(limit_scope text, limit_name text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM {schema}._check_limit_access(limit_scope, limit_name, NULL, NULL, NULL, true);
    DELETE FROM {schema}.job_limits WHERE scope = limit_scope AND name = limit_name;
END;
$$;

-- As in migration 0008, for a queue the role may use, never moving another queue's schedule
-- (a schedule name taken in another queue is refused), with a first tick readers can show.
CREATE OR REPLACE FUNCTION {schema}.upsert_schedule(schedule_name text, schedule_cron text,
                                                    schedule_kind text, schedule_queue text,
                                                    schedule_args jsonb,
                                                    schedule_priority integer,
                                                    schedule_max_attempts integer,
                                                    first_run_at timestamptz)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF first_run_at IS NULL OR NOT {schema}._run_at_valid(first_run_at) THEN
        RAISE EXCEPTION 'invalid first run % of schedule %: a time from 1900-01-01 to 100 '
                        'years from now', coalesce(first_run_at::text, 'NULL'),
                        quote_literal(schedule_name)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM {schema}._check_queue_access(ARRAY[schedule_queue] || ARRAY(
        SELECT s.queue FROM {schema}.job_schedules s WHERE s.name = schedule_name));
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
END;
$$;

-- As in migration 0008, among the schedules of the role's queues only.
CREATE OR REPLACE FUNCTION {schema}.due_schedules(names text[])
RETURNS TABLE (name text, cron text, kind text, queue text, args jsonb, priority smallint,
               max_attempts integer, next_run_at timestamptz, now timestamptz)
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT s.name, s.cron, s.kind, s.queue, s.args, s.priority, s.max_attempts, s.next_run_at,
           clock_timestamp()
    FROM {schema}.job_schedules s
    WHERE s.name = ANY(names) AND s.next_run_at <= clock_timestamp()
      AND coalesce(s.queue = ANY((SELECT {schema}._role_queues())::text[]), true)
    ORDER BY s.name
    FOR UPDATE OF s SKIP LOCKED;
$$;

-- As in migration 0008, for a schedule of the role's queues only.
CREATE OR REPLACE FUNCTION {schema}.advance_schedule(schedule_name text, tick timestamptz,
                                                     following timestamptz)
RETURNS boolean
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    WITH moved AS (
        UPDATE {schema}.job_schedules s SET next_run_at = following, last_run_at = tick
        WHERE s.name = schedule_name AND s.next_run_at = tick AND following > tick
          AND {schema}._run_at_valid(following)
          AND coalesce(s.queue = ANY((SELECT {schema}._role_queues())::text[]), true)
        RETURNING 1
    )
    SELECT EXISTS (SELECT 1 FROM moved);
$$;

-- As in migration 0008, among the schedules of the role's queues only.
CREATE OR REPLACE FUNCTION {schema}.next_schedule_at(names text[])
RETURNS interval
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT min(s.next_run_at) - clock_timestamp() FROM {schema}.job_schedules s
    WHERE s.name = ANY(names)
      AND coalesce(s.queue = ANY((SELECT {schema}._role_queues())::text[]), true);
$$;

-- Grants ---------------------------------------------------------------------------------------

REVOKE EXECUTE ON FUNCTION
    {schema}._role_queues(),
    {schema}._check_queue_access(text[]),
    {schema}._check_job_access(bigint[]),
    {schema}._check_limit_access(text, text, integer, float8, float8, boolean),
    {schema}.complete_jobs_archived(text, bigint[], uuid[], jsonb[]),
    {schema}.complete_jobs_deleted(text, bigint[], uuid[]),
    {schema}.fail_jobs(text, bigint[], uuid[], text[], float8[], boolean[]),
    {schema}.release_jobs(text, bigint[], uuid[], boolean[], text),
    {schema}.finish_cancelled_jobs(text, bigint[], uuid[], text[]),
    {schema}.snooze_jobs(text, bigint[], uuid[], float8[]),
    {schema}.heartbeat_jobs(text, bigint[], uuid[], interval)
FROM PUBLIC;

-- Existing roles keep what they could do: roles that may claim (workers, and admins: EXECUTE
-- on claim_jobs) get the new write-backs, and the enqueuer and worker roles (EXECUTE on
-- enqueue_batch or claim_jobs, not admins) every queue, until an admin scopes them.
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT DISTINCT rol.rolname, rol.oid,
               has_table_privilege(rol.oid, '{schema}.jobs'::regclass, 'UPDATE') AS admin
        FROM pg_proc f, aclexplode(f.proacl) x, pg_roles rol
        WHERE f.oid = '{schema}.claim_jobs(text[], integer, text, interval)'::regprocedure
          AND x.privilege_type = 'EXECUTE' AND rol.oid = x.grantee AND x.grantee <> f.proowner
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s, %s, %s, %s, %s, %s, %s TO %I',
            '{schema}.complete_jobs_archived(text, bigint[], uuid[], jsonb[])'::regprocedure,
            '{schema}.complete_jobs_deleted(text, bigint[], uuid[])'::regprocedure,
            '{schema}.fail_jobs(text, bigint[], uuid[], text[], float8[], boolean[])'::regprocedure,
            '{schema}.release_jobs(text, bigint[], uuid[], boolean[], text)'::regprocedure,
            '{schema}.finish_cancelled_jobs(text, bigint[], uuid[], text[])'::regprocedure,
            '{schema}.snooze_jobs(text, bigint[], uuid[], float8[])'::regprocedure,
            '{schema}.heartbeat_jobs(text, bigint[], uuid[], interval)'::regprocedure,
            r.rolname);
    END LOOP;
    INSERT INTO {schema}.queue_roles (queue, role_oid)
    SELECT DISTINCT '*', rol.oid
    FROM pg_proc f, aclexplode(f.proacl) x, pg_roles rol
    WHERE f.oid IN ('{schema}.claim_jobs(text[], integer, text, interval)'::regprocedure,
                    '{schema}.enqueue_batch(text[], text[], text[], smallint[], timestamptz[], float8[], integer[], text[])'::regprocedure)
      AND x.privilege_type = 'EXECUTE' AND rol.oid = x.grantee AND x.grantee <> f.proowner
      AND NOT has_table_privilege(rol.oid, '{schema}.jobs'::regclass, 'UPDATE')
    ON CONFLICT DO NOTHING;
END;
$$;
