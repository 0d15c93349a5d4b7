"""Optional API keys for the proxy: ``Authorization: Bearer <key>``.

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
            ApiError: 401 ``invalid_api_key`` when keys are configured and the request has no
                ``Authorization: Bearer`` header or its token matches none of them.
        """
        if not self._keys:
            return
        token = None
        for name, value in headers:
            if name == b"authorization":
                if value[: len(_BEARER)].lower() == _BEARER:
                    token = value[len(_BEARER) :].strip()
                break
        if token is None:
            raise ApiError(401, "missing API key: send 'Authorization: Bearer <key>'", code="invalid_api_key")
        ok = False
        for key in self._keys:
            ok |= hmac.compare_digest(token, key)
        if not ok:
            raise ApiError(401, "invalid API key", code="invalid_api_key")
