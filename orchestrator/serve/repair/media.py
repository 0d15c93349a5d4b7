"""Where a media part's bytes come from: inline, or a URL llama-server would download itself.

Pure functions, no I/O. llama-server loads an ``image_url`` (and ``video_url``) part's ``url``
itself (``handle_media`` in ``tools/server/server-common.cpp``): a ``data:`` URL is decoded, an
``http(s)://`` URL is *downloaded by the server* (10 MB, 10 s), ``file://`` needs ``--media-path``.
A download makes the endpoint fetch any address a client names, from inside the machine that
serves it, so it is off unless the model's ``fetch_media_urls`` is true: such a part is a 400
naming it, with the fix (send the image inline). Every API's media reaches this one check:
chat ``image_url`` parts, Anthropic ``image`` blocks with a ``url`` source, Responses
``input_image`` parts; Ollama's ``images`` are inline by definition.
"""

from __future__ import annotations

from typing import Any

from orchestrator.errors import ApiError

REMOTE = ("http://", "https://")


def check_url(url: Any, here: str, fetch: bool) -> None:
    """Refuse a media URL llama-server must not or cannot load (400 naming ``here``).

    Args:
        url: the part's URL (``data:``, ``http(s)://``).
        here: the field's path for the message and ``param``.
        fetch: the model's ``fetch_media_urls``.
    """
    if not isinstance(url, str) or not url:
        raise ApiError(400, f"{here} must be a URL string (a data: URL, base64)", param=here)
    if url.startswith("data:") or (fetch and url.startswith(REMOTE)):
        return
    if url.startswith(REMOTE):
        raise ApiError(
            400,
            f"{here}: this endpoint does not download media from URLs (models.yaml fetch_media_urls is false); "
            "send the image inline as a data: URL (base64)",
            param=here,
        )
    scheme = url.split(":", 1)[0] if ":" in url else url[:16]
    raise ApiError(400, f"{here}: a {scheme!r} URL cannot be read here; send a data: URL (base64)", param=here)


def part_url(part: dict[str, Any], key: str) -> Any:
    """The URL of a chat media part: ``{key: {"url": ...}}`` (or a bare string, as some clients send)."""
    value = part.get(key)
    return value.get("url") if isinstance(value, dict) else value
