-- Least-privilege grants: one named statement per capability, `{role}` rendered as a quoted
-- identifier. Writes go through SECURITY DEFINER functions (search_path pinned, EXECUTE revoked
-- from PUBLIC in the migrations), so no role gets a right that could rewrite a counter, plant a
-- message or move a cursor backward.

-- name: grant_producer
-- Publish to any topic: read topic names and partition counts, reserve offsets and copy messages
-- into them (a trigger refuses rows outside this transaction's reservation), the SQL publish API.
-- No UPDATE or DELETE anywhere, no SELECT on messages.
GRANT USAGE ON SCHEMA {schema} TO {role};
GRANT SELECT ON {schema}.topics TO {role};
GRANT INSERT ON {schema}.messages TO {role};
GRANT EXECUTE ON FUNCTION
    {schema}.reserve_offsets(integer[], integer[], bigint[]),
    {schema}.publish_batch(text, bytea[], bytea[], jsonb[]),
    {schema}.publish_batch(text, text[], text[], jsonb[]),
    {schema}.publish_batch(text, jsonb[], text[], jsonb[]),
    {schema}.publish(text, bytea, bytea, jsonb),
    {schema}.publish(text, text, text, jsonb),
    {schema}.publish(text, jsonb, text, jsonb)
TO {role};

-- name: grant_consumer
-- Consume any topic in any group: read messages, topics, counters and cursors; create cursors,
-- move them forward and claim ranges through functions. No table writes.
GRANT USAGE ON SCHEMA {schema} TO {role};
GRANT SELECT ON {schema}.topics, {schema}.partitions, {schema}.messages,
                {schema}.messages_view, {schema}.cursors TO {role};
GRANT EXECUTE ON FUNCTION
    {schema}.ensure_cursors(text, integer[], integer[], text),
    {schema}.commit_cursors(text, integer[], integer[], bigint[]),
    {schema}.claim_range(text, integer[], integer[], integer),
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
GRANT EXECUTE ON FUNCTION
    {schema}.enqueue_batch(text[], text[], text[], smallint[], timestamptz[], float8[],
                           integer[], text[]),
    {schema}.unique_key_holders(text[]),
    {schema}.job_outcome(bigint)
TO {role};
