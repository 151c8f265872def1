-- postroom migration 0006: queue pauses, workflows (dependencies, groups, sequences), a checked
-- SQL enqueue, and least-privilege enqueueing through SECURITY DEFINER functions.
-- `{schema}` is replaced by the quoted schema identifier; literal braces are doubled.

-- Paused queues: the claim skips them (running jobs finish), so all workers stop claiming from
-- a queue at their next claim. Tiny; read once per claim.
CREATE TABLE {schema}.queue_pauses (
    queue      text PRIMARY KEY,
    paused_at  timestamptz NOT NULL DEFAULT now()
);

-- Two states outside the ready set, so the claim never sees them: `waiting` for its parent
-- jobs, `held` because a parent failed (it waits for the parent's retry, or a cancel).
ALTER TABLE {schema}.jobs DROP CONSTRAINT jobs_state_check;
ALTER TABLE {schema}.jobs ADD CONSTRAINT jobs_state_check
    CHECK (state IN ('ready', 'running', 'failed', 'waiting', 'held'));
-- Set on a job once another job depends on it: only such rows fire the workflow triggers, so
-- jobs without dependents pay one boolean test per finishing row (metadata-only column add).
ALTER TABLE {schema}.jobs ADD COLUMN has_dependents boolean NOT NULL DEFAULT false;

-- Unresolved edges only: an edge is deleted when its parent succeeds, and a dependent becomes
-- ready when its last edge goes. `on_failure` is the dependent's policy for a failed parent.
CREATE TABLE {schema}.job_dependencies (
    parent_id   bigint NOT NULL,
    job_id      bigint NOT NULL,
    on_failure  text NOT NULL DEFAULT 'hold' CHECK (on_failure IN ('hold', 'cancel')),
    PRIMARY KEY (parent_id, job_id)
);
CREATE INDEX job_dependencies_job_idx ON {schema}.job_dependencies (job_id);

-- The last job enqueued per sequence key: the next one depends on it.
CREATE TABLE {schema}.job_sequences (
    key          text PRIMARY KEY,
    last_job_id  bigint NOT NULL
);

-- A parent succeeded: delete its edges; a dependent whose last edge went becomes ready. The
-- dependent's row lock orders concurrent parents finishing, so exactly one of them sees no
-- edges left and releases it.
CREATE FUNCTION {schema}._parent_succeeded(parent bigint)
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
        SET state = 'ready', last_error = CASE WHEN j.state = 'held' THEN NULL
                                               ELSE j.last_error END
        WHERE j.id = child AND j.state IN ('waiting', 'held')
          AND NOT EXISTS (SELECT 1 FROM {schema}.job_dependencies d WHERE d.job_id = child)
        RETURNING j.queue INTO released;
        IF released IS NOT NULL THEN
            PERFORM pg_notify('postroom_jobs', '{schema}:' || released);
        END IF;
    END LOOP;
END;
$$;

-- A parent failed or was cancelled: each dependent is held (edge kept: the parent's retry can
-- still release it) or cancelled (moved to finished_jobs, which cancels its own dependents).
CREATE FUNCTION {schema}._parent_failed(parent bigint, outcome text)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    dep record;
BEGIN
    FOR dep IN
        SELECT d.job_id, d.on_failure FROM {schema}.job_dependencies d WHERE d.parent_id = parent
        ORDER BY d.job_id
    LOOP
        IF dep.on_failure = 'cancel' THEN
            DELETE FROM {schema}.job_dependencies WHERE job_id = dep.job_id;
            WITH gone AS (
                DELETE FROM {schema}.jobs WHERE id = dep.job_id AND state IN ('waiting', 'held')
                RETURNING *
            )
            INSERT INTO {schema}.finished_jobs (id, queue, kind, args, priority, run_at, attempts,
                                                max_attempts, state, worker, last_error,
                                                unique_key, created_at, started_at)
            SELECT id, queue, kind, args, priority, run_at, attempts, max_attempts, 'cancelled',
                   worker, format('cancelled: parent job %s %s', parent, outcome), unique_key,
                   created_at, started_at
            FROM gone;
        ELSE
            UPDATE {schema}.jobs
            SET state = 'held', last_error = format('held: parent job %s %s', parent, outcome)
            WHERE id = dep.job_id AND state IN ('waiting', 'held');
        END IF;
    END LOOP;
END;
$$;

-- Trigger: a parent left the hot table. Its finished_jobs row (written by the same statement)
-- says cancelled; no row, or done, means it succeeded. A purged dead letter settled its
-- dependents when it failed.
CREATE FUNCTION {schema}._parent_left()
RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.state = 'failed' THEN
        RETURN NULL;
    END IF;
    IF EXISTS (SELECT 1 FROM {schema}.finished_jobs f
               WHERE f.id = OLD.id AND f.state = 'cancelled') THEN
        PERFORM {schema}._parent_failed(OLD.id, 'was cancelled');
    ELSE
        PERFORM {schema}._parent_succeeded(OLD.id);
    END IF;
    RETURN NULL;
END;
$$;

-- Trigger: a parent used up its attempts (or failed for good).
CREATE FUNCTION {schema}._parent_dead()
RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM {schema}._parent_failed(NEW.id, 'failed');
    RETURN NULL;
END;
$$;

-- The WHEN clauses keep plain jobs free: no trigger call unless the row has dependents.
CREATE TRIGGER jobs_parent_left AFTER DELETE ON {schema}.jobs
    FOR EACH ROW WHEN (OLD.has_dependents) EXECUTE FUNCTION {schema}._parent_left();
CREATE TRIGGER jobs_parent_dead AFTER UPDATE OF state ON {schema}.jobs
    FOR EACH ROW WHEN (NEW.has_dependents AND NEW.state = 'failed' AND OLD.state <> 'failed')
    EXECUTE FUNCTION {schema}._parent_dead();

-- The claim, as in 0002, skipping paused queues first (one lookup in a tiny table; the ready
-- set scan below is unchanged).
CREATE OR REPLACE FUNCTION {schema}.claim_jobs(queues text[], max_jobs integer, worker text,
                                               lease interval)
RETURNS SETOF {schema}.jobs
LANGUAGE plpgsql AS $$
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
    IF EXISTS (SELECT 1 FROM {schema}.queue_pauses) THEN
        queues := ARRAY(SELECT qn FROM unnest(queues) AS qn
                        WHERE NOT EXISTS (SELECT 1 FROM {schema}.queue_pauses p
                                          WHERE p.queue = qn));
    END IF;
    IF NOT EXISTS (SELECT 1 FROM {schema}.job_limits) THEN
        RETURN QUERY
        UPDATE {schema}.jobs j
        SET state = 'running', attempts = j.attempts + 1, worker = claim_jobs.worker,
            lease_expires_at = now_ts + lease, started_at = now_ts
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

-- SQL API: pause a queue (workers stop claiming from it at their next claim; running jobs
-- finish). Returns false if it was already paused.
CREATE FUNCTION {schema}.pause_queue(queue_name text)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM {schema}._check_name('queue', queue_name, '^[A-Za-z0-9][A-Za-z0-9._-]*$');
    INSERT INTO {schema}.queue_pauses (queue) VALUES (queue_name) ON CONFLICT DO NOTHING;
    RETURN FOUND;
END;
$$;

-- SQL API: resume a paused queue and wake its workers. Returns false if it was not paused.
CREATE FUNCTION {schema}.resume_queue(queue_name text)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM {schema}._check_name('queue', queue_name, '^[A-Za-z0-9][A-Za-z0-9._-]*$');
    DELETE FROM {schema}.queue_pauses WHERE queue = queue_name;
    IF FOUND THEN
        PERFORM pg_notify('postroom_jobs', '{schema}:' || queue_name);
    END IF;
    RETURN FOUND;
END;
$$;

-- One clear error for a bad name (SQLSTATE 22023, invalid_parameter_value).
CREATE FUNCTION {schema}._check_name(what text, value text, pattern text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF value IS NULL OR value !~ pattern OR length(value) > 200 THEN
        RAISE EXCEPTION 'invalid % name %: 1-200 characters matching %', what,
            coalesce(quote_literal(value), 'NULL'), pattern
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
END;
$$;

-- Enqueue one job (the SQL API's core and the client's path for workflow jobs), checked with
-- one clear error per bad input. Parents (after, and the sequence's previous job) are locked
-- and flagged before the insert, so a parent finishing concurrently either sees the new edge
-- or has finished before (and is looked up in finished_jobs). Returns the job id and whether
-- it is new (false: a ready or running job held the unique key).
CREATE FUNCTION {schema}.enqueue_job(
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

-- SQL API: enqueue a job in the caller's transaction; returns its id (with a unique key held
-- by a ready or running job: that job's id). Replaces 0002's form: bad input now raises one
-- clear error, and `after`, `sequence` and `on_parent_failure` make workflows.
DROP FUNCTION {schema}.enqueue(text, jsonb, text, integer, timestamptz, integer, text);
CREATE FUNCTION {schema}.enqueue(kind text, args jsonb DEFAULT '{{}}',
                                 queue text DEFAULT 'default', priority integer DEFAULT 0,
                                 run_at timestamptz DEFAULT NULL,
                                 max_attempts integer DEFAULT 25,
                                 unique_key text DEFAULT NULL, after bigint[] DEFAULT NULL,
                                 sequence text DEFAULT NULL,
                                 on_parent_failure text DEFAULT 'hold')
RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT e.id FROM {schema}.enqueue_job(kind, args, queue, priority, run_at, NULL,
                                          max_attempts, unique_key, after, sequence,
                                          on_parent_failure) e;
$$;

-- SQL API: the same with the arguments as JSON text, so a driver that sends strings needs no
-- cast (an untyped literal picks this form too).
CREATE FUNCTION {schema}.enqueue(kind text, args text,
                                 queue text DEFAULT 'default', priority integer DEFAULT 0,
                                 run_at timestamptz DEFAULT NULL,
                                 max_attempts integer DEFAULT 25,
                                 unique_key text DEFAULT NULL, after bigint[] DEFAULT NULL,
                                 sequence text DEFAULT NULL,
                                 on_parent_failure text DEFAULT 'hold')
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    parsed jsonb;
BEGIN
    BEGIN
        parsed := args::jsonb;
    EXCEPTION WHEN invalid_text_representation OR untranslatable_character THEN
        RAISE EXCEPTION 'invalid args %: JSON object text (%)', quote_literal(args), SQLERRM
            USING ERRCODE = 'invalid_parameter_value';
    END;
    RETURN {schema}.enqueue(kind, parsed, queue, priority, run_at, max_attempts, unique_key,
                            after, sequence, on_parent_failure);
END;
$$;

-- The client's fast enqueue, for the enqueuer role too: one INSERT ... SELECT unnest per
-- batch. Values are held by the table's CHECKs; the state is always ready.
CREATE FUNCTION {schema}.enqueue_batch(queues text[], kinds text[], args text[],
                                       priorities smallint[], run_ats timestamptz[],
                                       delays float8[], max_attempts integer[],
                                       unique_keys text[] DEFAULT NULL)
RETURNS TABLE (id bigint, unique_key text)
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    INSERT INTO {schema}.jobs AS j (queue, kind, args, priority, run_at, max_attempts,
                                    unique_key)
    SELECT b.queue, b.kind, b.args::jsonb, b.priority,
           coalesce(b.run_at, now() + make_interval(secs => coalesce(b.delay, 0))),
           b.max_attempts, b.unique_key
    FROM unnest(queues, kinds, args, priorities, run_ats, delays, max_attempts,
                coalesce(unique_keys, array_fill(NULL::text, ARRAY[cardinality(queues)])))
         WITH ORDINALITY AS b(queue, kind, args, priority, run_at, delay, max_attempts,
                              unique_key, ord)
    ORDER BY b.ord
    ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND state IN ('ready', 'running')
    DO NOTHING
    RETURNING j.id, j.unique_key;
$$;

-- The ready or running job holding each unique key (for enqueue_batch's skipped rows).
CREATE FUNCTION {schema}.unique_key_holders(unique_keys text[])
RETURNS TABLE (unique_key text, id bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT j.unique_key, j.id FROM {schema}.jobs j
    WHERE j.unique_key = ANY(unique_keys) AND j.state IN ('ready', 'running');
$$;

-- A job's state, result and last error, for the enqueuer waiting on a result (no args).
CREATE FUNCTION {schema}.job_outcome(job_id bigint)
RETURNS TABLE (state text, result jsonb, last_error text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT a.state, a.result, a.last_error FROM {schema}.all_jobs a WHERE a.id = job_id;
$$;

-- Functions run with their owner's rights: only the roles granted EXECUTE may call them.
REVOKE EXECUTE ON FUNCTION {schema}.enqueue_job(text, jsonb, text, integer, timestamptz, float8,
    integer, text, bigint[], text, text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION {schema}.enqueue(text, jsonb, text, integer, timestamptz, integer,
    text, bigint[], text, text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION {schema}.enqueue(text, text, text, integer, timestamptz, integer,
    text, bigint[], text, text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION {schema}.enqueue_batch(text[], text[], text[], smallint[],
    timestamptz[], float8[], integer[], text[]) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION {schema}.unique_key_holders(text[]) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION {schema}.job_outcome(bigint) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION {schema}.pause_queue(text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION {schema}.resume_queue(text) FROM PUBLIC;
