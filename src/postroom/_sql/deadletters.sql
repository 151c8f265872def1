-- Dead letters (migration 0021): one per (group, message) however many processes handle it.

-- name: claim_dead_letter
-- True if %(group)s may write the dead letter of %(message_id)s now (none claimed in the last
-- day); in the transaction that publishes it. Locks the claim row until that transaction ends.
SELECT {schema}.claim_dead_letter(%(group)s, %(message_id)s);

-- name: grant_consumer_0021
-- The consumer capability's functions of migration 0021: dead-letter claims and the SQL
-- consumer's forms (consume_topic, consume_text, consume_json).
GRANT EXECUTE ON FUNCTION
    {schema}.claim_dead_letter(text, text),
    {schema}.consume_topic(text, text, integer, integer),
    {schema}.consume_text(text, text, integer, integer),
    {schema}.consume_json(text, text, integer, integer)
TO {role};
