"""Who may see the console, and the headers every console response carries.

- With ``server.api_keys`` set, the static page is public (it holds no data) and every data or
  control call needs ``Authorization: Bearer <key>``: the page asks for the key and sends it
  as a header, never a cookie, so another site cannot make the browser act with it.
- Without keys, the console is served only when the endpoint is bound to a loopback address,
  and only to requests whose ``Host`` names a loopback host: a page from another site that
  re-points its own name at 127.0.0.1 (DNS rebinding) sends its own name as ``Host`` and is
  refused.
- Every console response carries a strict Content-Security-Policy (scripts, styles and data
  only from this origin, no inline script or style, no frames) and ``nosniff``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.errors import ApiError
from orchestrator.serve.http.hosts import host_of, is_loopback

if TYPE_CHECKING:
    from fastapi import Request

    from orchestrator.config.schema import Config
    from orchestrator.serve.http.auth import ApiKeys

# blob: images are the bench plot, fetched with the key header and shown from memory
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob:; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


class ConsoleAccess:
    """The console's access rule for one app.

    Args:
        config: ``server.host`` decides whether a keyless console may be served.
        keys: the app's ``ApiKeys``.
    """

    def __init__(self, config: Config, keys: ApiKeys) -> None:
        self.keys = keys
        self.loopback_bind = is_loopback(config.server.host)

    def check_page(self, request: Request) -> None:
        """Allow or refuse the static files.

        Raises:
            ApiError: 403 without keys on a non-loopback bind, or for a non-loopback ``Host``.
        """
        if self.keys.enabled:
            return
        if not self.loopback_bind:
            raise ApiError(
                403,
                "the console is served without a key only on a loopback bind: set server.api_keys in "
                "models.yaml to use it over the network, or bind server.host to 127.0.0.1",
                code="console_needs_key",
            )
        host = request.headers.get("host", "")
        if not is_loopback(host_of(host)):
            raise ApiError(
                403,
                f"the keyless console answers only to a loopback Host (got {host!r}); open it as "
                "http://127.0.0.1:PORT/ or set server.api_keys",
                code="console_needs_key",
            )

    def check_data(self, request: Request) -> None:
        """Allow or refuse a data or control call.

        With keys, the route table's guard (``orchestrator.serve.routes``) checked the key already.

        Raises:
            ApiError: 403 as :meth:`check_page` without keys.
        """
        if not self.keys.enabled:  # with keys, the route table's guard checked the key
            self.check_page(request)
