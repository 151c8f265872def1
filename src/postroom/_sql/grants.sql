-- Least-privilege grants: one named statement per capability, `{role}` rendered as a quoted
-- identifier. Writes go through SECURITY DEFINER functions (search_path pinned, EXECUTE revoked
-- from PUBLIC in the migrations), so no role gets a right that could rewrite a counter, plant a
-- message or move a cursor backward.

-- name: grant_producer
-- Publish to any topic: read topic names and partition counts, reserve offsets and copy messages
-- into them (a trigger refuses rows outside this transaction's reservation), stage messages in
-- the caller's transaction (written at its commit), the SQL publish API.
-- No UPDATE or DELETE anywhere, no SELECT on messages. run_retention: the retention runner's
-- round with the defaults (it removes only what the topics' settings allow).
GRANT USAGE ON SCHEMA {schema} TO {role};
GRANT SELECT ON {schema}.topics TO {role};
GRANT INSERT ON {schema}.messages TO {role};
GRANT EXECUTE ON FUNCTION
    {schema}.reserve_offsets(integer[], integer[], bigint[]),
    {schema}.stage_messages(integer[], integer[], bytea[], bytea[], jsonb[]),
    {schema}.publish_batch(text, bytea[], bytea[], jsonb[]),
    {schema}.publish_batch(text, text[], text[], jsonb[]),
    {schema}.publish_batch(text, jsonb[], text[], jsonb[]),
    {schema}.publish(text, bytea, bytea, jsonb),
    {schema}.publish(text, text, text, jsonb),
    {schema}.publish(text, jsonb, text, jsonb),
    {schema}.run_retention()
TO {role};

-- name: grant_consumer
-- Consume any topic in any group: read messages, topics, counters and cursors; create cursors,
-- move them forward and claim ranges through functions; run the retention runner's round
-- (run_retention, the defaults). No table writes.
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
    {schema}.lag(text, text),
    {schema}.run_retention()
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
-- Run jobs only through postroom's SECURITY DEFINER functions: claim, heartbeat and write back
-- (fenced by worker name and attempt), rescue expired leases, purge finished jobs, keep limits
-- and cron schedules. No table rights: no reading the args of jobs it does not hold, no job in a
-- state of its choosing, no other worker's lease. Not VACUUM (owner only): left to autovacuum.
GRANT USAGE ON SCHEMA {schema} TO {role};
GRANT EXECUTE ON FUNCTION
    {schema}.claim_jobs(text[], integer, text, interval),
    {schema}.complete_jobs_archived(text, bigint[], integer[], jsonb[]),
    {schema}.complete_jobs_deleted(text, bigint[], integer[]),
    {schema}.fail_jobs(text, bigint[], integer[], text[], float8[], boolean[]),
    {schema}.release_jobs(text, bigint[], integer[], boolean[], text),
    {schema}.finish_cancelled_jobs(text, bigint[], integer[], text[]),
    {schema}.snooze_jobs(text, bigint[], integer[], float8[]),
    {schema}.heartbeat_jobs(text, bigint[], integer[], interval),
    {schema}.rescue_expired_jobs(integer),
    {schema}.purge_finished_jobs(timestamptz, text, text, integer),
    {schema}.waiting_unregistered_kinds(interval, text[]),
    {schema}.queues_ever_used(text[]),
    {schema}.set_job_limit(text, text, integer, float8, float8),
    {schema}.delete_job_limit(text, text),
    {schema}.upsert_schedule(text, text, text, text, jsonb, integer, integer, timestamptz),
    {schema}.due_schedules(text[]),
    {schema}.advance_schedule(text, timestamptz, timestamptz),
    {schema}.next_schedule_at(text[]),
    {schema}.enqueue_batch(text[], text[], text[], smallint[], timestamptz[], float8[],
                           integer[], text[]),
    {schema}.unique_key_holders(text[]),
    {schema}.job_outcome(bigint)
TO {role};

-- name: share_groups
-- Lets role %(role)s use consumer groups %(groups)s (commit, claim, seek, join) alongside the
-- roles that hold them already; a group nobody holds yet is then held by it. Row locks on the
-- new group_roles rows.
INSERT INTO {schema}.group_roles (group_name, role_oid)
SELECT g, r.oid FROM unnest(%(groups)s::text[]) AS g, pg_roles r
WHERE r.rolname = %(role)s
ON CONFLICT DO NOTHING;
