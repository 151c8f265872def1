-- The sequences' clean-up trigger (migration 0024) ran a join of the deleted jobs with
-- finished_jobs on every DELETE from jobs, sequences or not. PL/pgSQL caches that statement's
-- plan for the session: planned when finished_jobs was small (a new install, a new worker
-- connection after a purge), it kept a nested loop that scans all of finished_jobs once per
-- deleted job, and every completion grew slower as finished_jobs filled up (a 20,000-job
-- burn-down into an empty finished_jobs: completion batches of 500 jobs took 1-4 s, the whole
-- burn-down 6-9 s instead of ~1 s). Now a DELETE that ends no live sequence touches no other
-- table: with no job_sequences row there is nothing to do, and otherwise the jobs that were a
-- sequence's last are found from job_sequences first (its last_job_id index), and only they are
-- looked up in finished_jobs, by its primary key, in a statement planned on each call (EXECUTE:
-- with the tables' sizes of the moment, never a plan cached while finished_jobs was empty).

CREATE OR REPLACE FUNCTION {schema}._sequence_done() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    IF NOT EXISTS (SELECT FROM {schema}.job_sequences) THEN
        RETURN NULL;  -- no live sequence: the deleted jobs end none
    END IF;
    EXECUTE 'DELETE FROM {schema}.job_sequences s
             USING (SELECT s2.key FROM {schema}.job_sequences s2
                    WHERE s2.last_job_id IN (SELECT g.id FROM gone g)
                      AND NOT EXISTS (SELECT FROM {schema}.finished_jobs f
                                      WHERE f.id = s2.last_job_id AND f.state = ''cancelled'')
                    ORDER BY s2.key
                    FOR UPDATE OF s2 SKIP LOCKED) d
             WHERE s.key = d.key';
    RETURN NULL;
END;
$$;
