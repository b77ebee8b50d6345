"""Warren's benchmark harness.

`bench.loadgen` is a raw-socket AMQP 0-9-1 load generator (one OS process per producer and
per consumer); `bench.run` runs the standard workloads W1..W7 against Warren and RabbitMQ and
reports medians, ratios, a JSONL log and a chart under `bench/results/`.
"""
