-- The reservation check (migration 0020) and the commit-time offsets (migration 0017) together:
-- under SET CONSTRAINTS ALL IMMEDIATE the check fired when _publish_staged reserved the staged
-- messages' offsets, before the same statement wrote them, and refused the flush. The flush now
-- defers that one check to COMMIT, where it still runs for every reservation of the
-- transaction (a producer's own reserve_offsets included).

CREATE OR REPLACE FUNCTION {schema}._publish_staged() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
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
    -- Under SET CONSTRAINTS ALL IMMEDIATE the reservation check (migration 0020) would run as
    -- soon as reserve_offsets below returns, before the INSERT writes what it reserved: defer
    -- it to COMMIT (still checked then, for every reservation of the transaction).
    SET CONSTRAINTS {schema}.partitions_reservation_filled DEFERRED;
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

