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
    {schema}.group_heartbeat(text, text, integer[], integer, boolean, text),
    {schema}.group_lock(text),
    {schema}.group_holders(text, integer[]),
    {schema}.group_assign(text, text[], integer[], integer[], text[]),
    {schema}.group_acquire(text, text, text),
    {schema}.group_release(text, text, integer[], integer[], bigint[], text),
    {schema}.group_leave(text, text, integer[], integer[], bigint[], text),
    {schema}.commit_offsets(text, text, integer[], integer[], bigint[], bigint[], text),
    {schema}.claim_batch(text, text, integer[], integer[], bigint[], integer, text),
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
-- args and no job in a state enqueue would not give it. Only in the queues of the role's
-- queue_roles rows (grant_queues below; docs/roles.md).
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
-- (fenced by the claim's token), rescue expired leases, purge finished jobs, keep limits and
-- cron schedules, in the queues of the role's queue_roles rows (grant_queues below). No table
-- rights: no reading the args of jobs it does not hold, no job in a state of its choosing, no
-- other worker's lease. Not VACUUM (owner only): left to autovacuum.
GRANT USAGE ON SCHEMA {schema} TO {role};
GRANT EXECUTE ON FUNCTION
    {schema}.claim_jobs(text[], integer, text, interval),
    {schema}.complete_jobs_archived(text, bigint[], uuid[], jsonb[]),
    {schema}.complete_jobs_deleted(text, bigint[], uuid[]),
    {schema}.fail_jobs(text, bigint[], uuid[], text[], float8[], boolean[]),
    {schema}.release_jobs(text, bigint[], uuid[], boolean[], text),
    {schema}.finish_cancelled_jobs(text, bigint[], uuid[], text[]),
    {schema}.snooze_jobs(text, bigint[], uuid[], float8[]),
    {schema}.heartbeat_jobs(text, bigint[], uuid[], interval),
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

-- name: grant_worker_0038
-- The worker capability's rights of migration 0038: register the worker, beat and unregister
-- it (only rows its own role registered), prune workers gone for a while. No table rights.
GRANT EXECUTE ON FUNCTION
    {schema}.register_worker(text, text, integer, text[], integer, interval),
    {schema}.worker_heartbeat(text, interval),
    {schema}.unregister_worker(text),
    {schema}.prune_workers(interval)
TO {role};

-- name: grant_worker_0039
-- The worker capability's rights of migration 0039: claim from a floor, and find the jobs
-- below a floor (in the queues of the role's scope only, as every claim). No table rights.
GRANT EXECUTE ON FUNCTION
    {schema}.claim_jobs(text[], integer, text, interval, smallint[], timestamptz[]),
    {schema}.jobs_below_floors(text[], smallint[], timestamptz[])
TO {role};

-- name: grant_groups
-- Lets role %(role)s use consumer groups %(groups)s ('*': take any group nobody holds yet)
-- alongside the roles that hold them already (grant_groups checks the caller is an admin; row
-- locks on the new group_roles rows).
SELECT {schema}.grant_groups(%(role)s, %(groups)s::text[]);

-- name: revoke_groups
-- Takes back role %(role)s's grants on groups %(groups)s; returns how many (row locks on them).
SELECT {schema}.revoke_groups(%(role)s, %(groups)s::text[]);

-- name: grant_topics
-- Lets role %(role)s publish to topics %(topics)s ('*': every topic); admins only (row locks on
-- the new topic_roles rows).
SELECT {schema}.grant_topics(%(role)s, %(topics)s::text[]);

-- name: revoke_topics
-- Takes back role %(role)s's grants on topics %(topics)s; returns how many (row locks on them).
SELECT {schema}.revoke_topics(%(role)s, %(topics)s::text[]);

-- name: revoke_queues
-- Takes back role %(role)s's grants on queues %(queues)s; returns how many (row locks on them).
SELECT {schema}.revoke_queues(%(role)s, %(queues)s::text[]);

-- name: role_grants
-- The scoped grants of role %(role)s (every role's when NULL); admins only (no locks).
SELECT role_name, resource, name, owner, granted_at FROM {schema}.role_grants(%(role)s);

-- name: grant_queues
-- Lets role %(role)s enqueue to and run jobs of queues %(queues)s ('*': every queue) as an
-- enqueuer or worker. Row locks on the new queue_roles rows.
INSERT INTO {schema}.queue_roles (queue, role_oid)
SELECT q, r.oid FROM unnest(%(queues)s::text[]) AS q, pg_roles r
WHERE r.rolname = %(role)s
ON CONFLICT DO NOTHING;

-- name: scope_queues
-- Takes every queue ('*') from role %(role)s: it keeps the queues granted by name (row locks
-- on the deleted queue_roles row).
DELETE FROM {schema}.queue_roles g USING pg_roles r
WHERE r.rolname = %(role)s AND g.role_oid = r.oid AND g.queue = '*';
