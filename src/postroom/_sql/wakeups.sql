-- The wake-up room (postroom/_wakeups.py): LISTEN statements of the client's one listener
-- connection, and the one statement that sends wake-ups from Python.

-- name: listen_postroom_jobs
-- Subscribes the client's listener to job wake-ups: enqueues, releases, cancels (no locks).
LISTEN postroom_jobs;

-- name: listen_postroom
-- Subscribes the client's listener to the log's wake-ups: a write to a topic (no locks).
LISTEN postroom;

-- name: listen_postroom_groups
-- Subscribes the client's listener to group changes: assignments, leaves (no locks).
LISTEN postroom_groups;

-- name: send_wakeups
-- Sends each payload on the channel; delivered when the transaction commits (no locks).
SELECT pg_notify(%(channel)s, p) FROM unnest(%(payloads)s::text[]) AS p;
