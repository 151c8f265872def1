-- Consumer group membership: heartbeats, rebalances, leases and fenced commits. Each query calls
-- a SECURITY DEFINER function of migration 0004 (0018 for those taking the member's instance
-- token: a newer join with the same member id refuses an older instance, PRF02), where the locks
-- each one takes are described.

-- name: group_heartbeat
-- Registers or extends a member's session; whether a rebalance is due, and the next expiry.
SELECT rebalance, next_expiry FROM {schema}.group_heartbeat(
    %(group)s, %(member)s, %(topic_ids)s::integer[], %(session_ms)s, %(joining)s, %(instance)s::text);

-- name: group_lock
-- Locks the group row (FOR NO KEY UPDATE) until commit, drops expired members, lists live ones.
SELECT member_id, topic_ids FROM {schema}.group_lock(%(group)s);

-- name: group_holders
-- Every partition of the given topics with its live holder, for the assignment (no locks).
SELECT topic_id, partition, holder FROM {schema}.group_holders(%(group)s, %(topic_ids)s::integer[]);

-- name: group_assign
-- Writes the new targets and bumps the generation (under group_lock; waits for batches in flight).
SELECT {schema}.group_assign(%(group)s, %(members)s::text[], %(topic_ids)s::integer[],
                             %(partitions)s::integer[], %(targets)s::text[]);

-- name: group_acquire
-- Takes the free partitions targeted to the member (FOR UPDATE SKIP LOCKED); lists its leases.
SELECT topic_id, partition, epoch, state FROM {schema}.group_acquire(%(group)s, %(member)s,
                                                                         %(instance)s::text);

-- name: group_release
-- Hands partitions back at their epochs (row locks on those leases); wakes their targets.
SELECT {schema}.group_release(%(group)s, %(member)s, %(topic_ids)s::integer[],
                              %(partitions)s::integer[], %(epochs)s::bigint[], %(instance)s::text);

-- name: group_leave
-- Releases the member's leases at its epochs and deletes it (row locks on those rows).
SELECT {schema}.group_leave(%(group)s, %(member)s, %(topic_ids)s::integer[],
                            %(partitions)s::integer[], %(epochs)s::bigint[], %(instance)s::text);

-- name: commit_offsets
-- Fenced commit: checks the leases at their epochs (FOR SHARE), moves the cursors forward.
SELECT {schema}.commit_offsets(%(group)s, %(member)s, %(topic_ids)s::integer[],
                               %(partitions)s::integer[], %(epochs)s::bigint[],
                               %(offsets)s::bigint[], %(instance)s::text);

-- name: claim_batch
-- Transactional claim: cursor FOR UPDATE SKIP LOCKED, the member's leases FOR SHARE till commit.
SELECT topic_id, partition, "offset", key, value, headers, created_at
FROM {schema}.claim_batch(%(group)s, %(member)s, %(topic_ids)s::integer[],
                          %(partitions)s::integer[], %(epochs)s::bigint[], %(limit)s,
                          %(instance)s::text);

-- name: batch_idle_timeout
-- Ends this transaction's session if it idles past the member's session timeout (a paused
-- member must not hold its leases' FOR SHARE locks forever). Transaction-local setting; no locks.
SELECT set_config('idle_in_transaction_session_timeout', %(ms)s, true);

-- name: member_session
-- Session settings of a member's heartbeat connection: never wait long for a row lock.
SELECT set_config('lock_timeout', %(lock_ms)s, false);

-- name: partition_bounds
-- Low- and high-water marks of the given partitions, for a consumer without a group (no locks).
SELECT p.topic_id, p.partition,
       coalesce((SELECT min(m."offset") FROM {schema}.messages m
                 WHERE m.topic_id = p.topic_id AND m.partition = p.partition),
                p.next_offset) AS low_water,
       p.next_offset AS high_water
FROM unnest(%(topic_ids)s::integer[], %(partitions)s::integer[]) AS a(topic_id, partition)
JOIN {schema}.partitions p ON p.topic_id = a.topic_id AND p.partition = a.partition;
