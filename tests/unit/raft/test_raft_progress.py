"""Majority arithmetic against naive twins (after etcd-io/raft's quorum/quick_test.go)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from warren.raft import Progress, ProgressState
from warren.raft.progress import VoteResult, has_quorum, quorum_index, vote_result

matches = st.lists(st.integers(min_value=0, max_value=50), min_size=1, max_size=7)


@given(matches)
def test_quorum_index_is_the_highest_index_a_majority_stores(values: list[int]) -> None:
    progress = {node_id: Progress(next_index=1, match_index=m) for node_id, m in enumerate(values)}
    majority = len(values) // 2 + 1
    naive = max(n for n in range(0, 51) if sum(1 for m in values if m >= n) >= majority)
    assert quorum_index(progress, progress) == naive


@given(st.lists(st.sampled_from([True, False, None]), min_size=1, max_size=7))
def test_vote_result_against_counting(answers: list[bool | None]) -> None:
    voters = list(range(len(answers)))
    votes = {v: a for v, a in zip(voters, answers, strict=True) if a is not None}
    majority = len(voters) // 2 + 1
    granted = sum(1 for a in answers if a is True)
    open_or_granted = sum(1 for a in answers if a is not False)
    expected = (
        VoteResult.WON
        if granted >= majority
        else VoteResult.LOST
        if open_or_granted < majority
        else VoteResult.PENDING
    )
    assert vote_result(voters, votes) is expected
    assert has_quorum(voters, [v for v, a in votes.items() if a]) == (granted >= majority)


def test_a_probe_waits_for_its_answer_and_a_reject_walks_back_by_hint() -> None:
    progress = Progress(next_index=11, match_index=0)
    assert not progress.is_paused(max_inflight=4)
    progress.sent(last_index=12, entry_count=2)
    assert progress.is_paused(max_inflight=4)
    assert progress.reject(rejected_index=10, hint_index=4)
    assert progress.next_index == 5 and not progress.is_paused(max_inflight=4)
    assert not progress.reject(rejected_index=10, hint_index=4)  # stale: not the open probe


def test_replication_pipelines_up_to_the_inflight_limit() -> None:
    progress = Progress(next_index=1, match_index=0)
    progress.acknowledge(3)
    progress.become_replicate()
    for last in (5, 7):
        progress.sent(last_index=last, entry_count=2)
    assert progress.next_index == 8 and progress.is_paused(max_inflight=2)
    progress.acknowledge(5)
    assert not progress.is_paused(max_inflight=2)
    assert progress.state is ProgressState.REPLICATE
    # a reject beyond the match falls back to probing from match + 1
    assert progress.reject(rejected_index=7, hint_index=6)
    assert progress.state is ProgressState.PROBE and progress.next_index == 6


def test_a_probe_rejected_below_the_match_starts_again_from_what_the_member_has() -> None:
    """A member whose log was made again empty (its replica dropped and added back) answers
    a probe at its old match with a hint below it: the leader must not probe the same
    index for ever (stack simulator seed 493), but from what the member now has."""
    progress = Progress(next_index=1, match_index=0)
    progress.acknowledge(266)
    progress.become_replicate()
    progress.sent(last_index=281, entry_count=15)
    assert progress.reject(rejected_index=281, hint_index=0)  # back to probing from 267
    assert progress.state is ProgressState.PROBE and progress.next_index == 267
    assert progress.reject(rejected_index=266, hint_index=100)
    # probed at the hint; nothing is taken to match until the member says so (a match
    # set to the hint let heartbeats commit entries of its log that differ: seed 27)
    assert progress.match_index == 0 and progress.next_index == 101
