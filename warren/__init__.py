"""Warren: an AMQP 0-9-1 message broker with RabbitMQ's queue semantics."""

__version__ = "0.1.0"
