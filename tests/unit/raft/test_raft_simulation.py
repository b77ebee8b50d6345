"""The simulator in CI: 200 seeds with faults, determinism across hash seeds, and its parts."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from typing import Any

import pytest

from warren.raft import (
    NO_NODE,
    Entry,
    HardState,
    Membership,
    RaftConfig,
    RaftNode,
    RandomSource,
    Snapshot,
)
from warren.testing.sim import SimDisk, SimNetwork, SimOptions, SimResult, run_seed
from warren.testing.sim import __main__ as sim_main
from warren.testing.sim.network import NetworkFaults

CI_SEEDS = 200
CI_CHUNKS = 4  # four test cases, so one slow chunk shows which seeds it held


@pytest.mark.parametrize("chunk", range(CI_CHUNKS))
@pytest.mark.timeout(300)
def test_simulated_clusters_stay_safe_and_live_under_faults(chunk: int) -> None:
    size = CI_SEEDS // CI_CHUNKS
    failures = []
    for seed in range(chunk * size, (chunk + 1) * size):
        result = run_seed(seed)
        if not result.ok:
            failures.append(
                f"seed {seed}: {result.violation}\n"
                f"  replay: python -m warren.testing.sim --seed {seed} --trace"
            )
    assert not failures, "\n".join(failures)


def test_a_run_does_real_work() -> None:
    # Guard against a simulator that passes because nothing happens.
    options = SimOptions()
    result = run_seed(11, options)
    assert result.ok
    assert result.steps > 1_000


def _sim_stdout(seed: int, hash_seed: str) -> str:
    env = dict(os.environ, PYTHONHASHSEED=hash_seed)
    completed = subprocess.run(
        [sys.executable, "-m", "warren.testing.sim", "--seed", str(seed), "--trace"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=120,
    )
    return completed.stdout


def test_the_same_seed_prints_the_same_trace_under_different_hash_seeds() -> None:
    first = _sim_stdout(5, "1")
    assert first == _sim_stdout(5, "4242")
    assert "leader" in first and "violations=0" in first


def test_a_failing_seed_prints_its_replay_command_and_exits_non_zero(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def failing(seed: int, options: SimOptions | None = None) -> SimResult:
        return SimResult(seed, steps=10, simulated_ms=5, violation="two leaders in term 3")

    monkeypatch.setattr(sim_main, "run_seed", failing)
    assert sim_main.main(["--seeds", "2", "--first-seed", "40"]) == 1
    out = capsys.readouterr().out
    assert "seed 40: FAILED" in out and "two leaders in term 3" in out
    assert "replay: python -m warren.testing.sim --seed 41 --trace" in out
    assert "violations=2" in out


class AmnesiacNode(RaftNode):
    """A planted bug: a restarted node forgets whom it voted for (figure 2: votedFor is
    persistent state), so it can vote twice in one term."""

    def __init__(
        self,
        config: RaftConfig,
        rng: RandomSource,
        *,
        hard_state: HardState | None = None,
        **kwargs: Any,
    ) -> None:
        if hard_state is not None:
            hard_state = HardState(hard_state.term, NO_NODE, hard_state.commit)
        super().__init__(config, rng, hard_state=hard_state, **kwargs)


@pytest.mark.interpreted  # compiled, RaftNode takes no Python subclass
def test_a_planted_bug_is_caught() -> None:
    results = [run_seed(seed, SimOptions(node_factory=AmnesiacNode)) for seed in range(20)]
    caught = [r.violation for r in results if r.violation is not None]
    assert caught, "the simulator missed a node that forgets its vote across a crash"
    assert "voted for" in caught[0] or "leads term" in caught[0]


# --------------------------------------------------------------- the simulated disk


def _entries(first: int, last: int, term: int = 1) -> list[Entry]:
    return [Entry(term, index) for index in range(first, last + 1)]


def test_a_crash_keeps_synced_writes() -> None:
    disk = SimDisk()
    disk.append_entries(_entries(1, 3))
    disk.save_hard_state(HardState(term=1, vote=2, commit=3))
    disk.sync()
    disk.append_entries(_entries(4, 5))
    for seed in range(20):
        disk_copy = SimDisk()
        disk_copy.append_entries(_entries(1, 3))
        disk_copy.save_hard_state(HardState(term=1, vote=2, commit=3))
        disk_copy.sync()
        disk_copy.append_entries(_entries(4, 5))
        disk_copy.crash(random.Random(seed), tear_probability=0.5)
        hard_state, _, entries = disk_copy.recover()
        assert hard_state == HardState(term=1, vote=2, commit=3)
        assert [e.index for e in entries][:3] == [1, 2, 3]


def test_a_torn_last_record_is_discarded_on_recovery() -> None:
    outcomes = set()
    for seed in range(40):
        disk = SimDisk()
        disk.append_entries(_entries(1, 2))
        disk.sync()
        disk.append_entries(_entries(3, 3))
        disk.crash(random.Random(seed), tear_probability=1.0)
        _, _, entries = disk.recover()
        outcomes.add(len(entries))
    assert outcomes == {2}  # the unsynced record is either lost or torn, never half-read


def test_recovery_replays_truncation_and_snapshots() -> None:
    disk = SimDisk()
    disk.append_entries(_entries(1, 5, term=1))
    disk.append_entries(_entries(4, 4, term=2))  # replaces 4 and 5
    disk.save_snapshot(Snapshot(2, 1, Membership(frozenset({1}))))
    disk.sync()
    _, snapshot, entries = disk.recover()
    assert snapshot is not None and snapshot.index == 2
    assert [(e.index, e.term) for e in entries] == [(3, 1), (4, 2)]


def test_a_sync_armed_to_fail_crashes() -> None:
    from warren.testing.sim import DiskCrash

    disk = SimDisk()
    disk.fail_next_sync = True
    with pytest.raises(DiskCrash):
        disk.sync()
    disk.sync()  # only once


# --------------------------------------------------------------- the simulated network


def test_partitions_block_one_or_both_directions() -> None:
    network = SimNetwork(random.Random(1), NetworkFaults())
    network.partition([1], [2], symmetric=False)
    assert network.route(1, 2) == []
    assert len(network.route(2, 1)) == 1
    network.partition([3], [4], symmetric=True)
    assert network.route(3, 4) == [] and network.route(4, 3) == []
    network.heal()
    assert len(network.route(1, 2)) == 1


def test_the_network_loses_duplicates_and_delays() -> None:
    faults = NetworkFaults(
        loss_probability=0.3, duplicate_probability=0.3, slow_probability=0.1, delay_ms_max=10
    )
    network = SimNetwork(random.Random(7), faults)
    copies = [network.route(1, 2) for _ in range(1_000)]
    assert any(not c for c in copies)
    assert any(len(c) == 2 for c in copies)
    assert any(d > 10 for c in copies for d in c)


def test_a_fault_free_run_through_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert sim_main.main(["--seed", "3", "--no-faults"]) == 0
    out = capsys.readouterr().out
    assert "seed 3: ok" in out and "violations=0" in out
