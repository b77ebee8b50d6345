"""Worker 0's /metrics for a node of several workers: every worker's samples added up,
but for those every worker has whole (`warren.mgmt.metrics.merged`)."""

from __future__ import annotations

from warren.mgmt.metrics import merged

WORKER_0 = """# TYPE rabbitmq_connections gauge
rabbitmq_connections 2
rabbitmq_queues 3
rabbitmq_queue_messages_ready{vhost="/",queue="a b"} 5
rabbitmq_queue_messages_ready{vhost="/",queue="c"} 0
rabbitmq_process_max_fds 1024
rabbitmq_identity_info{rabbitmq_node="warren@localhost",rabbitmq_cluster="warren@localhost"} 1
"""
WORKER_1 = """# TYPE rabbitmq_connections gauge
rabbitmq_connections 1
rabbitmq_queues 3
rabbitmq_queue_messages_ready{vhost="/",queue="a b"} 0
rabbitmq_queue_messages_ready{vhost="/",queue="c"} 7
rabbitmq_process_max_fds 1024
rabbitmq_identity_info{rabbitmq_node="warren@localhost",rabbitmq_cluster="warren@localhost"} 1
"""


def test_samples_add_up_and_what_every_worker_has_whole_is_worker_zeros() -> None:
    assert merged(WORKER_0, [WORKER_1]) == WORKER_0.replace(
        "rabbitmq_connections 2", "rabbitmq_connections 3"
    ).replace('queue="c"} 0', 'queue="c"} 7')


def test_a_node_of_one_is_its_own_page() -> None:
    assert merged(WORKER_0, []) == WORKER_0
