"""TLS settings and the login name of a client certificate (`warren.runtime.tls`)."""

from __future__ import annotations

import pytest

from warren.runtime import config
from warren.runtime.config import Config
from warren.runtime.tls import login_name, server_context

CERTIFICATE = {
    "subject": (
        (("countryName", "GB"),),
        (("organizationName", "Acme, Inc."),),
        (("commonName", "guest"),),
    )
}


def test_the_login_name_is_the_distinguished_name_in_rfc_4514_order_or_the_common_name():
    assert login_name(CERTIFICATE, "distinguished_name") == "CN=guest,O=Acme\\, Inc.,C=GB"
    assert login_name(CERTIFICATE, "common_name") == "guest"
    assert login_name({}, "common_name") is None
    assert login_name(None, "distinguished_name") is None


def test_no_certificate_means_no_tls_and_half_a_certificate_is_an_error():
    assert server_context(Config()) is None
    with pytest.raises(ValueError, match="both"):
        server_context(Config(ssl_certfile="cert.pem"))
    with pytest.raises(ValueError, match="ssl_verify"):
        config.load(["--ssl-verify", "maybe"], environ={})


def test_boolean_settings_take_true_and_false_and_refuse_anything_else():
    loaded = config.load(["--ssl-fail-if-no-peer-cert", "true"], environ={})
    assert loaded.ssl_fail_if_no_peer_cert is True
    loaded = config.load([], environ={"WARREN_SSL_FAIL_IF_NO_PEER_CERT": "no"})
    assert loaded.ssl_fail_if_no_peer_cert is False
    with pytest.raises(config.ConfigError, match="ssl_fail_if_no_peer_cert"):
        config.load(["--ssl-fail-if-no-peer-cert", "perhaps"], environ={})
