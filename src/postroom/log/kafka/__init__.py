"""The log on Apache Kafka: the same producer, consumer and admin surface as the PostgreSQL
engine, built on confluent-kafka (librdkafka). docs/kafka.md says what maps and what does not.

``settings`` parses ``kafka://`` URLs, ``failures`` turns librdkafka errors into
``postroom.errors``, ``messages`` converts records (all sans-IO); ``admin_async``,
``producer_async``, ``consumer_async`` and ``engine_async`` do the I/O (sync twins generated).
"""
