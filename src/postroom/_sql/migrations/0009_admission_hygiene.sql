-- postroom migration 0009: admission control (a topic's max_lag) and group hygiene (group_ttl,
-- a group's last activity, one notion of an active group for retention, list_groups and
-- admission). docs/log.md, "Admission control" and "Group hygiene".

ALTER TABLE {schema}.topics
    ADD COLUMN max_lag bigint CONSTRAINT topics_max_lag CHECK (max_lag > 0),
    ADD COLUMN group_ttl interval CONSTRAINT topics_group_ttl CHECK (group_ttl > interval '0');

-- A copy of the topic's max_lag on each counter row, so that the admission trigger's WHEN
-- condition reads only the row being updated: with no max_lag the write path calls nothing more.
ALTER TABLE {schema}.partitions ADD COLUMN max_lag bigint;

-- When a group last had a member: each member's end (a clean leave, or an expired session when
-- the next rebalance drops it) is noted here. Together with the members rows (live, or expired
-- and not yet dropped) and the cursors' updated_at (last commit), this is a group's last
-- activity. A table of its own, not a column of groups: noting an end must not wait for the
-- group row, which a rebalance holds (FOR NO KEY UPDATE) while it drops members.
CREATE TABLE {schema}.group_activity (
    group_name  text PRIMARY KEY,
    active_at   timestamptz NOT NULL
);

-- The cursors of one partition: the slowest active group (admission) and retention's floor.
CREATE INDEX cursors_partition_idx ON {schema}.cursors (topic_id, partition, next_offset);

-- Whether a group is active on a topic with the given ttl: a live member, or a member, a commit
-- (p_committed, the cursor's updated_at) or a members' end within the ttl. Expired groups no
-- longer hold back retention nor admission. No locks.
CREATE FUNCTION {schema}._group_active(p_group text, p_committed timestamptz, p_ttl interval)
RETURNS boolean
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
RETURN p_committed > now() - p_ttl
    OR EXISTS (SELECT FROM {schema}.members m
               WHERE m.group_name = p_group AND m.expires_at > now() - p_ttl)
    OR EXISTS (SELECT FROM {schema}.group_activity a
               WHERE a.group_name = p_group AND a.active_at > now() - p_ttl);

-- Records a member's end as the group's last activity. Row lock on the group's group_activity
-- row until the deleting transaction ends (a leave or a rebalance: short ones).
CREATE FUNCTION {schema}._note_member_end() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    INSERT INTO {schema}.group_activity AS a (group_name, active_at)
    VALUES (OLD.group_name, least(OLD.expires_at, now()))
    ON CONFLICT (group_name) DO UPDATE SET active_at = greatest(a.active_at, excluded.active_at);
    RETURN NULL;
END;
$$;

CREATE TRIGGER members_note_end
AFTER DELETE ON {schema}.members
FOR EACH ROW EXECUTE FUNCTION {schema}._note_member_end();

-- Admission control: a write to a partition of a topic with max_lag is refused (SQLSTATE PRB01,
-- BacklogFull in Python) while the slowest active group reading that partition is max_lag or
-- more messages behind. Runs only where max_lag is set (the trigger's WHEN); then one primary
-- key lookup of the topic and one index scan of the partition's cursors. The counter row is
-- locked already (the UPDATE that fires it), so the lag it reads is exact for this writer.
CREATE FUNCTION {schema}._admit_write() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    t record;
    slowest record;
BEGIN
    SELECT tp.name, coalesce(tp.group_ttl, interval '7 days') AS ttl INTO t
    FROM {schema}.topics tp WHERE tp.id = NEW.topic_id;
    SELECT c.group_name, c.next_offset INTO slowest
    FROM {schema}.cursors c
    WHERE c.topic_id = NEW.topic_id AND c.partition = NEW.partition
      AND c.next_offset <= OLD.next_offset - NEW.max_lag
      AND {schema}._group_active(c.group_name, c.updated_at, t.ttl)
    ORDER BY c.next_offset
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'backlog full on topic % partition %: group % is % messages behind '
                        '(max_lag %)', quote_literal(t.name), NEW.partition,
                        quote_literal(slowest.group_name), OLD.next_offset - slowest.next_offset,
                        NEW.max_lag
            USING ERRCODE = 'PRB01';
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER partitions_admission
BEFORE UPDATE OF next_offset ON {schema}.partitions
FOR EACH ROW WHEN (NEW.max_lag IS NOT NULL AND NEW.next_offset > OLD.next_offset)
EXECUTE FUNCTION {schema}._admit_write();
