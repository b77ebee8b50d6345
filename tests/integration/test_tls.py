"""TLS listeners of a private Warren node: AMQPS with pika, a client-certificate (EXTERNAL)
login, a refused client without a certificate, and the management API over HTTPS.

A throwaway CA and certificates come from trustme for every test module run. These need a
node of their own (configured with the certificates), so they only run against Warren.
"""

from __future__ import annotations

import json
import ssl
import urllib.request
from base64 import b64encode
from pathlib import Path

import pika
import pika.credentials
import pika.exceptions
import pytest
import trustme
from pika.adapters.blocking_connection import BlockingConnection

pytestmark = pytest.mark.warren_only


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def tls_node(ca: trustme.CA, tmp_path: Path, server_factory, port_factory):
    """A node with TLS on fresh ports, verifying client certificates if they come."""
    server_cert = ca.issue_cert("localhost", "127.0.0.1")
    cert, key, ca_file = tmp_path / "server.pem", tmp_path / "server.key", tmp_path / "ca.pem"
    server_cert.cert_chain_pems[0].write_to_path(str(cert))
    for blob in server_cert.cert_chain_pems[1:]:
        blob.write_to_path(str(cert), append=True)
    server_cert.private_key_pem.write_to_path(str(key))
    ca.cert_pem.write_to_path(str(ca_file))

    def start(**settings: object):
        ports = {"ssl_port": port_factory(), "management_ssl_port": port_factory()}
        server = server_factory(
            ssl_certfile=cert,
            ssl_keyfile=key,
            ssl_cacertfile=ca_file,
            ssl_verify="verify_peer",
            **ports,
            **settings,
        )
        return server, ports

    return start


def client_context(ca: trustme.CA, common_name: str | None) -> ssl.SSLContext:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    if common_name is not None:
        ca.issue_cert(common_name=common_name).configure_cert(context)
    return context


def amqps(port: int, context: ssl.SSLContext, credentials=None) -> BlockingConnection:
    parameters = pika.ConnectionParameters(
        "127.0.0.1",
        port,
        ssl_options=pika.SSLOptions(context, "localhost"),
        credentials=credentials or pika.PlainCredentials("guest", "guest"),
        connection_attempts=1,
    )
    return BlockingConnection(parameters)


def test_amqps_carries_messages_with_a_password_login(ca, tls_node):
    _server, ports = tls_node()
    connection = amqps(ports["ssl_port"], client_context(ca, None))
    try:
        channel = connection.channel()
        queue = channel.queue_declare("", exclusive=True).method.queue
        channel.confirm_delivery()
        channel.basic_publish("", queue, b"over tls")
        _method, _properties, body = channel.basic_get(queue, auto_ack=True)
        assert body == b"over tls"
    finally:
        connection.close()


def test_a_client_certificate_logs_in_with_external(ca, tls_node):
    _server, ports = tls_node(ssl_cert_login_from="common_name")
    connection = amqps(
        ports["ssl_port"], client_context(ca, "guest"), pika.credentials.ExternalCredentials()
    )
    try:
        assert connection.is_open
        channel = connection.channel()
        assert channel.queue_declare("", exclusive=True).method.queue
    finally:
        connection.close()


def test_external_is_refused_for_a_certificate_of_an_unknown_user(ca, tls_node):
    _server, ports = tls_node(ssl_cert_login_from="common_name")
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        amqps(
            ports["ssl_port"],
            client_context(ca, "mallory"),
            pika.credentials.ExternalCredentials(),
        )


def test_a_client_without_a_certificate_is_refused_when_one_is_required(ca, tls_node):
    _server, ports = tls_node(ssl_fail_if_no_peer_cert="true")
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        amqps(ports["ssl_port"], client_context(ca, None))
    amqps(ports["ssl_port"], client_context(ca, "guest")).close()


def test_the_management_api_answers_over_https(ca, tls_node):
    _server, ports = tls_node()
    request = urllib.request.Request(
        f"https://localhost:{ports['management_ssl_port']}/api/overview",
        headers={"Authorization": "Basic " + b64encode(b"guest:guest").decode()},
    )
    with urllib.request.urlopen(request, context=client_context(ca, None), timeout=10) as reply:
        assert reply.status == 200
        assert "node" in json.loads(reply.read())
