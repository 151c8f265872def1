-- Least-privilege grants: one named statement per capability, `{role}` rendered as a quoted
-- identifier. SECURITY INVOKER functions (publish, publish_batch) run with the caller's rights,
-- so the table grants below are what they need too.

-- name: grant_producer
-- Publish to any topic: read topic metadata, advance counter rows, insert messages.
GRANT USAGE ON SCHEMA {schema} TO {role};
GRANT SELECT ON {schema}.topics TO {role};
GRANT SELECT, UPDATE (next_offset) ON {schema}.partitions TO {role};
GRANT INSERT ON {schema}.messages TO {role};

-- name: grant_consumer
-- Consume any topic in any group: read messages and metadata, keep the group's cursors.
GRANT USAGE ON SCHEMA {schema} TO {role};
GRANT SELECT ON {schema}.topics, {schema}.partitions, {schema}.messages,
                {schema}.messages_view TO {role};
GRANT SELECT, INSERT, UPDATE (next_offset, updated_at) ON {schema}.cursors TO {role};
GRANT EXECUTE ON FUNCTION
    {schema}.group_heartbeat(text, text, integer[], integer, boolean),
    {schema}.group_lock(text),
    {schema}.group_holders(text, integer[]),
    {schema}.group_assign(text, text[], integer[], integer[], text[]),
    {schema}.group_acquire(text, text),
    {schema}.group_release(text, text, integer[], integer[], bigint[]),
    {schema}.group_leave(text, text, integer[], integer[], bigint[]),
    {schema}.commit_offsets(text, text, integer[], integer[], bigint[], bigint[]),
    {schema}.claim_batch(text, text, integer[], integer[], bigint[], integer),
    {schema}.consume(text, text, integer, integer),
    {schema}.commit(text, text, integer, bigint),
    {schema}.seek(text, text, integer, bigint),
    {schema}.lag(text, text)
TO {role};

-- name: grant_admin
-- Everything in the schema: topics, groups, retention, migrations.
GRANT ALL ON SCHEMA {schema} TO {role};
GRANT ALL ON ALL TABLES IN SCHEMA {schema} TO {role};
GRANT ALL ON ALL SEQUENCES IN SCHEMA {schema} TO {role};
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA {schema} TO {role};

-- name: grant_enqueuer
-- Enqueue jobs (in the caller's transaction, workflows too) and wait for their results, only
-- through postroom's SECURITY DEFINER functions: no table rights, so no reading other jobs'
-- args and no job in a state enqueue would not give it.
GRANT USAGE ON SCHEMA {schema} TO {role};
GRANT EXECUTE ON FUNCTION
    {schema}.enqueue_batch(text[], text[], text[], smallint[], timestamptz[], float8[],
                           integer[], text[]),
    {schema}.unique_key_holders(text[]),
    {schema}.enqueue_job(text, jsonb, text, integer, timestamptz, float8, integer, text,
                         bigint[], text, text),
    {schema}.enqueue(text, jsonb, text, integer, timestamptz, integer, text, bigint[], text,
                     text),
    {schema}.enqueue(text, text, text, integer, timestamptz, integer, text, bigint[], text,
                     text),
    {schema}.job_outcome(bigint)
TO {role};

-- name: grant_worker
-- Run jobs: claim, heartbeat, write back, rescue, keep limits and cron schedules. Not VACUUM
-- (owner only): a worker that may not vacuum leaves it to autovacuum.
GRANT USAGE ON SCHEMA {schema} TO {role};
GRANT SELECT, INSERT, UPDATE, DELETE ON {schema}.jobs, {schema}.finished_jobs,
    {schema}.job_limits, {schema}.job_schedules TO {role};
GRANT SELECT ON {schema}.all_jobs, {schema}.queue_pauses TO {role};
GRANT SELECT, INSERT, UPDATE, DELETE ON {schema}.job_dependencies TO {role};
