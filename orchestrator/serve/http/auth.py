"""Optional API keys for the proxy: ``Authorization: Bearer <key>`` or ``x-api-key: <key>``.

The scheme word ``Bearer`` matches in any case (RFC 9110 section 11.1: auth schemes are
case-insensitive); ``x-api-key`` is what Anthropic clients send, and llama-server accepts it too
(``tools/server/server-http.cpp``). When both headers are present, ``Authorization`` is used.

Keys come from ``server.api_keys`` of the running config (``ApiKeys.following``: each request is
checked against the current snapshot, so a key a reload removes is refused at once); with none
configured every request passes.
The presented token is compared with every configured key using ``hmac.compare_digest`` (constant
time, and no early exit on the first match), so response timing reveals neither a key's prefix
nor which key matched. ``/health`` and ``/metrics`` are open unless ``server.auth_health`` /
``server.auth_metrics`` is set, so load balancers and Prometheus need no secret.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from orchestrator.errors import ApiError
from orchestrator.serve.http.hosts import host_of, is_loopback

if TYPE_CHECKING:
    from orchestrator.config.running import RunningConfig
    from orchestrator.config.schema import ServerConfig

_BEARER = b"bearer "


class ApiKeys:
    """The configured keys, and without keys the guard against web pages.

    Without keys, a web page the user visits could still drive the endpoint from the browser: a
    cross-site ``POST`` with ``Content-Type: text/plain`` needs no preflight, and DNS rebinding
    (a page's own name re-pointed at 127.0.0.1) makes it same-origin, able to read ``/status`` and
    restart models (Ollama's CVE-2024-28224 was this). So a keyless endpoint refuses (403) a request
    whose ``Origin`` is another site (neither loopback, nor the ``Host`` itself, nor in
    ``server.cors_origins``), and, when bound to loopback, one whose ``Host`` is a name other than
    ``localhost`` (an IP literal cannot be rebound). Clients that are not browsers send no
    ``Origin`` and ``127.0.0.1``/``localhost`` as ``Host``: they are not affected.

    Args:
        keys: the accepted tokens (``server.api_keys``); empty disables authentication.
        loopback_bind: the endpoint listens on a loopback address only (``server.host``).
        origins: ``server.cors_origins``, the web origins allowed to call.
    """

    def __init__(self, keys: Iterable[str], *, loopback_bind: bool = False, origins: Iterable[str] = ()) -> None:
        rule = _Rule(keys, loopback_bind, origins)
        self._rule: Callable[[], _Rule] = lambda: rule

    @classmethod
    def for_server(cls, server: ServerConfig) -> ApiKeys:
        """The keys and the keyless guard of one models.yaml ``server`` section, fixed."""
        return cls(server.api_keys, loopback_bind=is_loopback(server.host), origins=server.cors_origins)

    @classmethod
    def following(cls, running: RunningConfig) -> ApiKeys:
        """The keys and the keyless guard of the running config's current snapshot, per request."""
        keys = cls(())
        keys._rule = running.derive(lambda c: _Rule.of(c.server))
        return keys

    @property
    def enabled(self) -> bool:
        """Whether any key is configured."""
        return bool(self._rule().keys)

    def check(self, headers: Iterable[tuple[bytes, bytes]]) -> None:
        """Accept or refuse a request by its raw ASGI ``headers`` (lower-case names, bytes).

        Raises:
            ApiError: 401 ``invalid_api_key`` when keys are configured and the request has neither
                an ``Authorization: Bearer`` nor an ``x-api-key`` header, or its token matches
                none of them.
        """
        rule = self._rule()
        if not rule.keys:
            foreign = rule.foreign(headers)
            if foreign:
                raise ApiError(
                    403,
                    f"refused {foreign}: this endpoint has no API keys, so it answers only local clients, "
                    "not web pages of other sites; set server.api_keys (or list the site in server.cors_origins)",
                    code="foreign_origin",
                )
            return
        token = api_key = None
        for name, value in headers:
            if name == b"authorization" and token is None:
                if value[: len(_BEARER)].lower() == _BEARER:
                    token = value[len(_BEARER) :].strip()
            elif name == b"x-api-key" and api_key is None:
                api_key = value.strip()
        token = token if token is not None else api_key
        if token is None:
            raise ApiError(
                401, "missing API key: send 'Authorization: Bearer <key>' or 'x-api-key: <key>'", code="invalid_api_key"
            )
        ok = False
        for key in rule.keys:
            ok |= hmac.compare_digest(token, key)
        if not ok:
            raise ApiError(401, "invalid API key", code="invalid_api_key")


class _Rule:
    """One snapshot's keys (bytes) and keyless guard (loopback bind, allowed web origins)."""

    __slots__ = ("_loopback_bind", "_origins", "keys")

    def __init__(self, keys: Iterable[str], loopback_bind: bool, origins: Iterable[str]) -> None:
        self.keys = [k.encode() for k in keys]
        self._loopback_bind = loopback_bind
        self._origins = {o.rstrip("/") for o in origins}

    @classmethod
    def of(cls, server: ServerConfig) -> _Rule:
        return cls(server.api_keys, is_loopback(server.host), server.cors_origins)

    def foreign(self, headers: Iterable[tuple[bytes, bytes]]) -> str | None:
        """``"Origin 'x'"`` or ``"Host 'x'"`` for a request from another site's web page, else None."""
        host = origin = None
        for name, value in headers:
            if name == b"host":
                host = value.decode("latin-1")
            elif name == b"origin":
                origin = value.decode("latin-1")
        host_name = host_of(host or "").lower()
        if self._loopback_bind and host and not (is_loopback(host_name) or _is_ip(host_name)):
            return f"Host {host!r}"
        if origin is not None and origin.rstrip("/") not in self._origins:
            origin_host = (urlsplit(origin).hostname or "").lower()  # "null" (sandboxed, file://): no host
            if not origin_host or not (is_loopback(origin_host) or origin_host == host_name):
                return f"Origin {origin!r}"
        return None


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True
