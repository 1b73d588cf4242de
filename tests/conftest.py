"""Shared test fixtures: a real Kafka-protocol broker (Tansu) and a moto S3 server."""

pytest_plugins = ["tests.fixtures.s3", "tests.fixtures.kafka", "tests.fixtures.apache_kafka"]
