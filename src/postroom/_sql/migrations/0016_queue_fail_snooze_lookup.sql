-- postroom migration 0016: failures, snoozes and cancellations find each job's entries in O(1).
-- `{schema}` is replaced by the quoted schema identifier; literal braces are doubled.
--
-- fail_jobs, snooze_jobs and finish_cancelled_jobs were the last write-backs that found a row's
-- entries in the parallel arrays with array_position(job_ids, j.id), a linear search per row:
-- O(batch^2) per statement (a burst of failing jobs reaches the completer as one batch). As in
-- migrations 0010 and 0015, a jsonb object maps each id to its position, built once per
-- statement; rows are still found by primary key alone (id = ANY).

CREATE OR REPLACE FUNCTION {schema}.fail_jobs(worker_name text, job_ids bigint[],
                                              job_attempts integer[], job_errors text[],
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
          AND j2.attempts = job_attempts[p.pos]
          AND j2.worker = worker_name AND j2.lease_expires_at IS NOT NULL
    ) c
    WHERE j.id = c.id AND j.worker = worker_name AND j.lease_expires_at IS NOT NULL;
$$;

CREATE OR REPLACE FUNCTION {schema}.snooze_jobs(worker_name text, job_ids bigint[],
                                                job_attempts integer[],
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
          AND j2.attempts = job_attempts[p.pos]
          AND j2.worker = worker_name AND j2.lease_expires_at IS NOT NULL
    ) c
    WHERE j.id = c.id AND j.worker = worker_name AND j.lease_expires_at IS NOT NULL;
$$;

CREATE OR REPLACE FUNCTION {schema}.finish_cancelled_jobs(worker_name text, job_ids bigint[],
                                                          job_attempts integer[],
                                                          job_reasons text[])
RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    WITH positions AS MATERIALIZED (
        SELECT jsonb_object_agg(u.id, u.pos) AS map
        FROM unnest(job_ids) WITH ORDINALITY AS u(id, pos)
    ), finished AS (
        DELETE FROM {schema}.jobs j
        WHERE j.id = ANY(job_ids)
          AND j.attempts = job_attempts[((SELECT map FROM positions) ->> j.id::text)::integer]
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
