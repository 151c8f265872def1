-- postroom migration 0003: the log's rules held by the database itself (issue 10), because SQL is
-- a first-class way in.
--  * CHECKs for what the Python path checks: header shape and sizes, key and value sizes.
--  * Least privilege: producers and consumers write only through SECURITY DEFINER functions
--    (search_path pinned). The one table right left, INSERT on messages for the binary COPY, is
--    verified by a statement trigger: every row must lie in an offset range that its own
--    transaction reserved through reserve_offsets.
--  * Text and jsonb forms of publish and publish_batch, so SQL callers need no bytea cast.
-- `{schema}` is replaced by the quoted schema identifier; literal braces are doubled.

-- 1. CHECKs -----------------------------------------------------------------------------------

-- Whether headers have the shape and size the Python API allows: a JSON object of at most 64
-- non-empty names, names (in characters) and values (string values in UTF-8 bytes, b64-wrapped
-- values decoded) at most 64 KiB together. Other JSON values are allowed (SQL may write them; a
-- reader renders them as JSON text) and count as their JSON text. STRICT: NULL is no headers.
CREATE FUNCTION {schema}._headers_valid(headers jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT CASE WHEN jsonb_typeof(headers) <> 'object' THEN false ELSE (
        SELECT count(*) <= 64
               AND coalesce(bool_and(e.name <> ''), true)
               AND coalesce(sum(char_length(e.name) + CASE
                       WHEN jsonb_typeof(e.value) = 'string' THEN octet_length(e.value #>> '{{}}')
                       WHEN jsonb_typeof(e.value) = 'object' AND e.value ? 'b64'
                            AND jsonb_typeof(e.value -> 'b64') = 'string'
                       THEN octet_length(e.value ->> 'b64') * 3 / 4
                            - (octet_length(e.value ->> 'b64')
                               - octet_length(rtrim(e.value ->> 'b64', '=')))
                       ELSE octet_length(e.value::text) END), 0) <= 65536
        FROM jsonb_each(headers) AS e(name, value)
    ) END;
$$;

-- NOT VALID: rows stored before this migration are not re-checked (a consumer delivers such a
-- row with its headers flagged instead of failing on it); every row written from now on is.
-- The headers check has a fast path: an object of at most 512 bytes (jsonb, as stored) with no
-- empty name cannot break a limit (each name costs at least 9 bytes, so it has fewer than 64),
-- and only larger headers are walked by _headers_valid (several microseconds a row).
ALTER TABLE {schema}.messages
    ADD CONSTRAINT messages_key_size CHECK (octet_length(key) <= 4096) NOT VALID,
    ADD CONSTRAINT messages_value_size CHECK (octet_length(value) <= 1048576) NOT VALID,
    ADD CONSTRAINT messages_headers_shape CHECK (
        headers IS NULL
        OR (jsonb_typeof(headers) = 'object' AND NOT headers ? ''
            AND (pg_column_size(headers) <= 512 OR {schema}._headers_valid(headers)))
    ) NOT VALID;

-- 2. Reserved offsets -----------------------------------------------------------------------

-- The open reservation on a counter row: the transaction that last reserved offsets on it and
-- the first offset it reserved (the range ends at next_offset). Set by the row trigger below
-- whenever next_offset moves forward, whoever moves it (reserve_offsets, publish_batch, or the
-- write path of a postroom version older than this migration, run by the schema owner during a
-- rolling upgrade); the messages trigger reads them.
ALTER TABLE {schema}.partitions
    ADD COLUMN reserved_by xid8,
    ADD COLUMN reserved_from bigint;

CREATE FUNCTION {schema}._note_reservation() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NEW.next_offset > OLD.next_offset THEN
        -- A second reservation in the same transaction extends the first.
        IF OLD.reserved_by IS DISTINCT FROM pg_current_xact_id() THEN
            NEW.reserved_from := OLD.next_offset;
        END IF;
        NEW.reserved_by := pg_current_xact_id();
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER partitions_note_reservation
BEFORE UPDATE OF next_offset ON {schema}.partitions
FOR EACH ROW EXECUTE FUNCTION {schema}._note_reservation();

-- Reserves counts[i] offsets on each (topic_ids[i], partitions[i]) counter row for the calling
-- transaction and returns the first of each range; the caller then writes the messages at those
-- offsets (COPY or INSERT) in the same transaction. Counter rows are locked FOR UPDATE in
-- ascending (topic_id, partition) order, so concurrent writers cannot deadlock; the locks last
-- until the transaction ends, which orders writers by commit. A partition missing from the
-- result does not exist (its topic was deleted). Sends the consumers' wake-up hint at commit.
CREATE FUNCTION {schema}.reserve_offsets(topic_ids integer[], partitions integer[],
                                         counts bigint[])
RETURNS TABLE (topic_id integer, partition integer, first_offset bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
BEGIN
    IF topic_ids IS NULL OR partitions IS NULL OR counts IS NULL
       OR cardinality(topic_ids) <> cardinality(partitions)
       OR cardinality(topic_ids) <> cardinality(counts)
       OR EXISTS (SELECT FROM unnest(counts) AS c(n) WHERE n IS NULL OR n < 1 OR n > 10000000)
    THEN
        RAISE EXCEPTION 'reserve_offsets: topic_ids, partitions and counts must be arrays of '
                        'one length, each count from 1 to 10000000'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM pg_notify('postroom', d.id::text)
    FROM (SELECT DISTINCT t AS id FROM unnest(topic_ids) AS t) AS d;
    RETURN QUERY
    WITH wanted AS (
        SELECT a.topic_id, a.partition, a.n
        FROM unnest(topic_ids, partitions, counts) AS a(topic_id, partition, n)
    ), locked AS (
        SELECT p.topic_id, p.partition
        FROM {schema}.partitions p
        JOIN wanted w ON w.topic_id = p.topic_id AND w.partition = p.partition
        ORDER BY p.topic_id, p.partition
        FOR UPDATE OF p
    ), reserved AS (
        UPDATE {schema}.partitions p
        SET next_offset = p.next_offset + w.n  -- partitions_note_reservation records it
        FROM locked l, wanted w
        WHERE p.topic_id = l.topic_id AND p.partition = l.partition
          AND w.topic_id = l.topic_id AND w.partition = l.partition
        RETURNING p.topic_id, p.partition, p.next_offset - w.n AS first_offset
    )
    SELECT r.topic_id, r.partition, r.first_offset FROM reserved r
    ORDER BY r.topic_id, r.partition;
END;
$$;

-- Statement trigger on messages: every row just written must lie inside the offset range its
-- own transaction reserved on that partition (reserve_offsets, publish_batch). One grouped
-- pass over the statement's rows, whatever its size. Nobody can plant a message at an offset
-- of their choosing, nor write past the counter (which would block later writers).
CREATE FUNCTION {schema}._check_reserved_offsets() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    bad record;
BEGIN
    SELECT n.topic_id, n.partition, n.lo, n.hi INTO bad
    FROM (SELECT w.topic_id, w.partition, min(w."offset") AS lo, max(w."offset") AS hi
          FROM written w GROUP BY w.topic_id, w.partition) AS n
    LEFT JOIN {schema}.partitions p ON p.topic_id = n.topic_id AND p.partition = n.partition
    WHERE p.reserved_by IS DISTINCT FROM pg_current_xact_id()
       OR n.lo < p.reserved_from OR n.hi >= p.next_offset
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'offsets %..% of topic id % partition % were not reserved by this '
                        'transaction: write messages with publish() or reserve_offsets()',
                        bad.lo, bad.hi, bad.topic_id, bad.partition
            USING ERRCODE = 'check_violation', CONSTRAINT = 'messages_offsets_reserved';
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER messages_offsets_reserved
AFTER INSERT ON {schema}.messages
REFERENCING NEW TABLE AS written
FOR EACH STATEMENT EXECUTE FUNCTION {schema}._check_reserved_offsets();

-- 3. Publishing through SQL -----------------------------------------------------------------

-- SQL API: publish a batch in the caller's transaction. Keyed values go to Kafka's partition for
-- the key; unkeyed ones share one partition per call (sticky, picked at random). Counter rows are
-- locked in ascending partition order, so concurrent batches never deadlock. Returns one
-- (partition, offset) row per value, in input order. Runs as the schema owner (EXECUTE is what
-- a producer is granted); sizes and header shape are checked by the messages CHECKs.
CREATE OR REPLACE FUNCTION {schema}.publish_batch(topic text, "values" bytea[],
                                                  keys bytea[] DEFAULT NULL,
                                                  headers jsonb[] DEFAULT NULL)
RETURNS TABLE (partition integer, "offset" bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    t record;
    sticky integer;
    parts integer[];
    firsts bigint[];
    first_offset bigint;
    p integer;
    n integer;
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
    firsts := array_fill(NULL::bigint, ARRAY[t.count]);
    FOR p IN SELECT DISTINCT x FROM unnest(parts) AS x ORDER BY 1 LOOP
        n := cardinality(array_positions(parts, p));
        UPDATE {schema}.partitions c
        SET next_offset = c.next_offset + n  -- partitions_note_reservation records it
        WHERE c.topic_id = t.id AND c.partition = p
        RETURNING c.next_offset - n INTO first_offset;
        firsts[p + 1] := first_offset;
        INSERT INTO {schema}.messages (topic_id, partition, "offset", key, value, headers)
        SELECT t.id, p, first_offset + row_number() OVER (ORDER BY b.ord) - 1,
               b.key, b.value, b.headers
        FROM unnest("values", keys, headers, parts) WITH ORDINALITY AS b(value, key, headers, part, ord)
        WHERE b.part = p;
    END LOOP;
    PERFORM pg_notify('postroom', t.id::text);
    RETURN QUERY
    SELECT b.part, firsts[b.part + 1] + row_number() OVER (PARTITION BY b.part ORDER BY b.ord) - 1
    FROM unnest(parts) WITH ORDINALITY AS b(part, ord)
    ORDER BY b.ord;
END;
$$;

-- The bytea form of publish runs as its caller (SQL, so it can inline); publish_batch, which
-- it calls, checks the caller's EXECUTE right and runs as the owner.

-- SQL API: the text forms. A value or key is stored as its UTF-8 bytes, so
-- `SELECT * FROM postroom.publish('orders', '{{"id": 1}}')` stores exactly that JSON text. An
-- untyped literal picks these forms (PostgreSQL prefers text for unknown-typed arguments).
CREATE FUNCTION {schema}.publish_batch(topic text, "values" text[], keys text[] DEFAULT NULL,
                                       headers jsonb[] DEFAULT NULL)
RETURNS TABLE (partition integer, "offset" bigint)
LANGUAGE sql AS $$
    SELECT * FROM {schema}.publish_batch(
        topic,
        (SELECT array_agg(convert_to(v, 'UTF8') ORDER BY o)
         FROM unnest("values") WITH ORDINALITY AS x(v, o)),
        (SELECT array_agg(convert_to(k, 'UTF8') ORDER BY o)
         FROM unnest(keys) WITH ORDINALITY AS y(k, o)),
        headers);
$$;

CREATE FUNCTION {schema}.publish(topic text, value text, key text DEFAULT NULL,
                                 headers jsonb DEFAULT NULL)
RETURNS TABLE (partition integer, "offset" bigint)
LANGUAGE sql AS $$
    SELECT * FROM {schema}.publish_batch(topic, ARRAY[convert_to(value, 'UTF8')],
                                         ARRAY[convert_to(key, 'UTF8')], ARRAY[headers]);
$$;

-- SQL API: the jsonb forms. The value is stored as the JSON text of the jsonb value (UTF-8).
CREATE FUNCTION {schema}.publish_batch(topic text, "values" jsonb[], keys text[] DEFAULT NULL,
                                       headers jsonb[] DEFAULT NULL)
RETURNS TABLE (partition integer, "offset" bigint)
LANGUAGE sql AS $$
    SELECT * FROM {schema}.publish_batch(
        topic,
        (SELECT array_agg(convert_to(v::text, 'UTF8') ORDER BY o)
         FROM unnest("values") WITH ORDINALITY AS x(v, o)),
        (SELECT array_agg(convert_to(k, 'UTF8') ORDER BY o)
         FROM unnest(keys) WITH ORDINALITY AS y(k, o)),
        headers);
$$;

CREATE FUNCTION {schema}.publish(topic text, value jsonb, key text DEFAULT NULL,
                                 headers jsonb DEFAULT NULL)
RETURNS TABLE (partition integer, "offset" bigint)
LANGUAGE sql AS $$
    SELECT * FROM {schema}.publish_batch(topic, ARRAY[convert_to(value::text, 'UTF8')],
                                         ARRAY[convert_to(key, 'UTF8')], ARRAY[headers]);
$$;

-- 4. Consumer cursors -------------------------------------------------------------------------

-- Creates a group's missing cursors at the earliest retained (reset 'earliest') or the latest
-- offset. Existing cursors are filtered out first: a unique-index check on a cursor that another
-- member's open transaction is advancing would otherwise wait for that transaction.
CREATE FUNCTION {schema}.ensure_cursors(group_name text, topic_ids integer[],
                                        partitions integer[], reset text)
RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    INSERT INTO {schema}.cursors (group_name, topic_id, partition, next_offset)
    SELECT ensure_cursors.group_name, p.topic_id, p.partition,
           CASE WHEN reset = 'latest' THEN p.next_offset
                ELSE coalesce((SELECT min(m."offset") FROM {schema}.messages m
                               WHERE m.topic_id = p.topic_id AND m.partition = p.partition),
                              p.next_offset)
           END
    FROM unnest(topic_ids, partitions) AS a(topic_id, partition)
    JOIN {schema}.partitions p ON p.topic_id = a.topic_id AND p.partition = a.partition
    WHERE NOT EXISTS (
        SELECT FROM {schema}.cursors c
        WHERE c.group_name = ensure_cursors.group_name
          AND c.topic_id = p.topic_id AND c.partition = p.partition
    )
    ORDER BY p.topic_id, p.partition
    ON CONFLICT DO NOTHING;
$$;

-- Moves a group's cursors forward to the given next offsets (never backward); returns how many
-- cursors it updated. Locks the cursor rows in (topic_id, partition) order first, so concurrent
-- commits cannot deadlock. Moving a cursor back is an administrator's reset (reset_cursors).
CREATE FUNCTION {schema}.commit_cursors(group_name text, topic_ids integer[],
                                        partitions integer[], offsets bigint[])
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    updated integer;
BEGIN
    WITH target AS (
        SELECT c.topic_id, c.partition, a.next_offset
        FROM unnest(topic_ids, partitions, offsets) AS a(topic_id, partition, next_offset)
        JOIN {schema}.cursors c
          ON c.group_name = commit_cursors.group_name
         AND c.topic_id = a.topic_id AND c.partition = a.partition
        ORDER BY c.topic_id, c.partition
        FOR UPDATE OF c
    )
    UPDATE {schema}.cursors c
    SET next_offset = greatest(c.next_offset, t.next_offset), updated_at = now()
    FROM target t
    WHERE c.group_name = commit_cursors.group_name
      AND c.topic_id = t.topic_id AND c.partition = t.partition;
    GET DIAGNOSTICS updated = ROW_COUNT;
    RETURN updated;
END;
$$;

-- Transactional consumption: locks the first cursor (in the given order) that has unread
-- messages and no other holder (FOR UPDATE SKIP LOCKED), reads up to max_messages messages from
-- it and advances the cursor past them. Lock and advance last until the caller's transaction
-- ends, so a rollback re-delivers the range and concurrent claimers take other partitions.
CREATE FUNCTION {schema}.claim_range(group_name text, topic_ids integer[], partitions integer[],
                                     max_messages integer)
RETURNS TABLE (topic_id integer, partition integer, "offset" bigint, key bytea, value bytea,
               headers jsonb, created_at timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH candidate AS (
        SELECT c.topic_id, c.partition, c.next_offset
        FROM unnest(topic_ids, partitions) WITH ORDINALITY AS a(topic_id, partition, ord)
        JOIN {schema}.cursors c
          ON c.group_name = claim_range.group_name
         AND c.topic_id = a.topic_id AND c.partition = a.partition
        JOIN {schema}.partitions p ON p.topic_id = c.topic_id AND p.partition = c.partition
        WHERE c.next_offset < p.next_offset
        ORDER BY a.ord
        LIMIT 1
        FOR UPDATE OF c SKIP LOCKED
    ), batch AS (
        SELECT c.topic_id, c.partition, m."offset", m.key, m.value, m.headers, m.created_at
        FROM candidate c
        CROSS JOIN LATERAL (
            SELECT m."offset", m.key, m.value, m.headers, m.created_at
            FROM {schema}.messages m
            WHERE m.topic_id = c.topic_id AND m.partition = c.partition
              AND m."offset" >= c.next_offset
            ORDER BY m."offset"
            LIMIT max_messages
        ) m
    ), advanced AS (
        UPDATE {schema}.cursors c SET next_offset = b.last + 1, updated_at = now()
        FROM (SELECT b.topic_id, b.partition, max(b."offset") AS last FROM batch b
              GROUP BY b.topic_id, b.partition) b
        WHERE c.group_name = claim_range.group_name
          AND c.topic_id = b.topic_id AND c.partition = b.partition
    )
    SELECT b.topic_id, b.partition, b."offset", b.key, b.value, b.headers, b.created_at
    FROM batch b
    ORDER BY b."offset";
END;
$$;

-- 5. Rights -----------------------------------------------------------------------------------

-- Functions are executable by PUBLIC by default; the ones that run as the owner are granted to
-- the producer and consumer roles only (grants.sql).
REVOKE EXECUTE ON FUNCTION
    {schema}.reserve_offsets(integer[], integer[], bigint[]),
    {schema}.publish_batch(text, bytea[], bytea[], jsonb[]),
    {schema}.publish_batch(text, text[], text[], jsonb[]),
    {schema}.publish_batch(text, jsonb[], text[], jsonb[]),
    {schema}.publish(text, bytea, bytea, jsonb),
    {schema}.publish(text, text, text, jsonb),
    {schema}.publish(text, jsonb, text, jsonb),
    {schema}.ensure_cursors(text, integer[], integer[], text),
    {schema}.commit_cursors(text, integer[], integer[], bigint[]),
    {schema}.claim_range(text, integer[], integer[], integer),
    {schema}._check_reserved_offsets(),
    {schema}._note_reservation()
FROM PUBLIC;

-- Roles granted "producer" or "consumer" before this migration had table rights that let them
-- rewrite counters and cursors. Their column-level grants identify them (an admin's rights are
-- table-wide): take those rights back and grant the functions instead.
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT DISTINCT rol.rolname
        FROM pg_attribute a, aclexplode(a.attacl) x, pg_roles rol
        WHERE a.attrelid = '{schema}.partitions'::regclass AND a.attname = 'next_offset'
          AND x.privilege_type = 'UPDATE' AND rol.oid = x.grantee
    LOOP
        EXECUTE format('REVOKE UPDATE (next_offset) ON %s FROM %I',
                       '{schema}.partitions'::regclass, r.rolname);
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s, %s, %s, %s, %s, %s, %s TO %I',
                       '{schema}.reserve_offsets(integer[], integer[], bigint[])'::regprocedure,
                       '{schema}.publish_batch(text, bytea[], bytea[], jsonb[])'::regprocedure,
                       '{schema}.publish_batch(text, text[], text[], jsonb[])'::regprocedure,
                       '{schema}.publish_batch(text, jsonb[], text[], jsonb[])'::regprocedure,
                       '{schema}.publish(text, bytea, bytea, jsonb)'::regprocedure,
                       '{schema}.publish(text, text, text, jsonb)'::regprocedure,
                       '{schema}.publish(text, jsonb, text, jsonb)'::regprocedure,
                       r.rolname);
    END LOOP;
    FOR r IN
        SELECT DISTINCT rol.rolname
        FROM pg_attribute a, aclexplode(a.attacl) x, pg_roles rol
        WHERE a.attrelid = '{schema}.cursors'::regclass AND a.attname = 'next_offset'
          AND x.privilege_type = 'UPDATE' AND rol.oid = x.grantee
    LOOP
        EXECUTE format('REVOKE UPDATE (next_offset, updated_at) ON %s FROM %I',
                       '{schema}.cursors'::regclass, r.rolname);
        IF NOT has_table_privilege(r.rolname, '{schema}.cursors'::regclass, 'UPDATE') THEN
            EXECUTE format('REVOKE INSERT ON %s FROM %I', '{schema}.cursors'::regclass, r.rolname);
        END IF;
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s, %s, %s TO %I',
                       '{schema}.ensure_cursors(text, integer[], integer[], text)'::regprocedure,
                       '{schema}.commit_cursors(text, integer[], integer[], bigint[])'::regprocedure,
                       '{schema}.claim_range(text, integer[], integer[], integer)'::regprocedure,
                       r.rolname);
    END LOOP;
    -- Admins (table-wide rights on the counter rows) write through the functions too now.
    FOR r IN
        SELECT DISTINCT rol.rolname
        FROM pg_class c, aclexplode(c.relacl) x, pg_roles rol
        WHERE c.oid = '{schema}.partitions'::regclass AND x.privilege_type = 'UPDATE'
          AND rol.oid = x.grantee AND x.grantee <> c.relowner
    LOOP
        EXECUTE format('GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA %s TO %I',
                       (SELECT relnamespace::regnamespace FROM pg_class
                        WHERE oid = '{schema}.partitions'::regclass), r.rolname);
    END LOOP;
END;
$$;
