"""The Ollama API as translations to and from OpenAI chat/completions bodies (pure, no I/O).

Many desktop tools (chat front-ends, editor plugins, note apps) speak only Ollama's API (its
public API reference). ``orchestrator.serve.ollama.adapter`` serves it by
translating each request into the OpenAI body the proxy already repairs and forwards, and each
answer back:

========================  ===============================================================================
Ollama request field      becomes
========================  ===============================================================================
``messages[].images``     ``image_url`` parts (base64 data URLs); refused by the chat repair without mmproj
``messages[].tool_calls`` OpenAI ``tool_calls`` (arguments serialised); ``role: tool`` stays a tool message
``messages[].thinking``   ``reasoning_content``
``think``                 ``chat_template_kwargs.enable_thinking`` (``"low"``/``"medium"``/``"high"``/``"max"``: on)
``format``                ``"json"``: ``response_format`` json_object; a schema object: json_schema
``options``               sampling fields (:data:`OPTION_FIELDS`); load-time options (:data:`LOAD_OPTIONS`)
                          are fixed by models.yaml and ignored
``logprobs``              chat ``logprobs`` / ``top_logprobs`` (drafting is then off for the request)
``keep_alive``            the model's idle time before unload (the lifecycle's TTL) from now on; negative:
                          never, 0: once idle (an empty ``/api/generate`` with 0 unloads); pinned stays
``stream``                default true: NDJSON lines, one object per line, the last with ``done: true``
========================  ===============================================================================

``/api/generate`` with ``raw: true`` goes to ``/v1/completions`` with the prompt as is; otherwise its
``system`` and ``prompt`` become a chat. An empty prompt only reports the model as loaded
(``done_reason: "load"``), as Ollama does. ``suffix``, ``context`` and ``template`` are refused with
a 400: llama-server's infill needs FIM tokens, the others are Ollama-internal.
"""

from __future__ import annotations

import json
import math
import re
import time
from datetime import UTC, datetime
from typing import Any

from orchestrator.errors import ApiError
from orchestrator.serve.repair.thinking import THINK_LEVELS

#: The Ollama API version whose shapes these translations follow (``GET /api/version``).
API_VERSION = "0.12.0"

#: Ollama ``options`` -> OpenAI/llama-server request fields.
OPTION_FIELDS = {
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "min_p": "min_p",
    "typical_p": "typical_p",
    "seed": "seed",
    "num_predict": "max_tokens",
    "stop": "stop",
    "repeat_penalty": "repeat_penalty",
    "repeat_last_n": "repeat_last_n",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "mirostat": "mirostat",
    "mirostat_tau": "mirostat_tau",
    "mirostat_eta": "mirostat_eta",
    "num_keep": "n_keep",
}
#: The request field -> the Ollama option it came from (an error names what the client sent).
OPTION_OF = {field: option for option, field in OPTION_FIELDS.items()}


def error_message(err: ApiError) -> str:
    """``err``'s message, naming ``options.num_predict`` where it said ``max_tokens`` (and so on)."""
    option = OPTION_OF.get(err.param or "")
    if option is None or not err.message.startswith(f"{err.param}:"):
        return err.message
    return f"options.{option}:{err.message[len(err.param or '') + 1 :]}"


#: Options that size or place the model: models.yaml decides them for every client.
LOAD_OPTIONS = (
    "num_ctx",
    "num_batch",
    "num_gpu",
    "main_gpu",
    "num_thread",
    "use_mmap",
    "use_mlock",
    "numa",
    "low_vram",
)

_DURATION = re.compile(r"^(-?\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)?$")
_UNIT_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}
# Ollama's keep_alive is a Go time.Duration: nothing lasts longer than int64 nanoseconds (~292 years),
# so a longer one means "never unload" (a 1e300 s TTL made /api/ps's expires_at overflow: a 500)
_LONGEST_S = (2**63 - 1) / 1e9


def _bad(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, param=param)


def model_name(name: Any) -> Any:
    """A configured name from an Ollama model reference: ``demo:latest`` -> ``demo``."""
    if isinstance(name, str) and name.endswith(":latest"):
        return name[: -len(":latest")]
    return name


def now() -> str:
    """Ollama's ``created_at``: RFC 3339 UTC with nanosecond-style fraction."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def keep_alive_seconds(value: Any) -> float | None:
    """Parse ``keep_alive``: seconds (number) or a Go duration (``"5m"``, ``"1h30m"`` is not Ollama's).

    Returns:
        Seconds; negative means "keep forever", 0 "unload now"; None when absent.

    Raises:
        ApiError: 400 naming ``keep_alive`` for anything else.
    """
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        match = _DURATION.match(value.strip()) if isinstance(value, str) else None
        if match is None:
            raise _bad(f"keep_alive must be seconds or a duration such as '5m' (got {value!r})", "keep_alive")
        seconds = float(match.group(1)) * _UNIT_S[match.group(2)]
    if not math.isfinite(seconds):
        # a 400-digit duration string is a float overflow, as it is for Ollama's duration parser
        raise _bad(f"keep_alive is out of range (got {str(value)[:40]}...); send seconds or a duration", "keep_alive")
    return -1.0 if seconds > _LONGEST_S else seconds


def _sampling(body: dict[str, Any]) -> dict[str, Any]:
    options = body.get("options") or {}
    if not isinstance(options, dict):
        raise _bad("options must be an object", "options")
    out: dict[str, Any] = {}
    for key, value in options.items():
        if key in OPTION_FIELDS:
            out[OPTION_FIELDS[key]] = value
        elif key not in LOAD_OPTIONS:
            raise _bad(f"options.{key} is not supported; supported: {', '.join(OPTION_FIELDS)}", f"options.{key}")
    fmt = body.get("format")
    if fmt == "json":
        out["response_format"] = {"type": "json_object"}
    elif isinstance(fmt, dict):
        out["response_format"] = {"type": "json_schema", "json_schema": {"name": "format", "schema": fmt}}
    elif fmt not in (None, ""):
        raise _bad("format must be 'json' or a JSON schema object", "format")
    if body.get("logprobs"):
        out["logprobs"] = True
        out["top_logprobs"] = body.get("top_logprobs") or 0
    keep_alive_seconds(body.get("keep_alive"))
    return out


def _think(body: dict[str, Any], out: dict[str, Any]) -> None:
    think = body.get("think")
    if think is None:
        return
    if isinstance(think, bool) or think in THINK_LEVELS:
        out["chat_template_kwargs"] = {"enable_thinking": think is not False}
    else:
        raise _bad("think must be true, false, 'low', 'medium', 'high' or 'max'", "think")


def _message(msg: Any, where: str) -> dict[str, Any]:
    if not isinstance(msg, dict):
        raise _bad(f"{where} must be an object with 'role' and 'content'", where)
    out: dict[str, Any] = {"role": msg.get("role"), "content": msg.get("content") or ""}
    images = msg.get("images")
    if images:
        if not isinstance(images, list) or not all(isinstance(i, str) for i in images):
            raise _bad(f"{where}.images must be a list of base64 strings", f"{where}.images")
        parts = [{"type": "text", "text": out["content"]}] if out["content"] else []
        parts += [{"type": "image_url", "image_url": {"url": f"data:image/png;base64,{i}"}} for i in images]
        out["content"] = parts
    if msg.get("thinking"):
        out["reasoning_content"] = msg["thinking"]
    calls = msg.get("tool_calls")
    if calls:
        out["tool_calls"] = [_tool_call(c, f"{where}.tool_calls[{k}]", k) for k, c in enumerate(calls)]
    if msg.get("role") == "tool":
        out["tool_call_id"] = msg.get("tool_call_id") or msg.get("tool_name") or "call"
    return out


def _tool_call(call: Any, where: str, k: int) -> dict[str, Any]:
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise _bad(f"{where}.function.name must be a string", f"{where}.function.name")
    args = fn.get("arguments", {})
    return {
        "id": call.get("id") or f"call_{k}",
        "type": "function",
        "function": {"name": fn["name"], "arguments": args if isinstance(args, str) else json.dumps(args)},
    }


def chat_request(body: dict[str, Any]) -> dict[str, Any]:
    """``POST /api/chat`` body -> OpenAI chat-completions body (before the chat repair).

    Raises:
        ApiError: 400 naming the field for a malformed message, option, format, think or keep_alive.
    """
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise _bad("messages must be a list", "messages")
    out: dict[str, Any] = {
        "model": model_name(body.get("model")),
        "messages": [_message(m, f"messages[{i}]") for i, m in enumerate(messages)],
        "stream": body.get("stream", True) is not False,
        **_sampling(body),
    }
    if body.get("tools"):
        out["tools"] = body["tools"]
    _think(body, out)
    if out["stream"]:
        out["stream_options"] = {"include_usage": True}
    return out


def generate_request(body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """``POST /api/generate`` body -> ``(upstream path, OpenAI body)``.

    Raises:
        ApiError: 400 for ``suffix``, ``context``, ``template`` or a malformed field.
    """
    for key in ("suffix", "context", "template"):
        if body.get(key):
            raise _bad(f"{key} is not supported by this server", key)
    prompt = body.get("prompt") or ""
    if not isinstance(prompt, str):
        raise _bad("prompt must be a string", "prompt")
    stream = body.get("stream", True) is not False
    common = {"model": model_name(body.get("model")), "stream": stream, **_sampling(body)}
    if stream:
        common["stream_options"] = {"include_usage": True}
    if body.get("raw"):
        return "/v1/completions", {**common, "prompt": prompt}
    messages: list[dict[str, Any]] = []
    if body.get("system"):
        messages.append({"role": "system", "content": body["system"]})
    user = _message({"role": "user", "content": prompt, "images": body.get("images")}, "prompt")
    out = {**common, "messages": [*messages, user]}
    _think(body, out)
    return "/v1/chat/completions", out


def embed_request(body: dict[str, Any]) -> dict[str, Any]:
    """``POST /api/embed`` body -> OpenAI embeddings body."""
    text = body.get("input")
    if not (isinstance(text, str) or (isinstance(text, list) and all(isinstance(t, str) for t in text))):
        raise _bad("input must be a string or a list of strings", "input")
    keep_alive_seconds(body.get("keep_alive"))
    return {"model": model_name(body.get("model")), "input": text}


def _ns(ms: Any) -> int:
    return int(float(ms) * 1e6) if isinstance(ms, (int, float)) else 0


def stats(chunk: dict[str, Any], started: float) -> dict[str, Any]:
    """Ollama's final counters (durations in nanoseconds) from an OpenAI answer's usage and timings."""
    usage = chunk.get("usage") or {}
    timings = chunk.get("timings") or {}
    return {
        "total_duration": int((time.monotonic() - started) * 1e9),
        "load_duration": 0,
        "prompt_eval_count": usage.get("prompt_tokens", timings.get("prompt_n", 0)),
        "prompt_eval_duration": _ns(timings.get("prompt_ms")),
        "eval_count": usage.get("completion_tokens", timings.get("predicted_n", 0)),
        "eval_duration": _ns(timings.get("predicted_ms")),
    }


def _logprobs(choice: dict[str, Any]) -> list[dict[str, Any]]:
    content = (choice.get("logprobs") or {}).get("content") or []
    return [
        {
            "token": t["token"],
            "logprob": t["logprob"],
            "top_logprobs": [{"token": c["token"], "logprob": c["logprob"]} for c in t.get("top_logprobs") or []],
        }
        for t in content
    ]


def _tool_calls_out(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for call in calls:
        fn = call.get("function") or {}
        try:
            args = json.loads(fn.get("arguments") or "{}")
        except ValueError:
            args = {}
        out.append({"function": {"name": fn.get("name", ""), "arguments": args}})
    return out


def done_reason(finish: Any) -> str:
    """Ollama's ``done_reason`` for an OpenAI ``finish_reason``."""
    return "length" if finish == "length" else "stop"


def answer(oai: dict[str, Any], model: str, started: float, *, generate: bool) -> dict[str, Any]:
    """A whole OpenAI answer (chat or completion) -> Ollama's ``/api/chat`` or ``/api/generate`` answer."""
    choice = (oai.get("choices") or [{}])[0]
    msg = choice.get("message") or {}
    text = msg.get("content") if "message" in choice else choice.get("text")
    out: dict[str, Any] = {"model": model, "created_at": now()}
    if generate:
        out["response"] = text or ""
        if msg.get("reasoning_content"):
            out["thinking"] = msg["reasoning_content"]
    else:
        message: dict[str, Any] = {"role": "assistant", "content": text or ""}
        if msg.get("reasoning_content"):
            message["thinking"] = msg["reasoning_content"]
        if msg.get("tool_calls"):
            message["tool_calls"] = _tool_calls_out(msg["tool_calls"])
        out["message"] = message
    if choice.get("logprobs"):
        out["logprobs"] = _logprobs(choice)
    return {**out, "done": True, "done_reason": done_reason(choice.get("finish_reason")), **stats(oai, started)}


class StreamTranslator:
    """OpenAI stream chunks -> Ollama NDJSON objects, for ``/api/chat`` or ``/api/generate``.

    Args:
        model: the model name to report.
        started: ``time.monotonic()`` when the request arrived (for ``total_duration``).
        generate: ``/api/generate`` shapes (``response``) instead of ``/api/chat`` (``message``).
    """

    def __init__(self, model: str, started: float, *, generate: bool) -> None:
        self.model = model
        self.started = started
        self.generate = generate
        self.finish: Any = None
        self.calls: dict[int, dict[str, Any]] = {}

    def feed(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        """Objects to send for one OpenAI chunk (the usage chunk yields the final ``done`` object)."""
        choices = chunk.get("choices") or []
        if not choices:
            return [self._done(chunk)] if chunk.get("usage") or chunk.get("timings") else []
        choice = choices[0]
        self.finish = choice.get("finish_reason") or self.finish
        delta = choice.get("delta") or {}
        for call in delta.get("tool_calls") or []:
            slot = self.calls.setdefault(call.get("index", 0), {"function": {"name": "", "arguments": ""}})
            fn = call.get("function") or {}
            slot["function"]["name"] += fn.get("name") or ""
            slot["function"]["arguments"] += fn.get("arguments") or ""
        text = delta.get("content") if "delta" in choice else choice.get("text")
        thinking = delta.get("reasoning_content")
        if not text and not thinking and not choice.get("logprobs"):
            return []
        return [self._piece(text or "", thinking, choice)]

    def _piece(self, text: str, thinking: str | None, choice: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"model": self.model, "created_at": now()}
        if self.generate:
            out["response"] = text
            if thinking:
                out["thinking"] = thinking
        else:
            out["message"] = {"role": "assistant", "content": text, **({"thinking": thinking} if thinking else {})}
        if choice.get("logprobs"):
            out["logprobs"] = _logprobs(choice)
        out["done"] = False
        return out

    def end(self, chunk: dict[str, Any]) -> dict[str, Any]:
        """The final ``done`` object, counters from ``chunk`` (``usage``, ``timings``), for a stream
        whose last event was no usage chunk (``/v1/completions`` puts them on its last choice)."""
        return self._done(chunk)

    def _done(self, chunk: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"model": self.model, "created_at": now()}
        if self.generate:
            out["response"] = ""
        else:
            out["message"] = {"role": "assistant", "content": ""}
            if self.calls:
                out["message"]["tool_calls"] = _tool_calls_out([self.calls[k] for k in sorted(self.calls)])
        return {**out, "done": True, "done_reason": done_reason(self.finish), **stats(chunk, self.started)}


def error_line(err: ApiError) -> bytes:
    """One NDJSON line carrying ``err`` in Ollama's shape (``{"error": "..."}``)."""
    return json.dumps({"error": error_message(err)}).encode() + b"\n"
