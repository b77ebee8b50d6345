"""A small blocking HTTP client for the management API (urllib, JSON in and out).

Theory of operation:
1. A `Client` holds the base URL and the basic-auth credentials taken from it (guest/guest
   when it has none). Paths are given as segments and each one is percent-encoded
   whole, so the vhost ``/`` travels as ``%2F`` as the API expects.
2. Every call returns a `Reply` (status and decoded JSON, or None for an empty body),
   whatever the status; only an unreachable server raises (`Unreachable`).
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote, urlencode, urlsplit

DEFAULT_URL = "http://127.0.0.1:15672"


class Unreachable(Exception):
    """The management API did not answer."""


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    body: Any

    @property
    def reason(self) -> str:
        """The ``reason`` of a RabbitMQ error body (empty if there is none)."""
        if isinstance(self.body, dict):
            return str(self.body.get("reason", ""))
        return ""


class Client:
    def __init__(self, url: str, timeout_s: float) -> None:
        parts = urlsplit(url)
        user = unquote(parts.username) if parts.username is not None else "guest"
        password = unquote(parts.password) if parts.password is not None else "guest"
        host = parts.hostname or "127.0.0.1"
        if ":" in host:
            host = f"[{host}]"
        port = f":{parts.port}" if parts.port else ""
        self.base = f"{parts.scheme or 'http'}://{host}{port}{parts.path.rstrip('/')}"
        token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
        self._authorization = f"Basic {token}"
        self.timeout_s = timeout_s

    def get(self, *segments: str, query: dict[str, str] | None = None) -> Reply:
        return self.request("GET", segments, query=query)

    def put(self, segments: tuple[str, ...], body: Any) -> Reply:
        return self.request("PUT", segments, body)

    def post(self, segments: tuple[str, ...], body: Any) -> Reply:
        return self.request("POST", segments, body)

    def delete(self, *segments: str) -> Reply:
        return self.request("DELETE", segments)

    def request(
        self,
        method: str,
        segments: tuple[str, ...],
        body: Any = None,
        *,
        query: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Reply:
        path = "/api/" + "/".join(quote(segment, safe="") for segment in segments)
        if query:
            path += "?" + urlencode(query)
        data = None if body is None else json.dumps(body).encode("utf-8")
        sent = {"Authorization": self._authorization}
        if method != "DELETE":  # RabbitMQ answers 406 to a purge that asks for JSON back
            sent["Accept"] = "application/json"
        if data is not None:
            sent["Content-Type"] = "application/json"
        sent.update(headers or {})
        request = urllib.request.Request(self.base + path, data, sent, method=method)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return Reply(response.status, _decode(response.read()))
        except urllib.error.HTTPError as failure:
            return Reply(failure.code, _decode(failure.read()))
        except (urllib.error.URLError, OSError) as failure:
            raise Unreachable(f"{self.base}: {failure}") from failure


def _decode(raw: bytes) -> Any:
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace")
