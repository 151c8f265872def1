-- postroom migration 0017: a publish in the caller's transaction takes its offsets when that
-- transaction commits, so writers never deadlock on the counter rows (issue 22, item 1).
-- `{schema}` is replaced by the quoted schema identifier; literal braces are doubled.
--
-- Before, each publish in a caller's transaction (the SQL publish/publish_batch functions,
-- the Python API with conn=) locked its partition's counter row until the commit; two
-- transactions writing two partitions in opposite order deadlocked. Now such a publish only
-- stages its messages (below) and a deferred constraint trigger writes them at COMMIT: it locks
-- every counter row the transaction writes in one reserve_offsets statement, in ascending
-- (topic_id, partition) order, so counter locks are held only while committing, always taken in
-- one order: no cycle, whatever the number and order of publishes. Offsets stay gapless and in
-- commit order (the lock is still held to the commit), and within a partition they follow call
-- order. The partition is chosen at publish time (murmur2 for keys, sticky for unkeyed), so a
-- publish returns it; its offset is only known at commit and is returned as NULL.
-- reserve_offsets + COPY (the Python API's own short transactions and its batching producer)
-- is unchanged and still returns offsets.

-- Messages published in a transaction not yet committed: rows live only within their
-- transaction (the commit trigger moves them to messages and deletes them; a rollback takes them
-- away), so UNLOGGED loses nothing committed when a crash truncates it, and writes no WAL.
-- Each row is a dead tuple once its transaction ends: the retention runner VACUUMs this table
-- every round (src/postroom/_retention_async.py), since autovacuum may be off or slow. The
-- index finds one transaction's rows (xact) in call order (seq, from 1 in each transaction, and
-- from 1 again after a flush by SET CONSTRAINTS ... IMMEDIATE); not unique, nothing to check.
-- The CHECKs are the messages table's (same names), so a bad row is refused at publish time.
CREATE UNLOGGED TABLE {schema}.staged_messages (
    xact        xid8 NOT NULL,
    seq         integer NOT NULL,
    topic_id    integer NOT NULL,
    partition   integer NOT NULL,
    key         bytea,
    value       bytea NOT NULL,
    headers     jsonb,
    CONSTRAINT messages_key_size CHECK (octet_length(key) <= 4096),
    CONSTRAINT messages_value_size CHECK (octet_length(value) <= 1048576),
    CONSTRAINT messages_headers_shape CHECK (
        headers IS NULL
        OR (jsonb_typeof(headers) = 'object' AND NOT headers ? ''
            AND (pg_column_size(headers) <= 512 OR {schema}._headers_valid(headers))))
);
CREATE INDEX staged_messages_xact_idx ON {schema}.staged_messages (xact, seq);

-- Stages messages in the current transaction: message i goes to partition partitions[i] of
-- topic topic_ids[i] (keys, headers: NULL or shorter arrays mean NULL for the rest). Refuses at
-- once what its commit would refuse: a partition that does not exist (SQLSTATE no_data_found:
-- the topic was deleted) and, without locking, a full backlog (max_lag, SQLSTATE PRB01, the
-- check of _admit_write on the counter row as it is now; the commit checks again, exactly).
-- The first message staged in a transaction (seq 1) queues the one deferred trigger event that
-- writes them all at commit. Reads partitions, topics and cursors (no locks); inserts into
-- staged_messages.
CREATE FUNCTION {schema}.stage_messages(topic_ids integer[], partitions integer[], keys bytea[],
                                        "values" bytea[], headers jsonb[])
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    me xid8 := pg_current_xact_id();
    last integer;
    refused record;
BEGIN
    IF "values" IS NULL OR cardinality("values") = 0
       OR array_position("values", NULL) IS NOT NULL
       OR cardinality(topic_ids) IS DISTINCT FROM cardinality("values")
       OR cardinality(partitions) IS DISTINCT FROM cardinality("values")
       OR array_position(topic_ids, NULL) IS NOT NULL
       OR array_position(partitions, NULL) IS NOT NULL
       OR coalesce(cardinality(keys), 0) > cardinality("values")
       OR coalesce(cardinality(headers), 0) > cardinality("values") THEN
        RAISE EXCEPTION 'stage_messages: values must be a non-empty array without nulls, '
                        'topic_ids and partitions arrays of its length without nulls, '
                        'keys/headers no longer than values'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT w.topic_id, w.partition, p.topic_id IS NULL AS missing, t.name, p.max_lag,
           p.next_offset - slow.next_offset AS behind, slow.group_name
    INTO refused
    FROM (SELECT DISTINCT a.topic_id, a.partition
          FROM unnest(topic_ids, partitions) AS a(topic_id, partition)) w
    LEFT JOIN {schema}.partitions p ON p.topic_id = w.topic_id AND p.partition = w.partition
    LEFT JOIN {schema}.topics t ON t.id = p.topic_id AND p.max_lag IS NOT NULL
    LEFT JOIN LATERAL (
        SELECT c.group_name, c.next_offset
        FROM {schema}.cursors c
        WHERE p.max_lag IS NOT NULL
          AND c.topic_id = p.topic_id AND c.partition = p.partition
          AND c.next_offset <= p.next_offset - p.max_lag
          AND {schema}._group_active(c.group_name, c.updated_at,
                                     coalesce(t.group_ttl, interval '7 days'))
        ORDER BY c.next_offset
        LIMIT 1
    ) slow ON true
    WHERE p.topic_id IS NULL OR slow.group_name IS NOT NULL
    LIMIT 1;
    IF FOUND THEN
        IF refused.missing THEN
            RAISE EXCEPTION 'unknown topic id % partition %', refused.topic_id, refused.partition
                USING ERRCODE = 'no_data_found';
        END IF;
        RAISE EXCEPTION 'backlog full on topic % partition %: group % is % messages behind '
                        '(max_lag %)', quote_literal(refused.name), refused.partition,
                        quote_literal(refused.group_name), refused.behind, refused.max_lag
            USING ERRCODE = 'PRB01';
    END IF;
    SELECT max(s.seq) INTO last FROM {schema}.staged_messages s WHERE s.xact = me;
    INSERT INTO {schema}.staged_messages (xact, seq, topic_id, partition, key, value, headers)
    SELECT me, coalesce(last, 0) + b.ord::integer, b.topic_id, b.partition, b.key, b.value,
           b.headers
    FROM unnest(topic_ids, partitions, keys, "values", headers)
         WITH ORDINALITY AS b(topic_id, partition, key, value, headers, ord);
END;
$$;

-- Writes the transaction's staged messages to the log, at commit (the deferred trigger below):
-- one reserve_offsets call locks the counter rows of every partition they go to, in ascending
-- (topic_id, partition) order, reserves a range on each (the admission trigger checks max_lag
-- then, under the lock; the consumers' wake-up is sent), and one INSERT writes them at those
-- offsets in call order; the staged rows are then deleted. The counter locks are held until the
-- commit ends, which orders writers by commit as before. A partition whose counter row is gone
-- (its topic deleted meanwhile) fails the commit. Fired once per transaction (the first staged
-- row); again after SET CONSTRAINTS ... IMMEDIATE fired it early and more rows were staged.
CREATE FUNCTION {schema}._publish_staged() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    me xid8 := pg_current_xact_id();
    wanted record;
    written bigint;
BEGIN
    SELECT array_agg(s.topic_id ORDER BY s.topic_id, s.partition) AS topic_ids,
           array_agg(s.partition ORDER BY s.topic_id, s.partition) AS partitions,
           array_agg(s.n ORDER BY s.topic_id, s.partition) AS counts,
           sum(s.n) AS total
    INTO wanted
    FROM (SELECT m.topic_id, m.partition, count(*) AS n
          FROM {schema}.staged_messages m WHERE m.xact = me
          GROUP BY m.topic_id, m.partition) s;
    IF wanted.total IS NULL THEN
        RETURN NULL;
    END IF;
    INSERT INTO {schema}.messages (topic_id, partition, "offset", key, value, headers)
    SELECT s.topic_id, s.partition,
           r.first_offset + row_number() OVER (PARTITION BY s.topic_id, s.partition
                                               ORDER BY s.seq) - 1,
           s.key, s.value, s.headers
    FROM {schema}.reserve_offsets(wanted.topic_ids, wanted.partitions, wanted.counts) r
    JOIN {schema}.staged_messages s
      ON s.xact = me AND s.topic_id = r.topic_id AND s.partition = r.partition;
    GET DIAGNOSTICS written = ROW_COUNT;
    IF written < wanted.total THEN
        RAISE EXCEPTION 'a topic was deleted while this transaction published to it: its '
                        'messages cannot be written'
            USING ERRCODE = 'no_data_found';
    END IF;
    DELETE FROM {schema}.staged_messages m WHERE m.xact = me;
    RETURN NULL;
END;
$$;

-- One event per transaction (WHEN seq = 1), fired at commit. ENABLE ALWAYS: it fires under
-- session_replication_role = replica too, else the staged messages would be lost.
CREATE CONSTRAINT TRIGGER staged_messages_publish
AFTER INSERT ON {schema}.staged_messages
DEFERRABLE INITIALLY DEFERRED
FOR EACH ROW WHEN (NEW.seq = 1)
EXECUTE FUNCTION {schema}._publish_staged();
ALTER TABLE {schema}.staged_messages ENABLE ALWAYS TRIGGER staged_messages_publish;

-- The SQL publish API stages too (publish and the text/jsonb forms of publish_batch call this
-- one): the same checks and partition choice as before; each message's partition is returned,
-- its offset is NULL (assigned at commit).
CREATE OR REPLACE FUNCTION {schema}.publish_batch(topic text, "values" bytea[],
                                                  keys bytea[] DEFAULT NULL,
                                                  headers jsonb[] DEFAULT NULL)
RETURNS TABLE(partition integer, "offset" bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    t record;
    sticky integer;
    parts integer[];
BEGIN
    SELECT id, topics.partitions AS count INTO t FROM {schema}.topics WHERE name = topic;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown topic %', quote_literal(topic) USING ERRCODE = 'no_data_found';
    END IF;
    IF "values" IS NULL OR cardinality("values") = 0
       OR array_position("values", NULL) IS NOT NULL
       OR coalesce(cardinality(keys), 0) > cardinality("values")
       OR coalesce(cardinality(headers), 0) > cardinality("values") THEN
        RAISE EXCEPTION 'publish_batch: values must be a non-empty array without nulls, '
                        'and keys/headers no longer than values'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    sticky := floor(random() * t.count)::integer;
    SELECT array_agg(CASE WHEN b.key IS NULL THEN sticky
                          ELSE {schema}.partition_for_key(b.key, t.count) END ORDER BY b.ord)
    INTO parts
    FROM unnest("values", keys) WITH ORDINALITY AS b(value, key, ord);
    PERFORM {schema}.stage_messages(array_fill(t.id, ARRAY[cardinality("values")]), parts,
                                    keys, "values", headers);
    RETURN QUERY
    SELECT b.part, NULL::bigint FROM unnest(parts) WITH ORDINALITY AS b(part, ord)
    ORDER BY b.ord;
END;
$$;

REVOKE EXECUTE ON FUNCTION
    {schema}.stage_messages(integer[], integer[], bytea[], bytea[], jsonb[]),
    {schema}._publish_staged()
FROM PUBLIC;

-- Existing roles: admins (table-wide UPDATE on the counter rows) get the new table and
-- function, as grant_admin gives them all; producers (EXECUTE on reserve_offsets) get
-- stage_messages, as grant_producer now does.
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT DISTINCT rol.rolname
        FROM pg_class c, aclexplode(c.relacl) x, pg_roles rol
        WHERE c.oid = '{schema}.partitions'::regclass AND x.privilege_type = 'UPDATE'
          AND rol.oid = x.grantee AND x.grantee <> c.relowner
    LOOP
        EXECUTE format('GRANT ALL ON TABLE %s TO %I',
                       '{schema}.staged_messages'::regclass, r.rolname);
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s, %s TO %I',
                       '{schema}.stage_messages(integer[], integer[], bytea[], bytea[], jsonb[])'
                           ::regprocedure,
                       '{schema}._publish_staged()'::regprocedure, r.rolname);
    END LOOP;
    FOR r IN
        SELECT DISTINCT rol.rolname
        FROM pg_proc f, aclexplode(f.proacl) x, pg_roles rol
        WHERE f.oid = '{schema}.reserve_offsets(integer[], integer[], bigint[])'::regprocedure
          AND x.privilege_type = 'EXECUTE' AND rol.oid = x.grantee AND x.grantee <> f.proowner
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I',
                       '{schema}.stage_messages(integer[], integer[], bytea[], bytea[], jsonb[])'
                           ::regprocedure, r.rolname);
    END LOOP;
END;
$$;
