"""Log throughput on this machine (not a test; run it):

    .venv/bin/python tests/unit/storage/bench_storage_log.py [directory]

Prints appends/s without syncing, then for batches of 1, 10, 100, 1000 records of 128 B per
sync: records/s, syncs/s and sync latency; then group commit the way the runtime would do it
(one thread appends and seals, an executor thread syncs whatever has accumulated, at two GIL
switch intervals), the journal's cost
per persistent message, and recovery speed. The directory should be on the disk the broker
uses (default: a temporary directory under the current one).
"""

from __future__ import annotations

import concurrent.futures
import statistics
import sys
import tempfile
import time
from pathlib import Path

from warren.storage.journal import QueueJournal
from warren.storage.log import Log

PAYLOAD = b"p" * 128
RUN_S = 2.0
SYNCS_MAX = 20_000


def fresh(base: Path, name: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=name, dir=base))


def bench_append(base: Path) -> None:
    log, _ = Log.open(fresh(base, "append"))
    count = 200_000
    started = time.perf_counter()
    for _ in range(count):
        log.append(PAYLOAD)
    elapsed = time.perf_counter() - started
    log.close(flush=False)
    print(f"append only (128 B):        {count / elapsed:12,.0f} appends/s")


def bench_batches(base: Path, batch: int) -> None:
    log, _ = Log.open(fresh(base, f"batch{batch}"))
    latencies_s: list[float] = []
    records = 0
    started = time.perf_counter()
    for _ in range(SYNCS_MAX):
        for _ in range(batch):
            log.append(PAYLOAD)
        before = time.perf_counter()
        log.flush_and_sync()
        latencies_s.append(time.perf_counter() - before)
        records += batch
        if before - started > RUN_S:
            break
    elapsed = time.perf_counter() - started
    log.close()
    latencies_s.sort()
    p99 = latencies_s[int(len(latencies_s) * 0.99)]
    print(
        f"batch {batch:>4} per sync:        {records / elapsed:12,.0f} records/s"
        f"  {len(latencies_s) / elapsed:8,.0f} syncs/s"
        f"  sync p50 {statistics.median(latencies_s) * 1e3:6.2f} ms"
        f"  p99 {p99 * 1e3:6.2f} ms"
    )


def bench_pipelined(base: Path, per_iteration: int) -> None:
    """The runtime's shape: the loop thread appends `per_iteration` records per event-loop
    iteration; at the end of an iteration, if no sync is in flight, it seals what has
    accumulated and hands it to an executor thread. Appends never wait for a sync."""
    log, _ = Log.open(fresh(base, "pipelined"))
    syncs = 0
    batch_records: list[int] = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as executor:
        in_flight: concurrent.futures.Future[int] | None = None
        started = time.perf_counter()
        while time.perf_counter() - started < RUN_S:
            for _ in range(per_iteration):
                log.append(PAYLOAD)
            if in_flight is not None and in_flight.done():
                in_flight.result()
                in_flight = None
            if in_flight is None:
                batch = log.seal()
                if batch is not None:
                    batch_records.append(batch.records)
                    in_flight = executor.submit(log.sync_batch, batch)
                    syncs += 1
        if in_flight is not None:
            in_flight.result()
    durable = log.flush_and_sync()
    elapsed = time.perf_counter() - started
    log.close()
    print(
        f"pipelined, {per_iteration:>3} per iteration: {durable / elapsed:10,.0f} records/s"
        f"  {syncs / elapsed:8,.0f} syncs/s"
        f"  {statistics.mean(batch_records):8,.1f} records per sync"
    )


def bench_journal(base: Path) -> None:
    """Per persistent message, as the runtime would call it: enqueue from the broker's
    fields, settle in batches of 100 (acks), no sync."""
    log, _ = Log.open(fresh(base, "journal"))
    journal = QueueJournal(log)
    route = b"\x0aamq.direct\x02rk"
    count = 100_000
    started = time.perf_counter()
    for msg_id in range(1, count + 1):
        journal.enqueue_fields("q", msg_id, 0, None, 0, route, b"\x00\x00", PAYLOAD)
        if msg_id % 100 == 0:
            journal.settle("q", range(msg_id - 99, msg_id + 1))
    elapsed = time.perf_counter() - started
    log.close(flush=False)
    print(f"journal enqueue + settle:   {count / elapsed:12,.0f} messages/s (no sync)")


def bench_recovery(base: Path) -> None:
    directory = fresh(base, "recovery")
    log, _ = Log.open(directory)
    count = 500_000
    for _ in range(count):
        log.append(PAYLOAD)
    log.close()
    started = time.perf_counter()
    log, report = Log.open(directory)
    opened = time.perf_counter() - started
    replayed = sum(1 for _ in log.records())
    total = time.perf_counter() - started
    log.close()
    assert report.clean and replayed == count
    print(
        f"recovery of {count:,} records: open {opened:5.2f} s ({count / opened:,.0f} records/s),"
        f" open + replay {total:5.2f} s"
    )


def main() -> None:
    base = Path(sys.argv[1]) if len(sys.argv) > 1 else Path.cwd()
    with tempfile.TemporaryDirectory(prefix="warren-bench-", dir=base) as root:
        bench_append(Path(root))
        for batch in (1, 10, 100, 1000):
            bench_batches(Path(root), batch)
        default_interval_s = sys.getswitchinterval()
        for interval_s in (default_interval_s, 0.0002):
            # A busy loop thread holds the GIL; the syncing thread gets it back only at the
            # next switch, so the interval bounds syncs/s (and confirm latency) under load.
            sys.setswitchinterval(interval_s)
            print(f"GIL switch interval {interval_s * 1e3:.1f} ms:")
            for per_iteration in (1, 10, 100):
                bench_pipelined(Path(root), per_iteration)
        sys.setswitchinterval(default_interval_s)
        bench_journal(Path(root))
        bench_recovery(Path(root))


if __name__ == "__main__":
    main()
