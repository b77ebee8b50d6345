"""Warren's data pipeline on Apache Spark: the `amqp` data source and the pipeline jobs.

This package talks to a broker only over AMQP, with its own small client (`wire`) on Warren's
protocol codec, never through the broker's internals, so everything here works against
RabbitMQ as well.
"""

from warren.spark.session import JavaMissingError, build_session, require_java
from warren.spark.source import AmqpDataSource

__all__ = ["AmqpDataSource", "JavaMissingError", "build_session", "require_java"]
