-- The dashboard's read-only queries (postroom.web), for what the public API does not give, and
-- the one write it has no public call for (delete_job). Every read is bounded: counts come from
-- counter rows, the primary keys' first rows, planner statistics above a threshold, or a
-- bounded sample; no query scans messages or finished_jobs in full (docs/dashboard.md shows
-- their plans).

-- name: web_table_estimates
-- Planner row estimates (pg_class.reltuples, -1 before the first ANALYZE) and on-disk size of
-- the big tables (no locks).
SELECT c.relname, c.reltuples::bigint, pg_total_relation_size(c.oid)::bigint
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %(schema)s AND c.relname IN ('messages', 'jobs', 'finished_jobs');

-- name: web_partitions
-- Per partition of one topic: low-water mark (first retained offset, from the primary key),
-- high-water mark (the counter row), retained count and the newest message's time (no locks).
SELECT p.partition, coalesce(low.o, p.next_offset) AS low_water, p.next_offset AS high_water,
       p.next_offset - coalesce(low.o, p.next_offset) AS messages, newest.created_at
FROM {schema}.partitions p
LEFT JOIN LATERAL (
    SELECT m."offset" AS o FROM {schema}.messages m
    WHERE m.topic_id = p.topic_id AND m.partition = p.partition
    ORDER BY m."offset" LIMIT 1
) low ON true
LEFT JOIN LATERAL (
    SELECT m.created_at FROM {schema}.messages m
    WHERE m.topic_id = p.topic_id AND m.partition = p.partition
    ORDER BY m."offset" DESC LIMIT 1
) newest ON true
WHERE p.topic_id = (SELECT id FROM {schema}.topics WHERE name = %(topic)s)
ORDER BY p.partition;

-- name: web_all_partitions
-- Every partition of every topic with low and high water marks, for /metrics (no locks).
SELECT t.name, p.partition, coalesce(low.o, p.next_offset) AS low_water, p.next_offset
FROM {schema}.topics t
JOIN {schema}.partitions p ON p.topic_id = t.id
LEFT JOIN LATERAL (
    SELECT m."offset" AS o FROM {schema}.messages m
    WHERE m.topic_id = p.topic_id AND m.partition = p.partition
    ORDER BY m."offset" LIMIT 1
) low ON true
ORDER BY t.name, p.partition;

-- name: web_browse
-- Up to %(limit)s messages of one partition from offset %(from_offset)s on, optionally filtered
-- by key, a header's presence and value (JSON containment) or value containment (JSON). Walks
-- the primary key from the offset and stops after %(scan)s rows, so a filter that matches
-- nothing reads a bounded range (no locks).
SELECT w."offset", w.key, w.value, w.headers, w.created_at
FROM (
    SELECT m."offset", m.key, m.value, m.headers, m.created_at
    FROM {schema}.messages m
    WHERE m.topic_id = (SELECT id FROM {schema}.topics WHERE name = %(topic)s)
      AND m.partition = %(partition)s AND m."offset" >= %(from_offset)s
    ORDER BY m."offset"
    LIMIT %(scan)s
) w
WHERE (%(key)s::bytea IS NULL OR w.key = %(key)s::bytea)
  AND (%(headers)s::jsonb IS NULL OR w.headers @> %(headers)s::jsonb)
  AND (%(contains)s::jsonb IS NULL OR {schema}._try_json(w.value) @> %(contains)s::jsonb)
ORDER BY w."offset"
LIMIT %(limit)s;

-- name: web_message_time
-- The time of the first retained message of one partition at or after an offset: one primary
-- key probe, for the binary search that seeks by time (no locks).
SELECT m."offset", m.created_at FROM {schema}.messages m
WHERE m.topic_id = (SELECT id FROM {schema}.topics WHERE name = %(topic)s)
  AND m.partition = %(partition)s AND m."offset" >= %(offset)s
ORDER BY m."offset" LIMIT 1;

-- name: web_members
-- Live and recently expired members of every group with their topics, session and joined
-- time, the partitions they hold with each lease's epoch, and their last heartbeat (each
-- heartbeat sets expires_at to now() + session_timeout, so it is the expiry less the session;
-- no locks).
SELECT mb.group_name, mb.member_id, mb.joined_at, mb.expires_at, mb.expires_at > now() AS alive,
       extract(epoch FROM mb.session_timeout)::float8 AS session_seconds,
       coalesce((SELECT array_agg(t.name || '/' || l.partition || '@' || l.epoch
                                  ORDER BY t.name, l.partition)
                 FROM {schema}.leases l JOIN {schema}.topics t ON t.id = l.topic_id
                 WHERE l.group_name = mb.group_name AND l.owner = mb.member_id), '{{}}') AS held,
       mb.expires_at - mb.session_timeout AS last_heartbeat
FROM {schema}.members mb
ORDER BY mb.group_name, mb.member_id;

-- name: web_job_counts_exact
-- Live jobs per queue and state with the oldest due ready job's age (the hot table only; used
-- while its planner estimate is under the threshold; no locks).
SELECT queue, state, count(*)::bigint,
       extract(epoch FROM now() - min(run_at) FILTER (WHERE state = 'ready' AND run_at <= now()))
FROM {schema}.jobs GROUP BY queue, state ORDER BY 1, 2;

-- name: web_job_counts_sampled
-- Live jobs per queue and state scaled from a block sample of about %(percent)s percent (for a
-- jobs table over the threshold; no locks).
SELECT queue, state, (count(*) * 100.0 / %(percent)s)::bigint, NULL::float8
FROM {schema}.jobs TABLESAMPLE SYSTEM (%(percent)s) GROUP BY queue, state ORDER BY 1, 2;

-- name: web_finished_counts_exact
-- Kept finished jobs per queue and state (used while finished_jobs is under the threshold).
SELECT queue, state, count(*)::bigint FROM {schema}.finished_jobs GROUP BY queue, state
ORDER BY 1, 2;

-- name: web_finished_counts_sampled
-- Kept finished jobs per queue and state scaled from a block sample of about %(percent)s
-- percent (for a finished_jobs table over the threshold; no locks).
SELECT queue, state, (count(*) * 100.0 / %(percent)s)::bigint
FROM {schema}.finished_jobs TABLESAMPLE SYSTEM (%(percent)s) GROUP BY queue, state
ORDER BY 1, 2;

-- name: web_oldest_ready
-- Age in seconds of the oldest due ready job per queue, from the ready index (no locks).
SELECT q.queue, extract(epoch FROM now() - o.run_at)::float8
FROM (SELECT DISTINCT queue FROM {schema}.jobs WHERE state = 'ready') q
CROSS JOIN LATERAL (
    SELECT min(j.run_at) AS run_at FROM {schema}.jobs j
    WHERE j.state = 'ready' AND j.queue = q.queue AND j.run_at <= now()
) o
WHERE o.run_at IS NOT NULL;

-- name: web_dead_tuples
-- Dead row versions per table of the schema (the statistics' estimates, no locks): the queue's
-- and the log's hot tables gather them without bound while something pins the vacuum horizon
-- (docs/queue.md, 'Under a pinned horizon'; the horizon's age: vacuum_horizon_holder).
SELECT s.relname, s.n_dead_tup
FROM pg_stat_user_tables s
WHERE s.schemaname = %(schema)s
ORDER BY s.relname;

-- name: web_paused
-- Paused queues with the time they were paused (no locks).
SELECT queue, paused_at FROM {schema}.queue_pauses ORDER BY queue;

-- name: web_job_list
-- Live jobs of one state (ready, running, failed, waiting, held), newest first, filtered by
-- kind, queue, args containment and error text; from the partial index of the state where it
-- has one (no locks).
SELECT id, queue, kind, args, state, attempts, max_attempts, run_at, created_at, last_error
FROM {schema}.jobs
WHERE state = %(state)s
  AND (%(kind)s::text IS NULL OR kind = %(kind)s)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s)
  AND (%(args)s::jsonb IS NULL OR args @> %(args)s::jsonb)
  AND (%(error)s::text IS NULL OR last_error ILIKE '%%' || %(error)s || '%%')
  AND (%(before)s::bigint IS NULL OR id < %(before)s)
ORDER BY id DESC
LIMIT %(limit)s;

-- name: web_finished_list
-- Finished jobs (done, cancelled), newest first by id, walking the primary key backwards from
-- %(before)s and stopping after %(scan)s rows, so a filter that matches little reads a bounded
-- range (no locks).
SELECT w.id, w.queue, w.kind, w.args, w.state, w.attempts, w.max_attempts, w.run_at,
       w.created_at, w.last_error
FROM (
    SELECT f.* FROM {schema}.finished_jobs f
    WHERE (%(before)s::bigint IS NULL OR f.id < %(before)s)
    ORDER BY f.id DESC
    LIMIT %(scan)s
) w
WHERE w.state = %(state)s
  AND (%(kind)s::text IS NULL OR w.kind = %(kind)s)
  AND (%(queue)s::text IS NULL OR w.queue = %(queue)s)
  AND (%(args)s::jsonb IS NULL OR w.args @> %(args)s::jsonb)
  AND (%(error)s::text IS NULL OR w.last_error ILIKE '%%' || %(error)s || '%%')
ORDER BY w.id DESC
LIMIT %(limit)s;

-- name: web_job_ids
-- The ids of every live job matching a filter (for an action on all of them), up to %(limit)s
-- (no locks).
SELECT id FROM {schema}.jobs
WHERE state = %(state)s
  AND (%(kind)s::text IS NULL OR kind = %(kind)s)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s)
  AND (%(args)s::jsonb IS NULL OR args @> %(args)s::jsonb)
  AND (%(error)s::text IS NULL OR last_error ILIKE '%%' || %(error)s || '%%')
ORDER BY id
LIMIT %(limit)s;

-- name: web_job_workflow
-- One job's parents and dependents with their states (no locks).
SELECT 'parent' AS relation, d.parent_id AS id, coalesce(a.kind, '?'), coalesce(a.state, 'gone')
FROM {schema}.job_dependencies d LEFT JOIN {schema}.all_jobs a ON a.id = d.parent_id
WHERE d.job_id = %(id)s
UNION ALL
SELECT 'dependent', d.job_id, coalesce(a.kind, '?'), coalesce(a.state, 'gone')
FROM {schema}.job_dependencies d LEFT JOIN {schema}.all_jobs a ON a.id = d.job_id
WHERE d.parent_id = %(id)s
ORDER BY 1, 2;

-- name: web_schedules
-- Cron schedules with their last and next run (no locks).
SELECT name, cron, kind, queue, args, priority, max_attempts, last_run_at, next_run_at
FROM {schema}.job_schedules ORDER BY name;

-- name: web_schedule
-- One cron schedule, for "run now" (no locks).
SELECT name, cron, kind, queue, args, priority, max_attempts, last_run_at, next_run_at
FROM {schema}.job_schedules WHERE name = %(name)s;

-- name: web_limits
-- Concurrency and rate limits in force (no locks).
SELECT scope, name, max_running, rate, burst FROM {schema}.job_limits ORDER BY scope, name;

-- name: web_workers
-- Every worker of the registry (migration 0038; idle ones too) and every worker holding running
-- jobs, registered or not: name, host, pid, queues, concurrency, started, last heartbeat, alive
-- until, status ('alive', 'gone': no heartbeat for a lease, or 'unregistered': a worker that
-- cannot write the registry), then its running jobs, their kinds, the oldest start and the
-- latest lease expiry. Reads the registry (a row per worker) and the running jobs through their
-- partial index (bounded by the workers' concurrency); no locks.
WITH held AS (
    SELECT j.worker, count(*)::bigint AS jobs, array_agg(DISTINCT j.kind ORDER BY j.kind) AS kinds,
           min(j.started_at) AS oldest, max(j.lease_expires_at) AS lease
    FROM {schema}.jobs j WHERE j.state = 'running' GROUP BY j.worker
)
SELECT coalesce(w.worker, h.worker), w.host, w.pid, w.queues, w.concurrency, w.started_at,
       w.heartbeat_at, w.expires_at,
       CASE WHEN w.worker IS NULL THEN 'unregistered'
            WHEN w.expires_at > now() THEN 'alive' ELSE 'gone' END,
       coalesce(h.jobs, 0), coalesce(h.kinds, '{{}}'), h.oldest, h.lease
FROM {schema}.workers w FULL JOIN held h ON h.worker = w.worker
ORDER BY 1;

-- name: web_workers_per_queue
-- Registered workers alive (a heartbeat within their lease) per queue they serve, for the
-- postroom_workers gauge: a row per worker (no locks).
SELECT q.queue, count(*)::bigint
FROM {schema}.workers w CROSS JOIN LATERAL unnest(w.queues) AS q(queue)
WHERE w.expires_at > now()
GROUP BY q.queue ORDER BY q.queue;

-- name: web_finished_since
-- Jobs finished after %(after)s (up to %(limit)s, oldest first) with queue, state, attempts and
-- run time, for the throughput and run-time series: reads only the newest block ranges through
-- the BRIN index on finished_at (no locks).
SELECT queue, state, attempts, finished_at,
       extract(epoch FROM finished_at - coalesce(started_at, finished_at))::float8
FROM {schema}.finished_jobs
WHERE finished_at > %(after)s
ORDER BY finished_at
LIMIT %(limit)s;

-- name: web_group_consumed
-- Per group, the sum of its cursors (messages consumed, or relayed for relay.* groups, since it
-- began): the sampler's differences give messages/s. One row per group and partition (no locks).
SELECT group_name, sum(next_offset)::bigint FROM {schema}.cursors GROUP BY group_name;

-- name: web_failed_count
-- Failed jobs per queue, from the partial index on the failed set (no locks).
SELECT queue, count(*)::bigint FROM {schema}.jobs WHERE state = 'failed' GROUP BY queue;

-- name: web_delete_job
-- Deletes one finished job, or one failed job no other job waits on (row lock on it); returns
-- the deleted id. The queue's public API has no single-job delete (purge works by age).
WITH gone_live AS (
    DELETE FROM {schema}.jobs j WHERE j.id = %(id)s AND j.state = 'failed'
      AND NOT EXISTS (SELECT 1 FROM {schema}.job_dependencies d WHERE d.parent_id = j.id)
    RETURNING j.id
), gone_finished AS (
    DELETE FROM {schema}.finished_jobs f WHERE f.id = %(id)s RETURNING f.id
)
SELECT id FROM gone_live UNION ALL SELECT id FROM gone_finished;

-- name: web_listen
-- Subscribes the live view's connection to publish, job and group wake-ups (no locks).
LISTEN postroom; LISTEN postroom_jobs; LISTEN postroom_groups;

-- name: web_clock
-- The database's clock (no locks).
SELECT now();

-- name: web_record_sample
-- Records one sample of the dashboard's time series in the ring of %(slots)s rows, unless
-- another sampler recorded one in the last %(interval)s; returns its time or NULL (the
-- function takes web_samples' SHARE ROW EXCLUSIVE lock: one writer at a time, readers go on).
SELECT {schema}.record_web_sample(%(points)s::jsonb, %(interval)s::interval, %(slots)s::integer);

-- name: web_samples_since
-- The recorded samples after %(after)s (NULL: all) of the last %(window)s, oldest first: the
-- charts' time series. The ring holds at most one row per slot, so this reads at most that
-- many rows (no locks).
SELECT sampled_at, points FROM {schema}.web_samples
WHERE sampled_at > greatest(%(after)s::timestamptz, now() - %(window)s::interval)
ORDER BY sampled_at;
