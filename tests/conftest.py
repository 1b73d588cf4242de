"""Shared test fixtures: Kafka brokers (Tansu, Apache Kafka), a moto S3 server, Spark."""

pytest_plugins = [
    "tests.fixtures.s3",
    "tests.fixtures.kafka",
    "tests.fixtures.apache_kafka",
    "tests.fixtures.spark",
    "tests.fixtures.prometheus",
]
