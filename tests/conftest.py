"""Shared test fixtures: Kafka brokers (Tansu, Apache Kafka, a three-node Apache Kafka
cluster), a moto S3 server, Spark (local, and a standalone cluster)."""

pytest_plugins = [
    "tests.fixtures.s3",
    "tests.fixtures.kafka",
    "tests.fixtures.apache_kafka",
    "tests.fixtures.apache_kafka_cluster",
    "tests.fixtures.spark",
    "tests.fixtures.spark_cluster",
    "tests.fixtures.prometheus",
]
