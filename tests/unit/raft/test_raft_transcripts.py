"""Data-driven transcripts of tricky interleavings (after etcd-io/raft's interaction tests).

Each file in `transcripts/` is a sequence of commands, each a line starting with ``> ``,
followed by the output it must print. Messages print as they are delivered, so a
transcript shows the exact interleaving it tests. To regenerate the expected output after
an intended change, run with ``WARREN_REWRITE_TRANSCRIPTS=1`` and review the diff.

Commands: ``cluster voters=1,2,3 [others=4] [prevote=off] [checkquorum=off] [election=N]
[batch=N]``, ``campaign N``, ``tick N [count]``, ``propose N data``, ``deliver [from=N]
[to=N]``, ``drop [from=N] [to=N]``, ``stabilize``, ``partition 1,2 3``, ``isolate N``,
``heal``, ``crash N``, ``restart N``, ``status``, ``log N``, ``compact N``, ``transfer N M``,
``read N context``, ``add N M``, ``remove N M``, ``applied N``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from warren.raft import MembershipChange, Message, MessageType, Role
from warren.testing.raft_cluster import Cluster

TRANSCRIPTS = Path(__file__).parent / "transcripts"


def describe(m: Message) -> str:
    text = f"{m.sender}->{m.to} {m.type.value} term={m.term}"
    kind = m.type
    if kind is MessageType.APPEND:
        batch = " ".join(f"{e.index}@{e.term}" for e in m.entries)
        text += f" prev={m.index}@{m.log_term} entries=[{batch}] commit={m.commit}"
    elif kind is MessageType.APPEND_RESPONSE:
        text += f" index={m.index}"
        if m.reject:
            text += f" reject hint={m.reject_hint}@{m.log_term}"
    elif kind in (MessageType.VOTE, MessageType.PRE_VOTE):
        text += f" last={m.index}@{m.log_term}" + (" transfer" if m.transfer else "")
    elif kind in (MessageType.VOTE_RESPONSE, MessageType.PRE_VOTE_RESPONSE):
        text += " reject" if m.reject else " granted"
    elif kind in (MessageType.HEARTBEAT, MessageType.HEARTBEAT_RESPONSE):
        if kind is MessageType.HEARTBEAT:
            text += f" commit={m.commit}"
        if m.context:
            text += f" context={m.context.decode()}"
    elif kind is MessageType.SNAPSHOT and m.snapshot is not None:
        text += f" snapshot={m.snapshot.index}@{m.snapshot.term}"
    return text


class Runner:
    def __init__(self) -> None:
        self.cluster: Cluster | None = None

    @property
    def c(self) -> Cluster:
        assert self.cluster is not None, "transcript must start with `cluster`"
        return self.cluster

    def run(self, line: str) -> list[str]:
        words = line.split()
        name, args = words[0], words[1:]
        options = dict(a.split("=", 1) for a in args if "=" in a)
        plain = [a for a in args if "=" not in a]
        method = getattr(self, "do_" + name)
        result: list[str] = method(plain, options)
        return result

    def _delivered_since(self, start: int) -> list[str]:
        return [describe(m) for m in self.c.delivered[start:]]

    def do_cluster(self, args: list[str], options: dict[str, str]) -> list[str]:
        voters = [int(n) for n in options["voters"].split(",")]
        others = [int(n) for n in options["others"].split(",")] if "others" in options else []
        self.cluster = Cluster(
            voters,
            others=others,
            pre_vote=options.get("prevote", "on") == "on",
            check_quorum=options.get("checkquorum", "on") == "on",
            election_ticks=int(options.get("election", "10")),
            max_entries_per_append=int(options.get("batch", "64")),
        )
        return []

    def do_campaign(self, args: list[str], options: dict[str, str]) -> list[str]:
        self.c.campaign(int(args[0]))
        return []

    def do_tick(self, args: list[str], options: dict[str, str]) -> list[str]:
        self.c.tick(int(args[0]), int(args[1]) if len(args) > 1 else 1)
        return []

    def do_propose(self, args: list[str], options: dict[str, str]) -> list[str]:
        index = self.c.propose(int(args[0]), args[1].encode())
        return [f"index={index}" if index is not None else "refused"]

    def _filter(self, options: dict[str, str]) -> dict[str, int]:
        return {
            key: int(options[short])
            for short, key in (("from", "sender"), ("to", "to"))
            if short in options
        }

    def do_deliver(self, args: list[str], options: dict[str, str]) -> list[str]:
        start = len(self.c.delivered)
        self.c.deliver(**self._filter(options))
        return self._delivered_since(start)

    def do_drop(self, args: list[str], options: dict[str, str]) -> list[str]:
        return [f"dropped {self.c.drop(**self._filter(options))}"]

    def do_stabilize(self, args: list[str], options: dict[str, str]) -> list[str]:
        start = len(self.c.delivered)
        self.c.stabilize()
        return self._delivered_since(start)

    def do_partition(self, args: list[str], options: dict[str, str]) -> list[str]:
        self.c.partition(*[[int(n) for n in group.split(",")] for group in args])
        return []

    def do_isolate(self, args: list[str], options: dict[str, str]) -> list[str]:
        self.c.isolate(int(args[0]))
        return []

    def do_heal(self, args: list[str], options: dict[str, str]) -> list[str]:
        self.c.heal()
        return []

    def do_crash(self, args: list[str], options: dict[str, str]) -> list[str]:
        self.c.crash(int(args[0]))
        return []

    def do_restart(self, args: list[str], options: dict[str, str]) -> list[str]:
        self.c.restart(int(args[0]))
        return []

    def do_status(self, args: list[str], options: dict[str, str]) -> list[str]:
        lines = []
        for node_id, node in sorted(self.c.nodes.items()):
            voters = ",".join(str(v) for v in sorted(node.membership.voters))
            learners = ",".join(str(v) for v in sorted(node.membership.learners))
            lines.append(
                f"n{node_id} {node.role.value} term={node.term} vote={node.vote} "
                f"lead={node.leader_id} last={node.log.last_index} commit={node.log.commit_index} "
                f"applied={node.log.applied} voters={voters} learners={learners or '-'}"
            )
        return lines

    def do_log(self, args: list[str], options: dict[str, str]) -> list[str]:
        node = self.c[int(args[0])]
        log = node.log
        text = " ".join(f"{e.index}@{e.term}" for e in log.entries)
        return [f"snapshot={log.snapshot_index}@{log.snapshot_term} entries=[{text}]"]

    def do_compact(self, args: list[str], options: dict[str, str]) -> list[str]:
        from warren.raft import compact

        node_id = int(args[0])
        node = self.c[node_id]
        snapshot = compact(node, self.c.storage[node_id], node.log.applied, b"state")
        return [f"snapshot={snapshot.index}@{snapshot.term}"]

    def do_transfer(self, args: list[str], options: dict[str, str]) -> list[str]:
        accepted = self.c[int(args[0])].transfer_leadership(int(args[1]))
        self.c.run(int(args[0]))
        return [] if accepted else ["refused"]

    def do_read(self, args: list[str], options: dict[str, str]) -> list[str]:
        accepted = self.c[int(args[0])].read_index(args[1].encode())
        self.c.run(int(args[0]))
        return [] if accepted else ["refused"]

    def _change(self, args: list[str], change: MembershipChange) -> list[str]:
        index = self.c[int(args[0])].propose_membership(change, int(args[1]))
        self.c.run(int(args[0]))
        return [f"index={index}" if index is not None else "refused"]

    def do_add(self, args: list[str], options: dict[str, str]) -> list[str]:
        return self._change(args, MembershipChange.ADD_LEARNER)

    def do_remove(self, args: list[str], options: dict[str, str]) -> list[str]:
        return self._change(args, MembershipChange.REMOVE)

    def do_applied(self, args: list[str], options: dict[str, str]) -> list[str]:
        machine = self.c.machines[int(args[0])]
        data = " ".join(d.decode() for d in machine.data)
        reads = " ".join(f"{r.context.decode()}@{r.index}" for r in machine.reads)
        return [f"data=[{data}] reads=[{reads}]"]


def parse(text: str) -> list[tuple[str, list[str]]]:
    blocks: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("> "):
            blocks.append((line[2:].strip(), []))
        elif line.startswith("#") or not line.strip():
            continue
        else:
            assert blocks, f"output before the first command: {line!r}"
            blocks[-1][1].append(line)
    return blocks


def render(text: str, outputs: list[list[str]]) -> str:
    """The transcript with each command's expected output replaced by `outputs`."""
    lines: list[str] = []
    position = -1
    for line in text.splitlines():
        if line.startswith("> "):
            position += 1
            lines.append(line)
            lines.extend(outputs[position])
        elif line.startswith("#") or not line.strip():
            lines.append(line)
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("path", sorted(TRANSCRIPTS.glob("*.txt")), ids=lambda p: p.stem)
def test_transcript(path: Path) -> None:
    text = path.read_text()
    runner = Runner()
    outputs = []
    for command, expected in parse(text):
        actual = runner.run(command)
        outputs.append(actual)
        if not os.environ.get("WARREN_REWRITE_TRANSCRIPTS"):
            assert actual == expected, f"{path.name}: `> {command}`"
    if os.environ.get("WARREN_REWRITE_TRANSCRIPTS"):
        path.write_text(render(text, outputs))


def test_transcripts_exist() -> None:
    assert len(list(TRANSCRIPTS.glob("*.txt"))) >= 4
    assert Role.LEADER  # the runner prints roles by their value
