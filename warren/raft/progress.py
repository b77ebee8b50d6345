"""What a leader knows about each follower's log, and the majority arithmetic.

Theory of operation:
1. A leader keeps one `Progress` per member (itself included): `match_index`, the highest
   index known to be on that member's stable storage, and `next_index`, the next entry to
   send (figure 2's matchIndex/nextIndex).
2. A follower's replication is in one of three states (after etcd's Progress):
   - PROBE: we do not know where its log matches. One append at a time (`probe_sent`), each
     answered by a match or a reject that moves `next_index` back.
   - REPLICATE: the log matches up to `match_index`; appends are pipelined: `next_index`
     runs ahead optimistically and up to `max_inflight` appends may be unanswered.
   - SNAPSHOT: the entries it needs were compacted; a snapshot is on its way. If no answer
     comes in `snapshot_timeout_ticks`, the snapshot is taken to be lost and we probe again.
3. `recent_active` is set by any answer from the member and cleared every election timeout
   by check-quorum: a leader that did not hear from a majority in that time steps down.
4. Majorities are counted over voters only. `quorum_index` is the highest index stored on
   a majority: the median of the sorted match indexes (figure 2's last leader rule, before
   the current-term check that the node applies).
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Iterable, Mapping

from warren.raft.messages import NodeId


class ProgressState(enum.Enum):
    PROBE = "probe"
    REPLICATE = "replicate"
    SNAPSHOT = "snapshot"


class VoteResult(enum.Enum):
    PENDING = "pending"
    WON = "won"
    LOST = "lost"


class Progress:
    __slots__ = (
        "inflight",
        "match_index",
        "next_index",
        "pending_snapshot_index",
        "probe_sent",
        "recent_active",
        "snapshot_ticks",
        "state",
    )

    def __init__(self, next_index: int, match_index: int = 0):
        self.match_index = match_index
        self.next_index = next_index
        self.state = ProgressState.PROBE
        self.probe_sent = False
        # last index of each append sent and not yet acknowledged, oldest first
        self.inflight: deque[int] = deque()
        self.pending_snapshot_index = 0
        self.snapshot_ticks = 0
        self.recent_active = False

    def become_probe(self) -> None:
        # After a snapshot the follower has at least the snapshot; probe from there.
        if self.state is ProgressState.SNAPSHOT:
            self.next_index = max(self.match_index + 1, self.pending_snapshot_index + 1)
        else:
            self.next_index = self.match_index + 1
        self._reset(ProgressState.PROBE)

    def become_replicate(self) -> None:
        self.next_index = self.match_index + 1
        self._reset(ProgressState.REPLICATE)

    def become_snapshot(self, snapshot_index: int) -> None:
        self._reset(ProgressState.SNAPSHOT)
        self.pending_snapshot_index = snapshot_index

    def _reset(self, state: ProgressState) -> None:
        self.state = state
        self.probe_sent = False
        self.inflight.clear()
        self.pending_snapshot_index = 0
        self.snapshot_ticks = 0

    def is_paused(self, max_inflight: int) -> bool:
        if self.state is ProgressState.PROBE:
            return self.probe_sent
        if self.state is ProgressState.REPLICATE:
            return len(self.inflight) >= max_inflight
        return True  # SNAPSHOT: wait for the answer

    def sent(self, last_index: int, entry_count: int) -> None:
        """Record an append whose last entry is `last_index`."""
        if self.state is ProgressState.REPLICATE:
            if entry_count:
                self.next_index = last_index + 1
                self.inflight.append(last_index)
        elif self.state is ProgressState.PROBE:
            self.probe_sent = True

    def acknowledge(self, index: int) -> bool:
        """A member stored entries up to `index`; False if that is old news."""
        updated = index > self.match_index
        if updated:
            self.match_index = index
            self.probe_sent = False
        self.next_index = max(self.next_index, index + 1)
        while self.inflight and self.inflight[0] <= index:
            self.inflight.popleft()
        return updated

    def reject(self, rejected_index: int, hint_index: int) -> bool:
        """A member's log does not match at `rejected_index`; False if the reject is stale."""
        if self.state is ProgressState.REPLICATE:
            if rejected_index <= self.match_index:
                return False  # an answer to an append sent before a later success
            self.become_probe()
            return True
        if self.next_index - 1 != rejected_index:
            return False  # not the probe we are waiting for
        if hint_index < self.match_index:
            # its log ends before what it acknowledged: the member lost its log (a replica
            # made again, empty, on that node). Probing from match + 1 again would be
            # rejected again, for ever. Nothing of its log is known to match now (the
            # hint is where to probe, not a match: heartbeats commit up to the match).
            self.match_index = 0
        self.next_index = max(min(rejected_index, hint_index + 1), self.match_index + 1)
        self.probe_sent = False
        return True


def quorum_index(voters: Iterable[NodeId], progress: Mapping[NodeId, Progress]) -> int:
    matches = sorted((progress[v].match_index for v in voters), reverse=True)
    if not matches:
        return 0
    return matches[len(matches) // 2]


def vote_result(voters: Iterable[NodeId], votes: Mapping[NodeId, bool]) -> VoteResult:
    voter_list = list(voters)
    majority = len(voter_list) // 2 + 1
    granted = sum(1 for v in voter_list if votes.get(v) is True)
    rejected = sum(1 for v in voter_list if votes.get(v) is False)
    if granted >= majority:
        return VoteResult.WON
    if len(voter_list) - rejected < majority:
        return VoteResult.LOST
    return VoteResult.PENDING


def has_quorum(voters: Iterable[NodeId], active: Iterable[NodeId]) -> bool:
    voter_set = set(voters)
    return len(voter_set & set(active)) > len(voter_set) // 2
