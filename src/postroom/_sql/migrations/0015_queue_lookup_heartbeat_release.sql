-- postroom migration 0015: heartbeats and give-backs find each job's entries in O(1).
-- `{schema}` is replaced by the quoted schema identifier; literal braces are doubled.
--
-- heartbeat_jobs (every few seconds, with every job a worker holds) and release_jobs (the
-- give-back of unstarted jobs at shutdown) still found a row's entries in the parallel arrays
-- with array_position(job_ids, j.id), a linear search per row: O(held^2) per statement. A
-- worker holding 100,000 prefetched jobs (`postroom bench queue`, memory phase) could not give
-- them back within its 10 s shutdown budget. As migration 0010 did for completions, a jsonb
-- object maps each id to its position, built once per statement; rows are still found by
-- primary key alone (id = ANY).

CREATE OR REPLACE FUNCTION {schema}.heartbeat_jobs(worker_name text, job_ids bigint[],
                                                   job_attempts integer[], lease interval)
RETURNS TABLE(id bigint, cancel_requested boolean)
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    WITH positions AS MATERIALIZED (
        SELECT jsonb_object_agg(u.id, u.pos) AS map
        FROM unnest(job_ids) WITH ORDINALITY AS u(id, pos)
    )
    UPDATE {schema}.jobs j
    SET lease_expires_at = clock_timestamp() + lease
    WHERE j.id = ANY(job_ids)
      AND j.attempts = job_attempts[((SELECT map FROM positions) ->> j.id::text)::integer]
      AND j.worker = worker_name AND j.lease_expires_at IS NOT NULL
    RETURNING j.id, j.cancel_requested;
$$;

CREATE OR REPLACE FUNCTION {schema}.release_jobs(worker_name text, job_ids bigint[],
                                                 job_attempts integer[], job_started boolean[],
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
          AND j2.attempts = job_attempts[p.pos]
          AND j2.worker = worker_name AND j2.lease_expires_at IS NOT NULL
    ) c
    WHERE j.id = c.id AND j.worker = worker_name AND j.lease_expires_at IS NOT NULL;
$$;
