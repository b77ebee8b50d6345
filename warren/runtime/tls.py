"""TLS for the node's listeners, and the login name a client certificate carries.

Theory of operation (after RabbitMQ's TLS guide and its rabbitmq_auth_mechanism_ssl plugin):
1. `server_context(config)` builds one server-side `ssl.SSLContext` from `ssl_certfile` and
   `ssl_keyfile`, or returns None when they are not set: then the node has no TLS
   listeners. The AMQPS listener (`ssl_port`) and the HTTPS management listener
   (`management_ssl_port`) share it. TLS 1.2 is the oldest version accepted.
2. Client certificates: with ``ssl_verify = verify_peer`` a certificate the client offers is
   verified against `ssl_cacertfile`; with `ssl_fail_if_no_peer_cert` a client without one
   is refused during the TLS handshake. With ``verify_none`` none is asked for.
3. A connection with a verified client certificate may log in with the SASL mechanism
   EXTERNAL: `login_name` takes the user name from the certificate's subject, either the
   whole distinguished name in RFC 4514 order (``CN=guest,O=client``, RabbitMQ's default
   ``ssl_cert_login_from = distinguished_name``) or its common name. The user must exist;
   no password is checked.
"""

from __future__ import annotations

import ssl
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from warren.runtime.config import Config

# RFC 4514 short names of the attributes Python's `getpeercert` spells out
_SHORT_NAMES = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}


def server_context(config: Config) -> ssl.SSLContext | None:
    """The listeners' TLS context, or None without a certificate (rule 1). Raises
    ValueError, one line naming the setting and the fix, for settings or files it cannot
    use (`config.load` has already checked `ssl_verify` and `ssl_cert_login_from`)."""
    if not config.ssl_certfile and not config.ssl_keyfile:
        return None
    if not config.ssl_certfile or not config.ssl_keyfile:
        raise ValueError("TLS needs both ssl_certfile and ssl_keyfile: set the other one too")
    verify_peer = config.ssl_verify == "verify_peer"
    if verify_peer and not config.ssl_cacertfile:
        raise ValueError("ssl_verify = verify_peer needs ssl_cacertfile: set it to a CA bundle")
    files = {"ssl_certfile": config.ssl_certfile, "ssl_keyfile": config.ssl_keyfile}
    if verify_peer:
        files["ssl_cacertfile"] = config.ssl_cacertfile
    for setting, path in files.items():
        try:
            open(path, "rb").close()
        except OSError as error:
            raise ValueError(
                f"cannot read {setting} {path}: {error.strerror}; fix the path or its permissions"
            ) from None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(config.ssl_certfile, config.ssl_keyfile)
        if verify_peer:
            context.load_verify_locations(config.ssl_cacertfile)
    except ssl.SSLError as error:
        raise ValueError(
            f"cannot load the TLS certificate ({error.reason or error}): ssl_certfile"
            f" {config.ssl_certfile} and ssl_keyfile {config.ssl_keyfile} must be a PEM"
            " certificate and its private key"
            + (
                f", ssl_cacertfile {config.ssl_cacertfile} PEM CA certificates"
                if verify_peer
                else ""
            )
        ) from None
    if verify_peer:
        context.verify_mode = (
            ssl.CERT_REQUIRED if config.ssl_fail_if_no_peer_cert else ssl.CERT_OPTIONAL
        )
    return context


def login_name(peer_certificate: dict[str, Any] | None, login_from: str) -> str | None:
    """The EXTERNAL login name of a verified client certificate (rule 3), or None."""
    if not peer_certificate:
        return None
    subject = peer_certificate.get("subject", ())
    attributes = [(name, value) for rdn in subject for name, value in rdn]
    if login_from == "common_name":
        names = [value for name, value in attributes if name == "commonName"]
        return names[-1] if names else None
    return ",".join(
        f"{_SHORT_NAMES.get(name, name)}={_escape(value)}" for name, value in reversed(attributes)
    )


def _escape(value: str) -> str:
    """RFC 4514 escaping of an attribute value."""
    escaped = "".join("\\" + char if char in ',+"\\<>;=' else char for char in value)
    if escaped.startswith((" ", "#")):
        escaped = "\\" + escaped
    if escaped.endswith(" ") and not escaped.endswith("\\ "):
        escaped = escaped[:-1] + "\\ "
    return escaped
