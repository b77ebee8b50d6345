"""The standard benchmark set W1..W7: what each workload runs and which results it reports.

Owns the mapping from a workload name to `bench.loadgen` arguments (full and `--quick`
variants) and to the metrics shown in the table and chart. All bodies are 128 bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

THROUGHPUT = ("published_per_s", "consumed_per_s")
CONFIRMED = ("published_per_s", "confirmed_per_s", "consumed_per_s")
LATENCY = ("latency_p50_ms", "latency_p99_ms", "latency_p999_ms")
W6_ARGS = ("--consumers", "0", "--confirm", "1000", "--settle", "30")
RELIABLE = ("--durable", "--persistent", "--confirm", "1000", "--ack", "manual")


@dataclass(frozen=True)
class Metric:
    key: str
    label: str
    unit: str
    lower_is_better: bool = False


METRICS = {
    "published_per_s": Metric("published_per_s", "published", "msg/s"),
    "confirmed_per_s": Metric("confirmed_per_s", "confirmed", "msg/s"),
    "consumed_per_s": Metric("consumed_per_s", "consumed", "msg/s"),
    "latency_p50_ms": Metric("latency_p50_ms", "latency p50", "ms", lower_is_better=True),
    "latency_p99_ms": Metric("latency_p99_ms", "latency p99", "ms", lower_is_better=True),
    "latency_p999_ms": Metric("latency_p999_ms", "latency p99.9", "ms", lower_is_better=True),
    "rss_bytes_per_msg": Metric("rss_bytes_per_msg", "RSS per message", "B", lower_is_better=True),
    "vm_mem_bytes_per_msg": Metric(
        "vm_mem_bytes_per_msg", "Erlang VM memory per message", "B", lower_is_better=True
    ),
}


@dataclass(frozen=True)
class Workload:
    name: str
    title: str
    args: tuple[str, ...]
    metrics: tuple[str, ...]
    counted: bool = False  # runs for a message count (`--count`) instead of `--duration`

    def loadgen_args(self, duration: float, quick: bool) -> list[str]:
        args = ["--size", "128", *self.args]
        if self.counted:
            return [*args, "--count", "100000" if quick else "1000000"]
        warmup = 1.0 if quick else 2.0
        return [*args, "--duration", str(duration), "--warmup", str(warmup)]


STANDARD = (
    Workload("W1", "transient classic, 1 producer + 1 consumer, auto-ack", (), THROUGHPUT),
    Workload(
        "W2",
        "durable classic, persistent, confirms 1000, manual ack prefetch 1000",
        (*RELIABLE, "--prefetch", "1000"),
        CONFIRMED,
    ),
    Workload(
        "W3",
        "quorum, persistent, confirms 1000, manual ack prefetch 1000",
        ("--queue-type", "quorum", *RELIABLE, "--prefetch", "1000"),
        CONFIRMED,
    ),
    Workload(
        "W4",
        "transient classic, 4 producers + 4 consumers on 4 queues, auto-ack",
        ("--producers", "4", "--consumers", "4", "--queues", "4"),
        THROUGHPUT,
    ),
    Workload("W5", "end-to-end latency at a fixed 1,000 msg/s", ("--rate", "1000"), LATENCY),
    Workload(
        "W6",
        "broker RSS per queued message (no consumer, confirms 1000)",
        W6_ARGS,
        ("rss_bytes_per_msg", "vm_mem_bytes_per_msg", "published_per_s"),
        counted=True,
    ),
    Workload(
        "W6Q",
        "W6 for a quorum queue: leader RSS per queued persistent message",
        ("--queue-type", "quorum", "--persistent", *W6_ARGS),
        ("rss_bytes_per_msg", "published_per_s"),
        counted=True,
    ),
    Workload(
        "W7",
        "publish into x-max-length=1000 drop-head, no consumer",
        ("--consumers", "0", "--max-length", "1000", "--overflow", "drop-head"),
        ("published_per_s",),
    ),
)
BY_NAME = {w.name: w for w in STANDARD}


def select(only: str | None) -> list[Workload]:
    if not only:
        return list(STANDARD)
    names = [n.strip().upper() for n in only.split(",") if n.strip()]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise ValueError(f"unknown workload(s) {', '.join(unknown)}; known: {', '.join(BY_NAME)}")
    return [BY_NAME[n] for n in names]
