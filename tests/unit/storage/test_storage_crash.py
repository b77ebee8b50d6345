"""kill -9 at random moments: every record a child reported as synced is there and intact.

The child appends deterministic payloads in random batches, syncs, and writes the durable
sequence number to a pipe only after `flush_and_sync` returned. The parent kills it with
SIGKILL after a random delay, reopens the log and checks everything the child reported;
then the next child recovers the same directory and goes on. A few seconds in all: at
least `RUN_S`, and on a loaded machine (a child's start alone can take a second) until
`RUNS_MIN` children ran and one of them reported a sync, within `RUN_S_MAX`; a budget of
wall-clock time only once ended after a single child killed before its first sync.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from warren.storage.log import Log

SEGMENT_MAX_BYTES = 64 * 1024
RUN_S = 2.5
RUN_S_MAX = 60.0
RUNS_MIN = 2
CHILD_LIFETIME_S_MAX = 0.4
CHILD_RUNS_MAX = 40

CHILD = """
import random, sys
from warren.storage.log import Log

def payload_for(sequence):
    return (b"%d:" % sequence) * (sequence % 97)

directory, seed = sys.argv[1], int(sys.argv[2])
rng = random.Random(seed)
log, report = Log.open(directory, segment_max_bytes=int(sys.argv[3]))
sys.stdout.write("open %d\\n" % log.next_sequence)
sys.stdout.flush()
while True:
    for _ in range(rng.randint(1, 300)):
        log.append(payload_for(log.next_sequence))
    durable = log.flush_and_sync()
    sys.stdout.write("%d\\n" % durable)
    sys.stdout.flush()
"""


def payload_for(sequence: int) -> bytes:
    return (b"%d:" % sequence) * (sequence % 97)


def run_child_until_killed(directory: Path, seed: int, lifetime_s: float) -> list[str]:
    lines: list[str] = []
    with subprocess.Popen(
        [sys.executable, "-c", CHILD, str(directory), str(seed), str(SEGMENT_MAX_BYTES)],
        stdout=subprocess.PIPE,
        text=True,
    ) as child:
        reader = threading.Thread(target=lambda: lines.extend(child.stdout or ()))
        reader.start()
        deadline = time.monotonic() + 10.0
        while not lines and time.monotonic() < deadline and child.poll() is None:
            time.sleep(0.005)  # wait until it opened the log, then give it its lifetime
        time.sleep(lifetime_s)
        child.send_signal(signal.SIGKILL)
        child.wait()
        reader.join()
    assert child.returncode == -signal.SIGKILL, f"child ended on its own: {child.returncode}"
    return lines


def test_sigkill_never_loses_a_synced_record(tmp_path: Path) -> None:
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    reported_max = 0
    runs = 0
    started = time.monotonic()

    def going() -> bool:
        elapsed_s = time.monotonic() - started
        enough = runs >= RUNS_MIN and reported_max > 0
        return runs < CHILD_RUNS_MAX and (
            elapsed_s < RUN_S or (not enough and elapsed_s < RUN_S_MAX)
        )

    while going():
        runs += 1
        lines = run_child_until_killed(
            tmp_path, rng.randrange(1 << 30), rng.random() * CHILD_LIFETIME_S_MAX
        )
        assert lines and lines[0].startswith("open "), f"seed {seed}: child did not start"
        opened_at = int(lines[0].split()[1])
        assert opened_at > reported_max, f"seed {seed}: child reopened behind a synced record"
        synced = [int(line) for line in lines[1:] if line.endswith("\n")]
        reported_max = max([reported_max, *synced])
        log, report = Log.open(tmp_path, SEGMENT_MAX_BYTES)
        records = list(log.records())
        sequences = [s for s, _ in records]
        first = sequences[0] if sequences else log.next_sequence
        assert sequences == list(range(first, first + len(sequences))), f"seed {seed}"
        assert first <= opened_at, f"seed {seed}"
        assert log.next_sequence - 1 >= reported_max, f"seed {seed}: {report.summary()}"
        for sequence, payload in records:
            assert payload == payload_for(sequence), f"seed {seed}: record {sequence} differs"
        # Keep the directory small: everything checked so far may go.
        for segment in log.segments()[:-1]:
            log.retire(segment.segment_id)
        log.close()
    assert runs >= RUNS_MIN and reported_max > 0, f"seed {seed}: too little happened"
