-- The dashboard's time series (issue 17): the samples the dashboard's sampler takes every
-- sample_interval seconds, kept in the database so a restarted dashboard keeps its charts and
-- every dashboard process (and `postroom metrics --serve`) of a schema shows the same history.
--
-- A ring, not a log: one row per sample in a fixed slot (0 .. slots-1), the newest sample
-- overwriting the oldest. The table never holds more than `slots` rows, and since the write is
-- an UPDATE of columns no index covers it is a HOT update: the page's old versions are pruned
-- when the page is next read, so the table stays the same size without VACUUM (autovacuum may
-- be off, and the dashboard's role does not own the table to vacuum it). Charts read the whole
-- ring (at most `slots` rows, the primary key's index is all it needs for the writes); the
-- reads keep only the samples of the last `slots` intervals, so an old ring shows nothing
-- stale. points holds one sample: counters and gauges per topic, group and queue
-- (postroom/web/_samples.py); STORAGE MAIN keeps it in the row (compressed) rather than in
-- TOAST, whose rows a HOT update of the main table could not reclaim.
CREATE TABLE {schema}.web_samples (
    slot integer PRIMARY KEY CONSTRAINT web_samples_slot_check CHECK (slot >= 0 AND slot < 10000),
    sampled_at timestamptz NOT NULL,
    points jsonb NOT NULL CONSTRAINT web_samples_points_check CHECK (jsonb_typeof(points) = 'object')
) WITH (fillfactor = 50);
ALTER TABLE {schema}.web_samples ALTER COLUMN points SET STORAGE MAIN;

-- Records one sample p_points in a ring of p_slots, unless a sample of the last p_interval is
-- already there (another sampler's): returns the sample's time, or NULL if it was not written.
-- Several samplers of one schema thus write one sample per interval between them. Writers take
-- the table's SHARE ROW EXCLUSIVE lock for their transaction (one at a time; readers go on),
-- and a waiter that finds a fresh sample once the lock is its own writes nothing. Slots at or
-- beyond p_slots (a ring made smaller) are deleted in the same transaction.
CREATE FUNCTION {schema}.record_web_sample(p_points jsonb, p_interval interval, p_slots integer)
RETURNS timestamptz
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    newest_slot integer;
    newest_at timestamptz;
BEGIN
    IF record_web_sample.p_points IS NULL THEN
        RAISE EXCEPTION 'record_web_sample(): argument p_points must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF record_web_sample.p_interval IS NULL THEN
        RAISE EXCEPTION 'record_web_sample(): argument p_interval must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF record_web_sample.p_slots IS NULL THEN
        RAISE EXCEPTION 'record_web_sample(): argument p_slots must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF jsonb_typeof(p_points) <> 'object' OR octet_length(p_points::text) > 1048576 THEN
        RAISE EXCEPTION 'record_web_sample(): p_points must be a JSON object of at most 1 MiB'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_interval <= interval '0' THEN
        RAISE EXCEPTION 'record_web_sample(): p_interval % must be positive', p_interval
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_slots < 1 OR p_slots > 10000 THEN
        RAISE EXCEPTION 'record_web_sample(): p_slots % must be from 1 to 10000', p_slots
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    LOCK TABLE {schema}.web_samples IN SHARE ROW EXCLUSIVE MODE;
    SELECT s.slot, s.sampled_at INTO newest_slot, newest_at
    FROM {schema}.web_samples s ORDER BY s.sampled_at DESC LIMIT 1;
    IF newest_at > now() - p_interval THEN
        RETURN NULL;
    END IF;
    INSERT INTO {schema}.web_samples AS s (slot, sampled_at, points)
    VALUES (coalesce((newest_slot + 1) % p_slots, 0), now(), p_points)
    ON CONFLICT (slot) DO UPDATE SET sampled_at = excluded.sampled_at, points = excluded.points;
    DELETE FROM {schema}.web_samples s WHERE s.slot >= p_slots;
    RETURN now();
END;
$$;

REVOKE ALL ON FUNCTION {schema}.record_web_sample(jsonb, interval, integer) FROM PUBLIC;
