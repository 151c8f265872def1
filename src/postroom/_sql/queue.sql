-- The job queue's runtime queries. Queue names, kinds and worker ids are data (validated by
-- pattern in Python and by CHECK constraints), never SQL text. A worker fences every write-back
-- with its claim token (claim_jobs gives each claimed job a fresh random one, migration 0020):
-- a job rescued from it and claimed again no longer matches, and no other worker can forge it.

-- name: enqueue_jobs
-- Inserts a batch of jobs through the enqueue_batch SQL function (SECURITY DEFINER, so the
-- enqueuer role needs no table rights): one INSERT ... SELECT unnest, row locks on the new rows
-- only. Returns the new ids in input order, as one array (20,000 rows cost the client more to
-- read than one array). Arguments arrive as JSON text: casting per row is cheaper than sending
-- a jsonb[] array. Arrays go in binary format: psycopg's text array dumper quotes every element
-- with a regex, which cost more than the rest of the client's work. A column every job shares
-- is a one-element array (migration 0014).
SELECT array_agg(b.id ORDER BY b.ord)
FROM {schema}.enqueue_batch(%(queues)b::text[], %(kinds)b::text[], %(args)b::text[],
                            %(priorities)b::smallint[], %(run_ats)b::timestamptz[],
                            %(delays)b::float8[], %(max_attempts)b::integer[])
     WITH ORDINALITY AS b(id, unique_key, ord);

-- name: enqueue_unique_jobs
-- As enqueue_jobs, for a batch with unique keys: a job whose key is held by a ready or running
-- job is skipped (ON CONFLICT on the partial unique index; speculative insertion, which costs
-- more, so keyless batches pass no keys). Returns the new ids and their keys, in input order.
SELECT array_agg(b.id ORDER BY b.ord), array_agg(b.unique_key ORDER BY b.ord)
FROM {schema}.enqueue_batch(%(queues)b::text[], %(kinds)b::text[], %(args)b::text[],
                            %(priorities)b::smallint[], %(run_ats)b::timestamptz[],
                            %(delays)b::float8[], %(max_attempts)b::integer[],
                            %(unique_keys)b::text[])
     WITH ORDINALITY AS b(id, unique_key, ord);

-- name: jobs_by_unique_key
-- The ready or running job holding each unique key (the unique_key_holders function; no locks).
SELECT unique_key, id FROM {schema}.unique_key_holders(%(unique_keys)s::text[]);

-- name: enqueue_workflow_job
-- Enqueues one job with parents or a sequence through the enqueue_job SQL function: locks the
-- live parents (FOR NO KEY UPDATE) and the sequence row; returns the id and whether it is new.
SELECT id, created
FROM {schema}.enqueue_job(%(kind)s, %(args)s::jsonb, %(queue)s, %(priority)s, %(run_at)s,
                          %(delay)s, %(max_attempts)s, %(unique_key)s, %(after)s::bigint[],
                          %(sequence)s, %(on_parent_failure)s);

-- name: set_job_meta
-- Sets the metadata the jobs inserted next in this transaction get (the jobs.meta column's
-- default, migration 0035; '' clears it); no locks.
SELECT set_config('postroom.job_meta', %(meta)s, true);

-- name: pause_queue
-- Pauses one queue (row lock on its queue_pauses row); false if it was paused already.
SELECT {schema}.pause_queue(%(queue)s);

-- name: resume_queue
-- Resumes one queue and wakes its workers (row lock on its pause row); false if not paused.
SELECT {schema}.resume_queue(%(queue)s);

-- name: paused_queues
-- The paused queues with when they were paused (no locks).
SELECT queue, paused_at FROM {schema}.queue_pauses ORDER BY queue;

-- name: job_parents
-- The unresolved parents of one job, for job show (no locks).
SELECT parent_id FROM {schema}.job_dependencies WHERE job_id = %(id)s ORDER BY parent_id;

-- name: claim_jobs
-- Claims up to %(limit)s due jobs of the queues for this worker under a lease (the claim_jobs
-- SQL function of migration 0039: FOR UPDATE SKIP LOCKED; limit rows FOR UPDATE when limits
-- exist), each queue's scan starting at its floor (NULL: the whole queue; docs/queue.md
-- "Claim floors"). Sorted in claim order: UPDATE ... RETURNING gives rows in the order it
-- wrote them, and the worker starts a prefetched batch in the order it comes. The arguments
-- come as JSON text: the worker decodes them once, in the slot that runs the job
-- (Serializer.loads). meta: the job's metadata (migration 0035: the trace context of its
-- enqueue), NULL for most jobs. priority last: the worker's next floor, not part of the job.
SELECT id, queue, kind, args::text, attempts, max_attempts, created_at, run_at,
       claim_token::text, meta, priority
FROM {schema}.claim_jobs(%(queues)s::text[], %(limit)s, %(worker)s, %(lease)s::interval,
                         %(floor_priorities)s::smallint[], %(floor_run_ats)s::timestamptz[])
ORDER BY priority, run_at, id;

-- name: jobs_below_floors
-- For each queue whose floor is given, the run_at of the earliest due ready job below it,
-- if any (the jobs_below_floors SQL function: no locks).
SELECT queue, run_at
FROM {schema}.jobs_below_floors(%(queues)s::text[], %(floor_priorities)s::smallint[],
                                %(floor_run_ats)s::timestamptz[]);

-- Write-backs take parallel arrays (ids, claim tokens, ...) and find their rows by primary key
-- alone (id = ANY), reading each row's own entries with array_position (the completions, the
-- hot path: through a jsonb id -> position map built once per statement, migration 0010, as
-- array_position is a linear search per row): no join, so no plan can rescan the running jobs
-- for every id (a join on unnest() once got a nested loop over the running index, quadratic:
-- it stalled a worker for minutes with 80,000 jobs running). The fence is
-- `lease_expires_at IS NOT NULL` (the same as state = 'running', by the table's CHECK, but not
-- a condition the running index could serve), worker and claim token.

-- name: complete_jobs_archived
-- Finishes successful jobs: deletes them from the hot table and inserts them into finished_jobs
-- with their results (row locks on the deleted rows). Fenced by worker and claim token.
SELECT {schema}.complete_jobs_archived(%(worker)s, %(ids)s::bigint[], %(tokens)s::uuid[],
                                       %(results)s::jsonb[]);

-- name: complete_jobs_deleted
-- Finishes successful jobs without keeping them: deletes them (row locks on the deleted rows).
SELECT {schema}.complete_jobs_deleted(%(worker)s, %(ids)s::bigint[], %(tokens)s::uuid[]);

-- name: fail_jobs
-- Records failed attempts (row locks): back to ready after the retry delay, or to failed (the
-- dead-letter state) when attempts are used up or the failure is final. Fenced as above.
SELECT {schema}.fail_jobs(%(worker)s, %(ids)s::bigint[], %(tokens)s::uuid[],
                          %(errors)s::text[], %(delays)s::float8[], %(finals)s::boolean[]);

-- name: release_jobs
-- Gives back claimed jobs unrun (row locks): ready again at once. Jobs that never started get
-- their attempt back; interrupted ones keep it (a job that never fits the grace period still
-- ends failed). Fenced as above.
SELECT {schema}.release_jobs(%(worker)s, %(ids)s::bigint[], %(tokens)s::uuid[],
                             %(started)s::boolean[], %(reason)s);

-- name: finish_cancelled_jobs
-- Moves running jobs whose cancellation took effect (or that cancelled themselves, with a
-- reason) to finished_jobs as cancelled (row locks). Fenced as above.
SELECT {schema}.finish_cancelled_jobs(%(worker)s, %(ids)s::bigint[], %(tokens)s::uuid[],
                                      %(reasons)s::text[]);

-- name: snooze_jobs
-- Puts snoozed jobs back to ready after their delay with their attempt given back (row locks):
-- a snooze does not spend an attempt. Fenced as above.
SELECT {schema}.snooze_jobs(%(worker)s, %(ids)s::bigint[], %(tokens)s::uuid[],
                            %(delays)s::float8[]);

-- name: heartbeat_jobs
-- Extends the leases of this worker's jobs (row locks; a HOT update: no index covers the
-- lease). Returns the jobs still held, with their cancellation flag; a missing id was rescued.
SELECT id, cancel_requested
FROM {schema}.heartbeat_jobs(%(worker)s, %(ids)s::bigint[], %(tokens)s::uuid[],
                             %(lease)s::interval);

-- name: rescue_expired_jobs
-- Returns running jobs whose lease has expired (their worker stopped heartbeating) to ready, or
-- to failed when their attempts are used up; cancelled ones finish as cancelled. Only expired
-- leases: a job whose worker is alive is never taken from it. A returned job keeps its run_at,
-- so it keeps its place ahead of what was enqueued after it. FOR UPDATE SKIP LOCKED, batches.
SELECT {schema}.rescue_expired_jobs(%(batch)s::integer);

-- name: purge_finished
-- Deletes up to %(batch)s finished jobs that finished before the cutoff (row locks on them).
SELECT {schema}.purge_finished_jobs(%(cutoff)s::timestamptz, %(state)s::text, %(kind)s::text,
                                    %(batch)s::integer);

-- name: purge_failed
-- Deletes up to %(batch)s failed jobs that failed before the cutoff (row locks on them).
WITH purged AS (
    DELETE FROM {schema}.jobs
    WHERE id IN (
        SELECT id FROM {schema}.jobs
        WHERE state = 'failed' AND run_at < %(cutoff)s
          AND (%(kind)s::text IS NULL OR kind = %(kind)s)
        LIMIT %(batch)s
        FOR UPDATE SKIP LOCKED
    )
    RETURNING 1
)
SELECT count(*) FROM purged;

-- name: get_job
-- One job, live or finished (no locks).
SELECT id, queue, kind, args, state, priority, attempts, max_attempts, run_at, created_at,
       started_at, finished_at, lease_expires_at, worker, last_error, unique_key, result,
       cancel_requested
FROM {schema}.all_jobs WHERE id = %(id)s;

-- name: list_jobs
-- Jobs filtered by state, kind and queue, newest first (no locks).
SELECT id, queue, kind, args, state, priority, attempts, max_attempts, run_at, created_at,
       started_at, finished_at, lease_expires_at, worker, last_error, unique_key, result,
       cancel_requested
FROM {schema}.all_jobs
WHERE (%(state)s::text IS NULL OR state = %(state)s)
  AND (%(kind)s::text IS NULL OR kind = %(kind)s)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s)
ORDER BY id DESC
LIMIT %(limit)s;

-- name: job_outcome
-- The state, result and last error of one job, for result() (the job_outcome function: the
-- enqueuer role may call it without reading args; no locks).
SELECT state, result, last_error FROM {schema}.job_outcome(%(id)s);

-- name: retry_failed_jobs
-- Redrives failed jobs through the SQL API function (row locks on the moved rows).
SELECT {schema}.retry_failed_jobs(%(id)s, %(kind)s, %(queue)s);

-- name: job_state
-- The live state of one job and whether another live job holds its unique key (no locks).
SELECT j.state,
       EXISTS (SELECT 1 FROM {schema}.jobs o
               WHERE o.unique_key = j.unique_key AND o.id <> j.id
                 AND o.state IN ('ready', 'running')) AS key_taken
FROM {schema}.jobs j WHERE j.id = %(id)s;

-- name: cancel_job
-- Cancels one job through the SQL API function (row lock on it); returns its former state.
SELECT {schema}.cancel_job(%(id)s);

-- name: job_counts
-- Jobs per queue and state with the oldest due ready job's age in seconds (no locks). Finished
-- jobs are counted from finished_jobs, so they count only while kept.
SELECT queue, state, count(*),
       extract(epoch FROM now() - min(run_at) FILTER (WHERE state = 'ready' AND run_at <= now()))
FROM {schema}.jobs GROUP BY queue, state
UNION ALL
SELECT queue, state, count(*), NULL FROM {schema}.finished_jobs GROUP BY queue, state
ORDER BY 1, 2;

-- name: job_throughput
-- Jobs finished per queue in the last %(seconds)s seconds (no locks; kept jobs only).
SELECT queue, count(*) FROM {schema}.finished_jobs
WHERE finished_at >= now() - make_interval(secs => %(seconds)s) AND state = 'done'
GROUP BY queue ORDER BY queue;

-- name: set_limit
-- Creates or replaces one concurrency/rate limit (row lock on it); the bucket starts full.
SELECT {schema}.set_job_limit(%(scope)s, %(name)s, %(max_running)s::integer, %(rate)s::float8,
                              %(burst)s::float8);

-- name: delete_limit
-- Removes one limit (row lock on it).
SELECT {schema}.delete_job_limit(%(scope)s, %(name)s);

-- name: list_limits
-- Every configured limit (no locks).
SELECT scope, name, max_running, rate, burst FROM {schema}.job_limits ORDER BY scope, name;

-- name: upsert_schedule
-- Registers a periodic job (row lock on its schedule row). An unchanged cron keeps its next
-- tick; a changed one starts from the tick the caller computed.
SELECT {schema}.upsert_schedule(%(name)s, %(cron)s, %(kind)s, %(queue)s, %(args)s::jsonb,
                                %(priority)s::integer, %(max_attempts)s::integer,
                                %(next_run_at)s::timestamptz);

-- name: due_schedules
-- Locks the given schedules whose tick has come (FOR UPDATE SKIP LOCKED: one worker per tick;
-- the others skip it) and returns them with the database clock.
SELECT name, cron, kind, queue, args, priority, max_attempts, next_run_at, now
FROM {schema}.due_schedules(%(names)s::text[]);

-- name: advance_schedule
-- Moves a locked schedule to its next tick (under the row lock taken by due_schedules).
SELECT {schema}.advance_schedule(%(name)s, %(last_run_at)s::timestamptz,
                                 %(next_run_at)s::timestamptz);

-- name: next_schedule_at
-- The earliest next tick among the given schedules (no locks).
SELECT {schema}.next_schedule_at(%(names)s::text[]);

-- name: db_clock
-- The database's clock: schedules are computed in database time (no locks).
SELECT clock_timestamp();

-- name: queues_ever_used
-- Which of the queues have (or had, and kept) a job: one index probe or bounded scan per queue,
-- for the start-up warning about a queue nobody uses (no locks).
SELECT q FROM {schema}.queues_ever_used(%(queues)s::text[]) AS q;

-- name: waiting_unregistered_kinds
-- Kinds this worker does not register with jobs due for longer than the threshold, from at
-- most 1000 such jobs (a bounded scan of the ready set; no locks).
SELECT queue, kind, jobs, waited
FROM {schema}.waiting_unregistered_kinds(%(threshold)s::interval, %(kinds)s::text[]);

-- name: worker_session
-- Worker connections commit without waiting for the WAL flush: a claim, heartbeat or outcome
-- lost in a server crash only means the job runs again (at least once, as after a worker
-- crash). Enqueues keep the caller's setting: they run on the caller's connections.
SET synchronous_commit = off;

-- name: queue_dead_tuples
-- Dead and live row estimates of the queue tables, the hot one, the finished ones and the small
-- ones updated by claims and ticks (limits, schedules, sequences), from the statistics views (no
-- locks).
SELECT c.relname, coalesce(s.n_dead_tup, 0), coalesce(s.n_live_tup, 0)
FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
WHERE c.oid IN ('{schema}.jobs'::regclass, '{schema}.finished_jobs'::regclass,
                '{schema}.job_limits'::regclass, '{schema}.job_schedules'::regclass,
                '{schema}.job_sequences'::regclass, '{schema}.job_dependencies'::regclass,
                '{schema}.queue_pauses'::regclass)
ORDER BY c.relname;

-- name: vacuum_next_xid
-- The first transaction ID not yet completed, taken before a VACUUM (assigns none): a horizon
-- held since before the VACUUM is older (vacuum_horizon_holder's vacuum_age).
SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint;

-- name: vacuum_horizon_holder
-- What holds the oldest horizon of this database, and so keeps VACUUM from removing dead rows:
-- a session of this database or a WAL sender (a standby's feedback) by its transaction ID or
-- snapshot, a prepared transaction, or a replication slot. Every snapshot taken meanwhile has
-- the same xmin (the oldest transaction's ID), so on a tie the one holding an XID comes first,
-- then the oldest transaction. A session's pid and how many transactions old its horizon is are
-- shown to every role; its state and since when are NULL where this role may not see them. A
-- prepared transaction or a slot has no pid: what it is is in ``state``. ``vacuum_age``: the age
-- of %(began)s (vacuum_next_xid before the VACUUM), measured as the holder's in one statement.
-- ``horizon``: the held transaction ID itself (text), the same while the same horizon holds.
SELECT h.pid, h.xid_age, h.state, h.xact_start, h.application_name,
       age(((%(began)s::bigint %% 4294967296)::text)::xid) AS vacuum_age, h.horizon
FROM (
    SELECT a.pid, greatest(age(a.backend_xid), age(a.backend_xmin)) AS xid_age, a.state,
           a.xact_start, a.application_name, a.backend_xid IS NOT NULL AS has_xid,
           CASE WHEN a.backend_xmin IS NULL OR age(a.backend_xid) >= age(a.backend_xmin)
                THEN a.backend_xid ELSE a.backend_xmin END::text AS horizon
    FROM pg_stat_activity a
    WHERE (a.backend_xid IS NOT NULL OR a.backend_xmin IS NOT NULL)
      AND a.pid <> pg_backend_pid()
      AND (a.datname = current_database() OR a.backend_type = 'walsender')
    UNION ALL
    SELECT NULL, age(p.transaction), format('prepared transaction %%L', p.gid), p.prepared,
           NULL, true, p.transaction::text
    FROM pg_prepared_xacts p
    WHERE p.database = current_database()
    UNION ALL
    SELECT NULL, greatest(age(s.xmin), age(s.catalog_xmin)),
           format('replication slot %%L', s.slot_name), NULL, NULL, true,
           CASE WHEN s.catalog_xmin IS NULL OR age(s.xmin) >= age(s.catalog_xmin)
                THEN s.xmin ELSE s.catalog_xmin END::text
    FROM pg_replication_slots s
    WHERE (s.xmin IS NOT NULL OR s.catalog_xmin IS NOT NULL)
      AND (s.database = current_database() OR s.database IS NULL)
) h
ORDER BY h.xid_age DESC, h.has_xid DESC, h.xact_start NULLS LAST
LIMIT 1;

-- name: try_vacuum_lock
-- Session advisory lock (try, no wait) electing the one worker that vacuums this schema now.
SELECT pg_try_advisory_lock(hashtext('postroom.vacuum'), hashtext(%(schema)s));

-- name: vacuum_unlock
-- Releases the vacuum election lock.
SELECT pg_advisory_unlock(hashtext('postroom.vacuum'), hashtext(%(schema)s));

-- name: vacuum_jobs
-- Vacuums the hot table (SHARE UPDATE EXCLUSIVE: claims and writes go on meanwhile).
VACUUM (ANALYZE) {schema}.jobs;

-- name: analyze_jobs
-- Refreshes the hot table's planner statistics alone, for when a VACUUM would remove nothing
-- (SHARE UPDATE EXCLUSIVE: claims and writes go on meanwhile).
ANALYZE {schema}.jobs;

-- name: vacuum_finished_jobs
-- Vacuums the finished jobs after purges (SHARE UPDATE EXCLUSIVE).
VACUUM {schema}.finished_jobs;

-- name: vacuum_job_limits
-- Vacuums the limits' token buckets, updated by every limited claim (SHARE UPDATE EXCLUSIVE).
VACUUM {schema}.job_limits;

-- name: vacuum_job_schedules
-- Vacuums the cron schedules, updated at every tick (SHARE UPDATE EXCLUSIVE).
VACUUM {schema}.job_schedules;

-- name: vacuum_job_sequences
-- Vacuums the sequences' last jobs (SHARE UPDATE EXCLUSIVE).
VACUUM {schema}.job_sequences;

-- name: vacuum_job_dependencies
-- Vacuums the dependency edges, deleted as parents finish (SHARE UPDATE EXCLUSIVE).
VACUUM {schema}.job_dependencies;

-- name: vacuum_queue_pauses
-- Vacuums the queue pauses (SHARE UPDATE EXCLUSIVE).
VACUUM {schema}.queue_pauses;

-- name: may_vacuum_jobs
-- Whether this role owns the queue tables (VACUUM by anyone else is skipped with a warning).
SELECT pg_has_role(current_user, relowner, 'USAGE') FROM pg_class
WHERE oid = '{schema}.jobs'::regclass;

-- name: register_worker
-- Registers this worker in the worker registry (migration 0038), alive for %(ttl)s: true, or
-- false if another role's worker has the name (row lock on the worker's row).
SELECT {schema}.register_worker(%(worker)s, %(host)s, %(pid)s, %(queues)s::text[],
                                %(concurrency)s, %(ttl)s::interval);

-- name: worker_heartbeat
-- This worker's registry heartbeat, alive for %(ttl)s more; false if its row is gone (row lock
-- on it).
SELECT {schema}.worker_heartbeat(%(worker)s, %(ttl)s::interval);

-- name: unregister_worker
-- Removes this worker's registry row on a clean stop (row lock on it).
SELECT {schema}.unregister_worker(%(worker)s);

-- name: prune_workers
-- Deletes the registry rows of workers gone for longer than %(gone_for)s; how many (row locks on
-- them, skipping locked ones).
SELECT {schema}.prune_workers(%(gone_for)s::interval);
