"""Shared test fixtures: Kafka brokers (Tansu, Apache Kafka, a three-node Apache Kafka
cluster), a moto S3 server, Spark (local, and a standalone cluster)."""

from hypothesis import settings

# No per-example deadline: on a loaded 2-core CI machine a 200 ms deadline failed an
# example that takes 20 ms when quiet. A slow example is still bounded by the test's
# timeout (pytest-timeout), and speed is measured in bench/, not here.
settings.register_profile("rlmm", deadline=None)
settings.load_profile("rlmm")

pytest_plugins = [
    "tests.fixtures.s3",
    "tests.fixtures.kafka",
    "tests.fixtures.apache_kafka",
    "tests.fixtures.apache_kafka_cluster",
    "tests.fixtures.spark",
    "tests.fixtures.spark_cluster",
    "tests.fixtures.prometheus",
    "tests.fixtures.workers",  # before soak, which imports it
    "tests.fixtures.soak",
]
