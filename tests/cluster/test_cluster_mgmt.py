"""The management API on a cluster: one cluster name for all nodes, topic permissions
that hold on every node, a classic queue's counts on nodes that are not its home, a
quorum queue's on nodes without a replica, and every node in /api/nodes."""

from __future__ import annotations

import threading
import urllib.error
from collections.abc import Mapping
from urllib.parse import quote

import pika
import pika.exceptions
import pytest

from tests.cluster.conftest import NAMES, connect, revived, until
from warren.testing.cluster import LocalCluster

OTHERS = ("warren-b", "warren-c")


def test_a_classic_queue_shows_its_homes_counts_on_every_node(
    cluster: LocalCluster, name: str
) -> None:
    home = connect(cluster, "warren-a")
    channel = home.channel()
    channel.queue_declare(name)
    for number in range(3):
        channel.basic_publish("", name, b"m%d" % number)
    until(lambda: _counts(cluster, "warren-c", name), bool)  # the queue reached c
    consumer = connect(cluster, "warren-c")
    try:
        consuming = consumer.channel()
        consuming.basic_qos(prefetch_count=1)
        consuming.basic_consume(name, lambda *args: None)
        want = {
            "node": "warren-a",
            "messages": 3,
            "messages_ready": 2,
            "messages_unacknowledged": 1,
            "message_bytes": 6,
            "consumers": 1,
        }
        _shown_on_every_node(cluster, name, want)
    finally:
        consumer.close()
        channel.queue_delete(name)
        home.close()


@pytest.mark.warren_only
def test_a_quorum_queue_shows_its_leaders_counts_on_nodes_without_a_replica(
    cluster: LocalCluster, name: str
) -> None:
    # As RabbitMQ shows a quorum queue's metrics from its leader on every node; a node
    # without a replica holds no copy of the queue's state to count.
    leader = connect(cluster, "warren-a")
    channel = leader.channel()
    channel.queue_declare(
        name, durable=True, arguments={"x-queue-type": "quorum", "x-quorum-initial-group-size": 1}
    )
    channel.confirm_delivery()
    for number in range(3):
        channel.basic_publish("", name, b"m%d" % number)
    consumer = connect(cluster, "warren-c")
    try:
        consuming = consumer.channel()
        consuming.basic_qos(prefetch_count=1)
        consuming.basic_consume(name, lambda *args: None)
        want = {"messages": 3, "messages_ready": 2, "messages_unacknowledged": 1, "consumers": 1}
        _shown_on_every_node(cluster, name, want)
    finally:
        consumer.close()
        channel.queue_delete(name)
        leader.close()


def _shown_on_every_node(cluster: LocalCluster, queue: str, want: Mapping[str, object]) -> None:
    """Every node's API shows `want` (some of `_counts`' keys), and lists the queue so."""
    for node in ("warren-a", *OTHERS):

        def shown(node: str = node) -> dict[str, object] | None:
            counts = _counts(cluster, node, queue)
            return counts and {key: counts[key] for key in want}

        assert until(shown, lambda got: got == want) == want, node
    listed = cluster.api("warren-b", "/api/queues/%2F")
    assert {q["name"]: q["messages"] for q in listed}[queue] == want["messages"]


def _counts(cluster: LocalCluster, node: str, queue: str) -> dict[str, object] | None:
    try:
        shown = cluster.queue(node, queue)
    except urllib.error.HTTPError as missing:
        missing.close()
        return None  # not there yet
    keys = ("node", "messages", "messages_ready", "messages_unacknowledged", "message_bytes")
    return {key: shown[key] for key in (*keys, "consumers")}


def test_one_cluster_name_for_every_node(cluster: LocalCluster) -> None:
    assert cluster.api("warren-a", "/api/cluster-name", "PUT", {"name": "blue"}) is None
    for node in ("warren-a", *OTHERS):
        got = until(
            lambda node=node: cluster.api(node, "/api/cluster-name"), lambda g: g["name"] == "blue"
        )
        assert got == {"name": "blue"}, node
        assert cluster.api(node, "/api/overview")["cluster_name"] == "blue"


def test_a_topic_permission_set_on_one_node_holds_on_the_others(
    cluster: LocalCluster, name: str
) -> None:
    user = f"{name}.user"
    cluster.api("warren-a", f"/api/users/{user}", "PUT", {"password": "pw", "tags": ""})
    full = {"configure": ".*", "write": ".*", "read": ".*"}
    cluster.api("warren-a", f"/api/permissions/%2F/{user}", "PUT", full)
    topic = {"exchange": "amq.topic", "write": "^a", "read": ".*"}
    cluster.api("warren-a", f"/api/topic-permissions/%2F/{user}", "PUT", topic)
    try:
        for node in OTHERS:
            until(
                lambda node=node: cluster.api(node, "/api/topic-permissions"),
                lambda found: any(p["user"] == user for p in found),
            )
            port = cluster.nodes[node].port
            parameters = pika.ConnectionParameters(
                "127.0.0.1", port, "/", pika.PlainCredentials(user, "pw")
            )
            connection = pika.BlockingConnection(parameters)
            channel = connection.channel()
            channel.confirm_delivery()
            channel.basic_publish("amq.topic", "a.b", b"allowed")
            with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
                channel.basic_publish("amq.topic", "b.c", b"refused")
            assert closed.value.reply_code == 403
            connection.close()
    finally:
        cluster.api("warren-a", f"/api/users/{user}", "DELETE")


def test_the_node_health_check_names_any_node_of_the_cluster(cluster: LocalCluster) -> None:
    for node in ("warren-a", *OTHERS):
        assert cluster.api("warren-a", f"/api/healthchecks/node/{node}") == {"status": "ok"}
    with pytest.raises(urllib.error.HTTPError) as missing:
        cluster.api("warren-a", "/api/healthchecks/node/nope@nowhere")
    missing.value.close()
    assert missing.value.code == 404


def test_every_node_lists_every_node_and_names_one_that_is_down(cluster: LocalCluster) -> None:
    nodes = ["warren-a", *OTHERS]
    for asked in nodes:
        listed = cluster.api(asked, "/api/nodes")
        assert [(n["name"], n["running"]) for n in listed] == [(n, True) for n in nodes]
        assert all(n["mem_limit"] > 0 and n["os_pid"] for n in listed), asked
        assert cluster.api(asked, "/api/nodes/warren-b")["name"] == "warren-b"
    with revived(cluster):
        cluster.kill("warren-c")
        down = {"name": "warren-c", "type": "disc", "running": False}
        listed = until(lambda: cluster.api("warren-a", "/api/nodes"), lambda got: down in got)
        assert [n["name"] for n in listed] == nodes and down in listed
        assert cluster.api("warren-a", "/api/nodes/warren-c") == down


def test_an_exchange_and_binding_made_through_the_api_route_from_every_node_at_once(
    cluster: LocalCluster, name: str
) -> None:
    """The API answers an exchange's PUT and a binding's POST once every node applied
    them: a publish with mandatory through either other node right after is routed; an
    inequivalent PUT on another node is refused, and the exchange stays as it was."""
    home = connect(cluster, "warren-a")
    channel = home.channel()
    channel.queue_declare(name)
    exchange = f"{name}.x"
    cluster.api("warren-a", f"/api/exchanges/%2F/{exchange}", "PUT", {"type": "topic"})
    bind = {"routing_key": "k.#"}
    cluster.api("warren-a", f"/api/bindings/%2F/e/{exchange}/q/{name}", "POST", bind)
    publishers = [connect(cluster, node) for node in OTHERS]
    try:
        for publisher in publishers:
            on = publisher.channel()
            on.confirm_delivery()  # a returned publish raises UnroutableError
            on.basic_publish(exchange, "k.1", b"routed", mandatory=True)
        with pytest.raises(urllib.error.HTTPError) as refused:
            path = f"/api/exchanges/%2F/{exchange}"
            cluster.api("warren-b", path, "PUT", {"type": "fanout"})
        refused.value.close()
        assert refused.value.code == 400
        types = {cluster.api(node, f"/api/exchanges/%2F/{exchange}")["type"] for node in OTHERS}
        assert types == {"topic"}
        assert channel.queue_declare(name, passive=True).method.message_count == 2
    finally:
        for publisher in publishers:
            publisher.close()
        cluster.api("warren-a", f"/api/exchanges/%2F/{exchange}", "DELETE")
        channel.queue_delete(name)
        home.close()


def test_a_vhost_user_and_permission_made_through_the_api_serve_every_node_at_once(
    cluster: LocalCluster, name: str
) -> None:
    """Each API change is answered once every node applied it: a vhost made on one node,
    a user on another and its permission on a third let the user work on any node right
    after; the vhost's delete is done everywhere once answered."""
    vhost = quote(name, safe="")
    cluster.api("warren-a", f"/api/vhosts/{vhost}", "PUT", {"description": "d"})
    cluster.api("warren-b", f"/api/users/{name}", "PUT", {"password": "pw", "tags": ""})
    every = {"configure": ".*", "write": ".*", "read": ".*"}
    cluster.api("warren-c", f"/api/permissions/{vhost}/{name}", "PUT", every)
    for node in ("warren-a", *OTHERS):
        port = cluster.nodes[node].port
        params = pika.URLParameters(f"amqp://{name}:pw@127.0.0.1:{port}/{vhost}")
        connection = pika.BlockingConnection(params)
        connection.channel().queue_declare(f"{name}-{node}")
        connection.close()
    cluster.api("warren-b", f"/api/vhosts/{vhost}", "DELETE")
    for node in ("warren-a", *OTHERS):
        assert name not in {v["name"] for v in cluster.api(node, "/api/vhosts")}, node
    cluster.api("warren-a", f"/api/users/{name}", "DELETE")


def test_one_queue_put_through_two_nodes_apis_at_once_is_the_first_everywhere(
    cluster: LocalCluster, name: str
) -> None:
    """As a channel's declare: the PUT first in the metadata log makes the classic queue
    (its home the node that answered it), the other inequivalent one is refused with 400;
    a DELETE through the home's API is done on every node once answered."""
    for round_ in range(6):
        queue = f"{name}-{round_}"
        path = f"/api/queues/%2F/{queue}"
        answers: dict[str, int] = {}
        ready = threading.Barrier(2)
        writers = [
            threading.Thread(
                target=_put_at_once, args=(cluster, node, path, durable, ready, answers)
            )
            for node, durable in (("warren-a", True), ("warren-b", False))
        ]
        for writer in writers:
            writer.start()
        for writer in writers:
            writer.join()
        assert sorted(answers.values()) == [201, 400], answers
        home = "warren-a" if answers["warren-a"] == 201 else "warren-b"
        seen = {
            (cluster.api(node, path)["node"], cluster.api(node, path)["durable"]) for node in NAMES
        }
        assert seen == {(home, home == "warren-a")}
        cluster.api(home, path, "DELETE")
        for node in NAMES:
            assert queue not in {q["name"] for q in cluster.api(node, "/api/queues")}, node


def _put_at_once(
    cluster: LocalCluster,
    node: str,
    path: str,
    durable: bool,
    ready: threading.Barrier,
    answers: dict[str, int],
) -> None:
    """PUT once the other thread is ready too; record 201, or the refusal's status."""
    ready.wait()
    try:
        cluster.api(node, path, "PUT", {"durable": durable})
        answers[node] = 201
    except urllib.error.HTTPError as refused:
        refused.close()
        answers[node] = refused.code


def test_an_import_and_a_queue_put_on_two_nodes_at_once_end_with_one_queue_everywhere(
    cluster: LocalCluster, name: str
) -> None:
    """An import of definitions goes through the metadata log as the API's own changes do:
    racing a PUT of the same queue through another node, every node ends with the one
    queue first in the log. The import leaves a queue that exists as it is (as
    RabbitMQ's does): 204 either way; the PUT is refused (400) if the import's
    inequivalent queue came first."""
    for round_ in range(6):
        queue = f"{name}-{round_}"
        path = f"/api/queues/%2F/{queue}"
        document = {"queues": [{"name": queue, "vhost": "/", "durable": True, "arguments": {}}]}
        answers: dict[str, int] = {}
        ready = threading.Barrier(2)
        writers = [
            threading.Thread(target=_import_at_once, args=(cluster, document, ready, answers)),
            threading.Thread(
                target=_put_at_once, args=(cluster, "warren-b", path, False, ready, answers)
            ),
        ]
        for writer in writers:
            writer.start()
        for writer in writers:
            writer.join()
        seen = {
            (cluster.api(node, path)["node"], cluster.api(node, path)["durable"]) for node in NAMES
        }
        assert len(seen) == 1, seen
        ((home, durable),) = seen
        assert durable == (home == "warren-a")
        assert answers == {"warren-a": 204, "warren-b": 400 if home == "warren-a" else 201}
        cluster.api(home, path, "DELETE")


def _import_at_once(
    cluster: LocalCluster, document: object, ready: threading.Barrier, answers: dict[str, int]
) -> None:
    """POST /api/definitions to warren-a once the other thread is ready too."""
    ready.wait()
    cluster.api("warren-a", "/api/definitions", "POST", document)
    answers["warren-a"] = 204


def test_a_queue_deleted_through_the_api_is_gone_from_every_node_once_answered(
    cluster: LocalCluster, name: str
) -> None:
    """The API's DELETE of a quorum queue, and of a classic queue through a node that is
    not its home, answers once the delete is committed, as queue.delete-ok does: right
    after, no node shows the queue and a passive declare on any node is refused."""
    quorum, classic = f"{name}.quorum", f"{name}.classic"
    home = connect(cluster, "warren-a")
    channel = home.channel()
    channel.queue_declare(quorum, durable=True, arguments={"x-queue-type": "quorum"})
    channel.queue_declare(classic, durable=True)
    home.close()
    for node in NAMES:  # the declare-ok came once every node applied it
        for queue in (quorum, classic):
            assert cluster.queue(node, queue)["name"] == queue
    cluster.api("warren-b", f"/api/queues/%2F/{quorum}", "DELETE")
    cluster.api("warren-b", f"/api/queues/%2F/{classic}", "DELETE")  # its home is warren-a
    for node in NAMES:
        connection = connect(cluster, node)
        try:
            for queue in (quorum, classic):
                with pytest.raises(urllib.error.HTTPError) as missing:
                    cluster.queue(node, queue)
                missing.value.close()
                assert missing.value.code == 404, (node, queue)
                with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
                    connection.channel().queue_declare(queue, passive=True)
                assert refused.value.reply_code == 404, (node, queue)
        finally:
            connection.close()
