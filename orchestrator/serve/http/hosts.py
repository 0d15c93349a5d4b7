"""Host names as a request or a bind address gives them: is it this machine only, and the host part
of a ``Host`` header. Shared by the API keys' keyless guard (``serve/http/auth.py``) and the console's
access rule (``serve/console/access.py``)."""

from __future__ import annotations

import ipaddress


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or name, IPv6 with or without brackets) is this machine only."""
    host = host.strip().strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_of(header: str) -> str:
    """The host part of a ``Host`` header value: ``[::1]:8080`` -> ``::1``, ``a:80`` -> ``a``."""
    if header.startswith("["):
        return header[1:].split("]", 1)[0]
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header
