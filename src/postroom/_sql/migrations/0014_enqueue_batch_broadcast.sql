-- postroom migration 0014: enqueue_batch takes a one-element array for a column every job of
-- the batch shares (all but args, one per job, which give the batch's size), and inserts
-- keyless batches without ON CONFLICT.
-- `{schema}` is replaced by the quoted schema identifier; literal braces are doubled.
--
-- Measured on 20,000 no-op jobs (bench/RESULTS.md, "queue enqueue: what bounds it"): the
-- client spent a third of its time dumping seven parallel arrays, five of them one value
-- repeated (queue, priority, run_at, delay, max_attempts, and mostly the kind); and
-- ON CONFLICT makes every row a speculative insertion (a speculative-insertion lock and one
-- more WAL record per row) even when no row carries a key: about 10% of the server's time.
-- Same signature, same result (the new ids with their keys, in input order); calls that pass
-- full arrays (older clients, the scheduler) behave as before.

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
