"""A Raft node as a pure state machine: inputs in, a `Ready` batch out.

Theory of operation:
1. Inputs: `step(message)`, `tick()` (one unit of logical time), `propose(data)`,
   `propose_membership`, `transfer_leadership`, `read_index`, `compact`. Output: `ready()`,
   the batch of work the driver must do (persist, send, apply; see `Ready`), acknowledged
   by `advance(ready)`. The node never does I/O, never reads a clock, and draws randomness
   only from the `RandomSource` it was given, so a seed replays it exactly.
2. Roles: FOLLOWER, PRE_CANDIDATE, CANDIDATE, LEADER (section 5.2 of the paper, plus
   pre-vote from section 9.6 of Ongaro's dissertation). A node that is not a voter (a
   learner, or not a member at all) never campaigns.
3. Elections: a follower that hears nothing for a randomized election timeout in
   [election_ticks, 2 * election_ticks) first asks for pre-votes at term + 1 without
   changing its term; only if a majority would vote does it start a real election. A node
   that heard from a leader within the election timeout ignores vote requests (leader
   stickiness), unless the request is part of a leadership transfer. Only hearing from the
   leader or granting a vote restarts a follower's election timer (figure 2).
4. Check-quorum: a leader that has not heard from a majority of voters within an election
   timeout steps down, so a partitioned leader does not keep serving stale reads.
5. Replication: per-follower `Progress` (probe / pipelined replicate / snapshot), at most
   `max_entries_per_append` entries per AppendEntries. The leader counts its own log only
   once it is persisted (after `advance`), so a commit never depends on an unsynced write.
6. Commit rule (section 5.4.2, figure 8): the leader commits index N only when a majority
   stores N *and* the entry at N is of the current term; earlier entries commit with it.
   A new leader appends an EMPTY entry so that this happens without waiting for a proposal.
7. Membership (single-server changes, dissertation section 4.1): a MEMBERSHIP entry takes
   effect on every node when it is committed (never un-done, since commits are final). The
   leader accepts a change only when no other is uncommitted and it has committed an entry
   of its own term. A new node joins as a learner; the leader promotes it to voter once
   its log has caught up with the commit index. A leader removed from the voters steps down.
   `RaftConfig.may_vote` says which nodes may be voters (default: all): the leader
   promotes only a learner that may vote, and turns a voter that may not into a learner,
   one change at a time as any other (a configuration written before the rule, when
   every member voted, converges to it); a leader that may not vote first hands
   leadership to a caught-up voter that may, which then demotes it. The last voter
   stays one, so a group whose rule names no voter still commits.
   `membership_index` orders configurations: the index of the entry (or snapshot) that
   made the one in force, larger for a later one on every node.
8. Snapshots: `compact(index, data)` replaces the applied log prefix by the application's
   snapshot. A follower that needs compacted entries gets an InstallSnapshot.
9. Leadership transfer (dissertation section 3.10): the leader stops taking proposals,
   brings the target up to date, and sends it TIMEOUT_NOW; the target campaigns at once.
10. Linearizable reads by read-index (dissertation section 6.4): the leader records its
    commit index, confirms with a heartbeat round that a majority still follows it, and
    returns a `ReadState`; the application reads once it has applied that index
    (bookkeeping in `warren.raft.reads`).
11. A leader writes its log in parallel with replicating it (dissertation section
    10.2.1): its APPEND and HEARTBEAT messages promise nothing about its own disk (it
    counts its own log towards a commit only once persisted, point 5), so a driver may
    send them before the Ready's writes are durable (`may_send_early`). Not when the
    same Ready persists a new term or vote: a leader of one voter elected in one Ready
    could otherwise crash, come back at the old term, win the same term again and send
    other entries under it.
12. A follower commits only entries it knows to be the leader's: up to the leader's
    commit index, but never past the last index an append (or snapshot) of this term
    matched (figure 2, AppendEntries rule 5: min(leaderCommit, index of last new entry)).
    A heartbeat carries no entries, so it commits only up to that index. The leader
    also caps a heartbeat's commit at the follower's match index, but that is the
    leader's belief: set wrong (stack sim seed 27's precursor took it from a reject's
    hint), the follower committed a term-1 tail that differed from the leader's log.
13. A node that knows no configuration yet grants no (pre-)votes. That is a replica
    started empty to join the group; on a node removed from it before (the runtime's
    delete_member, then add_member), its vote would count, for a member that never
    learned of the removal, as that of the replica that helped commit entries and lost
    them with its log (stack sim seed 27: such a vote elected a node without them).
    Any other node votes, even one outside its configuration: a learner may be a voter
    in a candidate's later configuration, and a removed node that still has its log may
    be the vote a member that never learned of the removal needs. Once the new replica
    has learned an old configuration from what it is sent it votes again, so it must not
    start at term 0 with no vote: it could take an old leader's term and vote a second
    time in a term its first incarnation voted in. The runtime starts it from the term
    and vote of the replica it dropped (`warren.runtime.cluster.raft_host`, point 10).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from warren.raft.log import RaftLog, SafetyError
from warren.raft.messages import (
    NO_NODE,
    Entry,
    EntryKind,
    HardState,
    Membership,
    Message,
    MessageType,
    NodeId,
    ReadState,
    Ready,
    Snapshot,
)
from warren.raft.progress import (
    Progress,
    ProgressState,
    VoteResult,
    has_quorum,
    quorum_index,
    vote_result,
)
from warren.raft.reads import ReadIndexQueue


class RandomSource(Protocol):
    """Where election timeouts come from: a seeded `random.Random` in tests and the
    simulator, any source in production. The core never touches the `random` module."""

    def randrange(self, stop: int, /) -> int: ...


class Role(enum.Enum):
    FOLLOWER = "follower"
    PRE_CANDIDATE = "pre_candidate"
    CANDIDATE = "candidate"
    LEADER = "leader"


class MembershipChange(enum.Enum):
    ADD_LEARNER = "add_learner"  # joins as a non-voter; promoted when caught up
    REMOVE = "remove"


@dataclass(frozen=True, slots=True)
class RaftConfig:
    node_id: NodeId
    # which members may vote (point 7); the same rule on every node of the group
    may_vote: Callable[[NodeId], bool] = lambda _node_id: True
    election_ticks: int = 10
    heartbeat_ticks: int = 1
    max_entries_per_append: int = 64
    max_inflight_appends: int = 8
    pre_vote: bool = True
    check_quorum: bool = True

    def __post_init__(self) -> None:
        if self.node_id <= NO_NODE:
            raise ValueError("node ids are positive")
        if self.heartbeat_ticks >= self.election_ticks:
            raise ValueError("heartbeat_ticks must be below election_ticks")


class RaftNode:
    def __init__(
        self,
        config: RaftConfig,
        rng: RandomSource,
        *,
        membership: Membership | None = None,
        hard_state: HardState | None = None,
        snapshot: Snapshot | None = None,
        entries: Sequence[Entry] = (),
    ) -> None:
        """Build a node from what its storage recovered.

        `membership` bootstraps a brand-new cluster (no snapshot); a node joining an
        existing cluster passes nothing and learns the membership from its leader.
        """
        self.id = config.node_id
        self.config = config
        self._rng = rng
        hard_state = hard_state or HardState()
        self.term = hard_state.term
        self.vote = hard_state.vote
        self.log = RaftLog(snapshot, entries, hard_state.commit)
        self.snapshot = snapshot
        base = snapshot.membership if snapshot is not None else (membership or Membership())
        # (index, membership) of committed membership entries after the snapshot, oldest
        # first; the snapshot's membership applies before the first of them.
        self._membership_base = base
        self._membership_history: list[tuple[int, Membership]] = []
        self._membership_scanned_index = self.log.snapshot_index  # entries read for changes
        self.membership = base
        self.role = Role.FOLLOWER
        self.leader_id = NO_NODE
        self.progress: dict[NodeId, Progress] = {}
        self._votes: dict[NodeId, bool] = {}
        self._messages: list[Message] = []
        self._read_states: list[ReadState] = []
        self._reads = ReadIndexQueue()
        self._received_snapshot: Snapshot | None = None
        # the last index known to match this term's leader's log (point 12)
        self._leader_match_index = 0
        self._pending_membership_index = 0
        self.transfer_target = NO_NODE
        self._transfer_elapsed = 0
        self._election_elapsed = 0
        self._heartbeat_elapsed = 0
        self._randomized_election_timeout = 0
        self._prev_hard_state = HardState(self.term, self.vote, self.log.commit_index)
        self._reset_election_timeout()
        self._apply_memberships_to_commit()

    # ----------------------------------------------------------------- public inputs

    @property
    def hard_state(self) -> HardState:
        return HardState(self.term, self.vote, self.log.commit_index)

    @property
    def membership_index(self) -> int:
        """Where the configuration in force comes from: the index of the committed
        membership entry that made it, or of the snapshot holding it (0: bootstrapped or
        none yet). A later configuration always has a larger one, on any node."""
        if self._membership_history:
            return self._membership_history[-1][0]
        return self.log.snapshot_index

    @property
    def is_voter(self) -> bool:
        return self.id in self.membership.voters

    def tick(self) -> None:
        if self.role is Role.LEADER:
            self._tick_leader()
        else:
            self._tick_election()

    def campaign(self) -> None:
        """Start an election now (as if the election timeout had passed)."""
        if self.role is not Role.LEADER and self.is_voter:
            self._campaign(pre_vote=self.config.pre_vote, transfer=False)

    def propose(self, data: bytes) -> int | None:
        """Append `data` to the log if this node is the leader; its index, else None."""
        if self.role is not Role.LEADER or self.transfer_target != NO_NODE:
            return None
        return self._append_and_broadcast(EntryKind.NORMAL, data)

    def propose_membership(self, change: MembershipChange, node_id: NodeId) -> int | None:
        """Add a learner or remove a member; the entry's index, or None if refused now."""
        if self.role is not Role.LEADER or self.transfer_target != NO_NODE:
            return None
        if self._pending_membership_index > self.log.commit_index:
            return None  # one change at a time, and not before this term's first commit
        current = self.membership
        if change is MembershipChange.ADD_LEARNER:
            if node_id in current.voters or node_id in current.learners:
                return None
            new = Membership(current.voters, current.learners | {node_id})
        else:
            if node_id not in current.voters and node_id not in current.learners:
                return None
            if current.voters == {node_id}:
                return None  # removing the last voter would leave no one to commit
            new = Membership(current.voters - {node_id}, current.learners - {node_id})
        return self._propose_membership(new)

    def transfer_leadership(self, target: NodeId) -> bool:
        if self.role is not Role.LEADER or target == self.id:
            return False
        if target not in self.membership.voters:
            return False
        self.transfer_target = target
        self._transfer_elapsed = 0
        progress = self.progress[target]
        if progress.match_index == self.log.last_index:
            self._send(Message(MessageType.TIMEOUT_NOW, target, self.id, self.term))
        else:
            self._send_append(target)
        return True

    def read_index(self, context: bytes) -> bool:
        """Ask for a linearizable read; answered by a `ReadState` carrying `context`, which
        must be non-empty and unique among reads in flight."""
        if not context:
            raise ValueError("a read needs a non-empty context")
        if self.role is not Role.LEADER:
            return False
        if self.log.term_at(self.log.commit_index) != self.term:
            # Until an entry of this term commits, our commit index may be behind an older
            # leader's; the read waits for our EMPTY entry (dissertation section 6.4 step 1).
            self._reads.wait_for_commit(context)
            return True
        self._start_read(context)
        return True

    def compact(self, index: int, data: bytes) -> Snapshot:
        """The application saved its state as of applied `index`: drop the log before it."""
        membership = self._membership_at(index)
        term = self.log.compact(index)
        self.snapshot = Snapshot(index, term, membership, data)
        self._membership_base = membership
        self._membership_history = [(i, m) for i, m in self._membership_history if i > index]
        return self.snapshot

    def has_ready(self) -> bool:
        log = self.log
        return bool(
            self._messages
            or self._read_states
            or self._received_snapshot is not None
            or log.stable_index < log.last_index
            or log.applied < log.commit_index
            or self._hard_state_changed()
        )

    def _hard_state_changed(self) -> bool:
        # field by field: has_ready runs after every input, building a HardState costs more
        prev = self._prev_hard_state
        return (
            self.term != prev.term or self.vote != prev.vote or self.log.commit_index != prev.commit
        )

    def ready(self) -> Ready:
        log = self.log
        ready = Ready(
            hard_state=self.hard_state if self._hard_state_changed() else None,
            entries=tuple(log.unstable()),
            snapshot=self._received_snapshot,
            messages=tuple(self._messages),
            committed=tuple(log.committed_unapplied()),
            read_states=tuple(self._read_states),
        )
        self._messages = []
        self._read_states = []
        return ready

    def may_send_early(self, ready: Ready) -> bool:
        """Whether `ready`'s appends and heartbeats may go before its writes are durable
        (point 11): between `ready()` and `advance(ready)`, while `ready` persists no new
        term or vote."""
        hard = ready.hard_state
        prev = self._prev_hard_state
        return hard is None or (hard.term == prev.term and hard.vote == prev.vote)

    def advance(self, ready: Ready) -> None:
        log = self.log
        if ready.hard_state is not None:
            self._prev_hard_state = ready.hard_state
        if ready.snapshot is not None:
            log.applied = max(log.applied, ready.snapshot.index)
            if self._received_snapshot is ready.snapshot:
                self._received_snapshot = None
        if ready.entries:
            last = ready.entries[-1]
            # The log may have changed since ready() only if the driver broke the contract.
            if log.matches(last.index, last.term):
                log.stable_index = max(log.stable_index, last.index)
        if ready.committed:
            log.applied = max(log.applied, ready.committed[-1].index)
        if self.role is Role.LEADER and self.id in self.progress:
            own = self.progress[self.id]
            if own.acknowledge(log.stable_index) and self._maybe_commit():
                self._broadcast_append()

    # ----------------------------------------------------------------- messages in

    def step(self, message: Message) -> None:
        if message.to != self.id:
            raise ValueError(f"message for {message.to} stepped into node {self.id}")
        if message.term > self.term:
            if not self._accept_higher_term(message):
                return
        elif message.term < self.term:
            self._answer_stale(message)
            return
        kind = message.type
        if kind is MessageType.VOTE or kind is MessageType.PRE_VOTE:
            self._handle_vote_request(message)
        elif self.role is Role.LEADER:
            self._step_leader(message)
        elif self.role is Role.FOLLOWER:
            self._step_follower(message)
        else:
            self._step_candidate(message)

    def _accept_higher_term(self, message: Message) -> bool:
        """Section 5.1: a higher term makes us a follower — with pre-vote's exceptions."""
        kind = message.type
        if kind is MessageType.VOTE or kind is MessageType.PRE_VOTE:
            in_lease = (
                self.config.check_quorum
                and self.leader_id != NO_NODE
                and self._election_elapsed < self.config.election_ticks
            )
            if in_lease and not message.transfer:
                return False  # leader stickiness: ignore a disruptive candidate
            if kind is MessageType.PRE_VOTE:
                return True  # a pre-vote changes no term
            # Figure 2: a follower's election timer restarts when it hears from a leader or
            # grants a vote, not when it merely sees a higher term; otherwise a candidate
            # that cannot win (stale log, fast clock) keeps everyone else from timing out.
            elapsed = self._election_elapsed if self.role is Role.FOLLOWER else 0
            self._become_follower(message.term, NO_NODE)
            self._election_elapsed = elapsed
            return True
        if kind is MessageType.PRE_VOTE_RESPONSE and not message.reject:
            return True  # the granted pre-vote echoes the term we would campaign at
        if kind in (MessageType.APPEND, MessageType.HEARTBEAT, MessageType.SNAPSHOT):
            self._become_follower(message.term, message.sender)
        else:
            self._become_follower(message.term, NO_NODE)
        return True

    def _answer_stale(self, message: Message) -> None:
        kind = message.type
        if kind in (MessageType.APPEND, MessageType.HEARTBEAT):
            # A leader of an old term: tell it our term so it steps down. Needed with
            # check-quorum and pre-vote, where our higher term may never reach it otherwise.
            self._send(Message(MessageType.APPEND_RESPONSE, message.sender, self.id, self.term))
        elif kind is MessageType.PRE_VOTE:
            self._send(
                Message(
                    MessageType.PRE_VOTE_RESPONSE, message.sender, self.id, self.term, reject=True
                )
            )

    def _handle_vote_request(self, message: Message) -> None:
        pre_vote = message.type is MessageType.PRE_VOTE
        can_vote = (
            self.vote == message.sender
            or (self.vote == NO_NODE and self.leader_id == NO_NODE)
            or (pre_vote and message.term > self.term)
        )
        # Point 13: a node that knows no configuration yet has no vote to give.
        known = bool(self.membership.members)
        grant = known and can_vote and self.log.is_up_to_date(message.index, message.log_term)
        response_type = MessageType.PRE_VOTE_RESPONSE if pre_vote else MessageType.VOTE_RESPONSE
        if grant:
            if not pre_vote:
                self._election_elapsed = 0
                self.vote = message.sender
            self._send(Message(response_type, message.sender, self.id, message.term))
        else:
            self._send(Message(response_type, message.sender, self.id, self.term, reject=True))

    def _step_follower(self, message: Message) -> None:
        kind = message.type
        if kind is MessageType.APPEND:
            self._election_elapsed = 0
            self.leader_id = message.sender
            self._handle_append(message)
        elif kind is MessageType.HEARTBEAT:
            self._election_elapsed = 0
            self.leader_id = message.sender
            self._handle_heartbeat(message)
        elif kind is MessageType.SNAPSHOT:
            self._election_elapsed = 0
            self.leader_id = message.sender
            self._handle_snapshot(message)
        elif kind is MessageType.TIMEOUT_NOW and self.is_voter:
            self._campaign(pre_vote=False, transfer=True)

    def _step_candidate(self, message: Message) -> None:
        kind = message.type
        if kind in (MessageType.APPEND, MessageType.HEARTBEAT, MessageType.SNAPSHOT):
            # Another node won this term (section 5.2).
            self._become_follower(self.term, message.sender)
            self._step_follower(message)
            return
        expected = (
            MessageType.PRE_VOTE_RESPONSE
            if self.role is Role.PRE_CANDIDATE
            else MessageType.VOTE_RESPONSE
        )
        if kind is not expected:
            return
        # A granted pre-vote echoes the term we asked for, one above ours; anything else is
        # an answer to an earlier round.
        wanted_term = self.term + 1 if self.role is Role.PRE_CANDIDATE else self.term
        if not message.reject and message.term != wanted_term:
            return
        self._votes.setdefault(message.sender, not message.reject)
        result = vote_result(self.membership.voters, self._votes)
        if result is VoteResult.WON:
            if self.role is Role.PRE_CANDIDATE:
                self._campaign(pre_vote=False, transfer=False)
            else:
                self._become_leader()
        elif result is VoteResult.LOST:
            self._become_follower(self.term, NO_NODE)

    def _step_leader(self, message: Message) -> None:
        progress = self.progress.get(message.sender)
        if progress is None:
            return  # not a member (any more)
        kind = message.type
        if kind is MessageType.APPEND_RESPONSE:
            progress.recent_active = True
            self._handle_append_response(message, progress)
        elif kind is MessageType.HEARTBEAT_RESPONSE:
            progress.recent_active = True
            self._handle_heartbeat_response(message, progress)

    # ----------------------------------------------------------------- follower side

    def _handle_append(self, message: Message) -> None:
        log = self.log
        if message.index < log.commit_index:
            # Everything up to our commit index matches the leader's log already.
            self._leader_matches(log.commit_index)
            self._reply_append(message.sender, index=log.commit_index)
            return
        last_new_index = log.try_append(
            message.index, message.log_term, message.commit, message.entries
        )
        if last_new_index is not None:
            self._leader_matches(last_new_index)
            self._reply_append(message.sender, index=last_new_index)
            self._apply_memberships_to_commit()
            return
        hint = log.conflict_hint(message.index, message.log_term)
        self._send(
            Message(
                MessageType.APPEND_RESPONSE,
                message.sender,
                self.id,
                self.term,
                index=message.index,
                reject=True,
                reject_hint=hint,
                log_term=log.term_at(hint) or 0,
            )
        )

    def _reply_append(self, to: NodeId, index: int) -> None:
        self._send(Message(MessageType.APPEND_RESPONSE, to, self.id, self.term, index=index))

    def _leader_matches(self, index: int) -> None:
        self._leader_match_index = max(self._leader_match_index, index)

    def _handle_heartbeat(self, message: Message) -> None:
        # Point 12: only up to what an append of this term matched. (The leader caps
        # `commit` at its match index for us too, but that is its belief, not our log.)
        if self.log.commit_to(min(message.commit, self._leader_match_index)):
            self._apply_memberships_to_commit()
        self._send(
            Message(
                MessageType.HEARTBEAT_RESPONSE,
                message.sender,
                self.id,
                self.term,
                context=message.context,
            )
        )

    def _handle_snapshot(self, message: Message) -> None:
        snapshot = message.snapshot
        if snapshot is None:
            return
        log = self.log
        if snapshot.index <= log.commit_index:
            self._reply_append(message.sender, index=log.commit_index)
            return
        if log.matches(snapshot.index, snapshot.term):
            # We have the entries already: the snapshot only tells us they are committed.
            log.commit_to(snapshot.index)
            self._leader_matches(snapshot.index)
            self._apply_memberships_to_commit()
            self._reply_append(message.sender, index=log.commit_index)
            return
        log.restore(snapshot)
        self._leader_matches(snapshot.index)
        self.snapshot = snapshot
        self._received_snapshot = snapshot
        self._membership_base = snapshot.membership
        self._membership_history = []
        self._membership_scanned_index = snapshot.index
        self.membership = snapshot.membership
        self._reply_append(message.sender, index=log.last_index)

    # ----------------------------------------------------------------- leader side

    def _handle_append_response(self, message: Message, progress: Progress) -> None:
        if message.reject:
            hint = self.log.conflict_hint(message.reject_hint, message.log_term)
            if progress.reject(message.index, hint):
                self._send_append(message.sender)
            return
        if not progress.acknowledge(message.index):
            return  # a duplicate or reordered answer: nothing new
        if progress.state is ProgressState.PROBE:
            progress.become_replicate()
        elif (
            progress.state is ProgressState.SNAPSHOT
            and progress.match_index >= progress.pending_snapshot_index
        ):
            progress.become_probe()
            progress.become_replicate()
        if self._maybe_commit():
            self._broadcast_append()  # tell everyone the new commit index
        else:
            self._send_append(message.sender, send_if_empty=False)
        if message.sender == self.transfer_target and progress.match_index == self.log.last_index:
            self._send(Message(MessageType.TIMEOUT_NOW, message.sender, self.id, self.term))
        self._maybe_change_roles()

    def _handle_heartbeat_response(self, message: Message, progress: Progress) -> None:
        progress.probe_sent = False
        if progress.state is ProgressState.REPLICATE and progress.inflight:
            # An answer may have been lost; free a slot so replication cannot stall.
            progress.inflight.popleft()
        if progress.match_index < self.log.last_index:
            self._send_append(message.sender)
        if message.context and self._reads.acknowledge(message.context, message.sender):
            self._read_states.extend(self._reads.release(self.membership.voters))

    def _send_append(self, to: NodeId, *, send_if_empty: bool = True) -> None:
        progress = self.progress[to]
        if progress.is_paused(self.config.max_inflight_appends):
            return
        log = self.log
        prev_index = progress.next_index - 1
        prev_term = log.term_at(prev_index)
        if prev_term is None and prev_index < log.snapshot_index:
            self._send_snapshot(to, progress)
            return
        if prev_term is None:
            # next_index ran past our log (we are a new leader with a shorter log than an
            # optimistic guess); probe from our end instead.
            progress.next_index = log.last_index + 1
            prev_index = log.last_index
            prev_term = log.last_term
        high = min(log.last_index + 1, progress.next_index + self.config.max_entries_per_append)
        entries = tuple(log.slice(progress.next_index, high))
        if not entries and progress.next_index <= log.snapshot_index:
            self._send_snapshot(to, progress)  # compacted, and storage no longer has them
            return
        if not entries and not send_if_empty:
            return
        self._send(
            Message(
                MessageType.APPEND,
                to,
                self.id,
                self.term,
                index=prev_index,
                log_term=prev_term,
                entries=entries,
                commit=log.commit_index,
            )
        )
        progress.sent(prev_index + len(entries), len(entries))

    def _send_snapshot(self, to: NodeId, progress: Progress) -> None:
        snapshot = self.snapshot
        if snapshot is None:
            raise SafetyError("log is compacted but the node holds no snapshot")
        self._send(Message(MessageType.SNAPSHOT, to, self.id, self.term, snapshot=snapshot))
        progress.become_snapshot(snapshot.index)

    def _broadcast_append(self) -> None:
        for node_id in self._peers():
            self._send_append(node_id)

    def _broadcast_heartbeat(self, context: bytes = b"") -> None:
        for node_id in self._peers():
            progress = self.progress[node_id]
            self._send(
                Message(
                    MessageType.HEARTBEAT,
                    node_id,
                    self.id,
                    self.term,
                    commit=min(progress.match_index, self.log.commit_index),
                    context=context,
                )
            )

    def _maybe_commit(self) -> bool:
        index = quorum_index(self.membership.voters, self.progress)
        # Figure 8: count replicas only for an entry of the current term.
        if index <= self.log.commit_index or self.log.term_at(index) != self.term:
            return False
        self.log.commit_to(index)
        self._apply_memberships_to_commit()
        for context in self._reads.take_waiting():
            self._start_read(context)
        return True

    def _append_and_broadcast(self, kind: EntryKind, data: bytes) -> int:
        index = self.log.last_index + 1
        self.log.append([Entry(self.term, index, kind, data)])
        self._broadcast_append()
        return index

    def _propose_membership(self, new: Membership) -> int:
        index = self._append_and_broadcast(EntryKind.MEMBERSHIP, new.encode())
        self._pending_membership_index = index
        return index

    def _maybe_change_roles(self) -> None:
        """Point 7: promote a caught-up learner that may vote, else demote a voter that
        may not (handing leadership over first when that voter is this leader)."""
        if self.role is not Role.LEADER or self.transfer_target != NO_NODE:
            return
        if self._pending_membership_index > self.log.commit_index:
            return
        current = self.membership
        may_vote = self.config.may_vote
        for node_id in sorted(current.learners):
            progress = self.progress.get(node_id)
            caught_up = progress is not None and progress.match_index >= self.log.commit_index
            if caught_up and may_vote(node_id):
                self._propose_membership(
                    Membership(current.voters | {node_id}, current.learners - {node_id})
                )
                return
        barred = sorted(node_id for node_id in current.voters if not may_vote(node_id))
        if not barred or len(current.voters) == 1:
            return
        others = [node_id for node_id in barred if node_id != self.id]
        if others:
            node_id = others[0]
            self._propose_membership(
                Membership(current.voters - {node_id}, current.learners | {node_id})
            )
            return
        successors = [node_id for node_id in sorted(current.voters) if may_vote(node_id)]
        if successors:  # the most caught up; the transfer brings it up to date first
            self.transfer_leadership(
                max(successors, key=lambda node_id: self.progress[node_id].match_index)
            )

    # ----------------------------------------------------------------- reads

    def _start_read(self, context: bytes) -> None:
        self._reads.add(self.log.commit_index, context, self.id)
        self._read_states.extend(self._reads.release(self.membership.voters))
        if self._reads.last_context:
            self._broadcast_heartbeat(context)

    # ----------------------------------------------------------------- time

    def _tick_election(self) -> None:
        self._election_elapsed += 1
        if self.is_voter and self._election_elapsed >= self._randomized_election_timeout:
            self._election_elapsed = 0
            self._campaign(pre_vote=self.config.pre_vote, transfer=False)

    def _tick_leader(self) -> None:
        self._heartbeat_elapsed += 1
        self._election_elapsed += 1
        if self.transfer_target != NO_NODE:
            self._transfer_elapsed += 1
            if self._transfer_elapsed >= self.config.election_ticks:
                self.transfer_target = NO_NODE  # the target did not take over in time
        if self._election_elapsed >= self.config.election_ticks:
            self._election_elapsed = 0
            if self.config.check_quorum and not self._check_quorum():
                self._become_follower(self.term, NO_NODE)
                return
        for node_id in self._peers():
            progress = self.progress[node_id]
            if progress.state is ProgressState.SNAPSHOT:
                progress.snapshot_ticks += 1
                if progress.snapshot_ticks >= self.config.election_ticks:
                    progress.become_probe()  # the snapshot or its answer was lost
        if self._heartbeat_elapsed >= self.config.heartbeat_ticks:
            self._heartbeat_elapsed = 0
            self._broadcast_heartbeat(self._reads.last_context)
        self._maybe_change_roles()

    def _check_quorum(self) -> bool:
        active = [self.id]
        for node_id, progress in sorted(self.progress.items()):
            if node_id != self.id and progress.recent_active:
                active.append(node_id)
            progress.recent_active = False
        return has_quorum(self.membership.voters, active)

    # ----------------------------------------------------------------- roles

    def _campaign(self, *, pre_vote: bool, transfer: bool) -> None:
        if pre_vote:
            self._become_pre_candidate()
            term = self.term + 1
            kind = MessageType.PRE_VOTE
        else:
            self._become_candidate()
            term = self.term
            kind = MessageType.VOTE
        self._votes = {self.id: True}
        if vote_result(self.membership.voters, self._votes) is VoteResult.WON:
            if pre_vote:
                self._campaign(pre_vote=False, transfer=transfer)
            else:
                self._become_leader()
            return
        for node_id in sorted(self.membership.voters):
            if node_id != self.id:
                self._send(
                    Message(
                        kind,
                        node_id,
                        self.id,
                        term,
                        index=self.log.last_index,
                        log_term=self.log.last_term,
                        transfer=transfer,
                    )
                )

    def _reset(self, term: int) -> None:
        if term != self.term:
            self.term = term
            self.vote = NO_NODE
            self._leader_match_index = 0  # a term has one leader: what matched it stays
        self.leader_id = NO_NODE
        self._election_elapsed = 0
        self._heartbeat_elapsed = 0
        self._reset_election_timeout()
        self._votes = {}
        self.progress = {}
        self.transfer_target = NO_NODE
        self._reads.clear()

    def _become_follower(self, term: int, leader_id: NodeId) -> None:
        self._reset(term)
        self.role = Role.FOLLOWER
        self.leader_id = leader_id

    def _become_pre_candidate(self) -> None:
        # Term and vote stay as they are: a pre-vote must not disturb anyone.
        self._reset(self.term)
        self.role = Role.PRE_CANDIDATE

    def _become_candidate(self) -> None:
        self._reset(self.term + 1)
        self.vote = self.id
        self.role = Role.CANDIDATE

    def _become_leader(self) -> None:
        self._reset(self.term)
        self.role = Role.LEADER
        self.leader_id = self.id
        self._reset_progress()
        # The EMPTY entry lets this term commit, and with it all earlier entries (section
        # 5.4.2); no membership change before it commits (the single-server change fix).
        self._pending_membership_index = self._append_and_broadcast(EntryKind.EMPTY, b"")

    def _reset_progress(self) -> None:
        last_index = self.log.last_index
        self.progress = {}
        for node_id in self.membership.members:
            progress = Progress(next_index=last_index + 1)
            if node_id == self.id:
                progress.match_index = self.log.stable_index
                progress.become_replicate()
                progress.next_index = last_index + 1
            self.progress[node_id] = progress

    def _reset_election_timeout(self) -> None:
        ticks = self.config.election_ticks
        self._randomized_election_timeout = ticks + self._rng.randrange(ticks)

    # ----------------------------------------------------------------- membership

    def _membership_at(self, index: int) -> Membership:
        membership = self._membership_base
        for entry_index, entry_membership in self._membership_history:
            if entry_index > index:
                break
            membership = entry_membership
        return membership

    def _apply_memberships_to_commit(self) -> None:
        """Membership entries take effect when committed (theory point 7)."""
        after = max(self._membership_scanned_index, self.log.snapshot_index)
        up_to = self.log.commit_index
        if up_to <= after:
            return
        self._membership_scanned_index = up_to
        changed = False
        for entry in self.log.slice(after + 1, up_to + 1):
            if entry.kind is EntryKind.MEMBERSHIP:
                self.membership = Membership.decode(entry.data)
                self._membership_history.append((entry.index, self.membership))
                changed = True
        if changed and self.role is Role.LEADER:
            self._membership_changed()

    def _membership_changed(self) -> None:
        members = self.membership.members
        if self.id not in self.membership.voters:
            self._become_follower(self.term, NO_NODE)
            return
        for node_id in list(self.progress):
            if node_id not in members:
                del self.progress[node_id]
        for node_id in members:
            if node_id not in self.progress:
                self.progress[node_id] = Progress(next_index=self.log.last_index + 1)
        if self.transfer_target not in self.membership.voters:
            self.transfer_target = NO_NODE
        # A smaller majority may already store later entries.
        if self._maybe_commit():
            self._broadcast_append()

    # ----------------------------------------------------------------- plumbing

    def _peers(self) -> list[NodeId]:
        return [node_id for node_id in sorted(self.progress) if node_id != self.id]

    def _send(self, message: Message) -> None:
        self._messages.append(message)
