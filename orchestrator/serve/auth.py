"""Optional API keys for the proxy: ``Authorization: Bearer <key>`` or ``x-api-key: <key>``.

The scheme word ``Bearer`` matches in any case (RFC 9110 section 11.1: auth schemes are
case-insensitive); ``x-api-key`` is what Anthropic clients send, and llama-server accepts it too
(``tools/server/server-http.cpp``). When both headers are present, ``Authorization`` is used.

Keys come from ``server.api_keys`` in models.yaml; with none configured every request passes.
The presented token is compared with every configured key using ``hmac.compare_digest`` (constant
time, and no early exit on the first match), so response timing reveals neither a key's prefix
nor which key matched. ``/health`` and ``/metrics`` are open unless ``server.auth_health`` /
``server.auth_metrics`` is set, so load balancers and Prometheus need no secret.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable

from orchestrator.errors import ApiError

_BEARER = b"bearer "


class ApiKeys:
    """The configured keys.

    Args:
        keys: the accepted tokens (``server.api_keys``); empty disables authentication.
    """

    def __init__(self, keys: Iterable[str]) -> None:
        self._keys = [k.encode() for k in keys]

    @property
    def enabled(self) -> bool:
        """Whether any key is configured."""
        return bool(self._keys)

    def check(self, headers: Iterable[tuple[bytes, bytes]]) -> None:
        """Accept or refuse a request by its raw ASGI ``headers`` (lower-case names, bytes).

        Raises:
            ApiError: 401 ``invalid_api_key`` when keys are configured and the request has neither
                an ``Authorization: Bearer`` nor an ``x-api-key`` header, or its token matches
                none of them.
        """
        if not self._keys:
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
        for key in self._keys:
            ok |= hmac.compare_digest(token, key)
        if not ok:
            raise ApiError(401, "invalid API key", code="invalid_api_key")
