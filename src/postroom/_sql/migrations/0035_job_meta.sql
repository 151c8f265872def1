-- Job metadata (issue 17, tracing): `meta`, a JSON object that travels with a job from its
-- enqueue to its run. postroom keeps the W3C trace context of the span that enqueued the job
-- there (traceparent, tracestate), so enqueue -> run is one trace (docs/observability.md,
-- "Tracing"). The column's default reads the transaction-local setting postroom.job_meta, so
-- every way in (enqueue_batch, enqueue_job, enqueue(), from any language) carries it without
-- a new argument or a second write: a client runs set_config('postroom.job_meta', '{...}',
-- true) before its inserts and set_config('postroom.job_meta', '', true) after. Unset or empty,
-- the default is NULL. current_setting is stable, not volatile: the column is added without a
-- table rewrite, and existing jobs get NULL.
ALTER TABLE {schema}.jobs ADD COLUMN IF NOT EXISTS meta jsonb
    DEFAULT nullif(current_setting('postroom.job_meta', true), '')::jsonb
    CONSTRAINT jobs_meta_check CHECK (jsonb_typeof(meta) = 'object');
