"""Errors a coding agent acts on: context overflow in the shape clients look for, malformed history.

Pure functions, no I/O.

* **Overflow.** llama-server answers a prompt longer than the slot's context with 400
  ``exceed_context_size_error`` and "request (N tokens) exceeds the available context size (M
  tokens)". Clients compact their history only when they recognise the error: OpenAI clients (Codex,
  the SDKs) read ``code: "context_length_exceeded"``, Claude Code reads Anthropic's wording
  ``prompt is too long: N tokens > M maximum``. :func:`overflow` gives one ``ApiError`` that says
  both (400, ``invalid_request_error``; the Anthropic shape keeps the message).
* **Malformed tool-call arguments in history.** llama-server parses every replayed call's
  ``arguments`` string as JSON and answers a 500 when it cannot ("Failed to parse tool call arguments
  as JSON"), which the proxy would pass on as a 502 that clients retry forever. :func:`checked_arguments`
  repairs an empty string to ``{}`` (a call without arguments) and refuses anything else that is not a
  JSON object with a 400 naming the field.
"""

from __future__ import annotations

import json
import re

from orchestrator.errors import ApiError

CONTEXT_CODE = "context_length_exceeded"
_OVERFLOW = re.compile(
    r"\((\d+) tokens\) (?:exceeds the available context size|is larger than the max context size) \((\d+) tokens\)"
)


# No token of a GGUF vocabulary we serve holds more than this many bytes (the Qwen vocabulary's
# longest is 128, a run of spaces): a prompt of more than this many bytes per token of the slot's
# context cannot fit, whatever the tokenizer makes of it.
MAX_TOKEN_BYTES = 256


# Keys whose strings are media (base64 images, audio, files), not prompt text: a 1.6 MB image is a
# few hundred tokens
_MEDIA_KEYS = frozenset({"image_url", "input_image", "input_audio", "source", "file_data", "images", "file"})


def text_bytes(value: object) -> int:
    """UTF-8 bytes of the prompt text in a request body: every string but media data and keys."""
    if isinstance(value, str):
        return len(value.encode("utf-8", "replace"))
    if isinstance(value, dict):
        return sum(text_bytes(v) for k, v in value.items() if k not in _MEDIA_KEYS)
    if isinstance(value, list):
        return sum(text_bytes(v) for v in value)
    return 0


def too_long(text_bytes: int, slot_ctx: int) -> ApiError | None:
    """The overflow error for a prompt of ``text_bytes`` UTF-8 bytes that cannot fit a slot of
    ``slot_ctx`` tokens even at :data:`MAX_TOKEN_BYTES` per token, or None (it may fit: llama-server
    counts). Refused here, before any replica tokenizes megabytes: llama-server tokenized a 10 MB
    prompt (5,000,014 tokens) for 6 s before refusing it, and four at once grew the child to 3.5 GB."""
    if text_bytes <= slot_ctx * MAX_TOKEN_BYTES:
        return None
    return ApiError(
        400,
        f"prompt is too long: at least {text_bytes // MAX_TOKEN_BYTES} tokens > {slot_ctx} maximum (the model's "
        "context per slot); shorten or compact the conversation, or raise ctx_size in models.yaml",
        code=CONTEXT_CODE,
        type_="invalid_request_error",
    )


def overflow(message: str, error_type: str | None) -> ApiError | None:
    """The client's error for llama-server's context overflow (its ``message`` and ``type``), or None."""
    if error_type != "exceed_context_size_error" and _OVERFLOW.search(message) is None:
        return None
    found = _OVERFLOW.search(message)
    size = f"{found.group(1)} tokens > {found.group(2)} maximum" if found else "more tokens than the context holds"
    return ApiError(
        400,
        f"prompt is too long: {size} (the model's context per slot); shorten or compact the conversation, "
        "or raise ctx_size in models.yaml",
        code=CONTEXT_CODE,
        type_="invalid_request_error",
    )


def checked_arguments(arguments: object, where: str) -> str | None:
    """A replacement for a replayed call's ``arguments`` string (``"{}"`` for an empty one), or None
    when it is fine as it is.

    Raises:
        ApiError: 400 naming ``where`` when it is not a JSON object.
    """
    if not isinstance(arguments, str):
        return None
    if not arguments.strip():
        return "{}"
    try:
        parsed = json.loads(arguments)
        if "\\u" in arguments:  # a lone surrogate escaped inside the string: not text, no template renders it
            json.dumps(parsed, ensure_ascii=False).encode()
    except ValueError:  # UnicodeEncodeError included
        parsed = None
    if not isinstance(parsed, dict):
        raise ApiError(
            400,
            f"{where} must be a JSON object as a string (got {arguments[:40]!r}): the tool call in the "
            "conversation's history is malformed; fix or drop that message",
            param=where,
        )
    return None


def checked_calls(calls: object, where: str) -> list[object] | None:
    """A chat message's ``tool_calls`` with empty ``arguments`` made ``{}``, or None when none changed.

    Raises:
        ApiError: 400 naming ``<where>[j].function.arguments`` for arguments that are not a JSON object.
    """
    if not isinstance(calls, list):
        return None
    out: list[object] = []
    changed = False
    for j, call in enumerate(calls):
        fn = call.get("function") if isinstance(call, dict) else None
        fixed = (
            checked_arguments(fn.get("arguments"), f"{where}[{j}].function.arguments") if isinstance(fn, dict) else None
        )
        if fixed is not None and isinstance(call, dict) and isinstance(fn, dict):
            call = {**call, "function": {**fn, "arguments": fixed}}
            changed = True
        out.append(call)
    return out if changed else None
