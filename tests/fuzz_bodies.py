"""Hypothesis strategies for request bodies a careless or hostile client sends, per POST route.

Each body starts from a valid one for its route and then gets a few fields set to arbitrary
JSON (numbers at and beyond every range, lone surrogates, wrong types, nested junk), fields
dropped, and is serialised as raw bytes that may use a number no float can hold (``1e400``), a
lone surrogate escape, another text encoding, or not be JSON at all. The field names are the
ones llama-server parses (``tools/server/server-schema.cpp``, its OpenAI, Anthropic and
Responses parsers) and the ones our own routes read.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

CHAT_MESSAGES = [{"role": "user", "content": "hi"}]

BASES: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {"model": "demo", "messages": CHAT_MESSAGES, "max_tokens": 2},
    "/v1/completions": {"model": "demo", "prompt": "hi", "max_tokens": 2},
    "/v1/embeddings": {"model": "demo", "input": "hi"},
    "/v1/messages": {"model": "demo", "messages": CHAT_MESSAGES, "max_tokens": 2},
    "/v1/messages/count_tokens": {"model": "demo", "messages": CHAT_MESSAGES},
    "/v1/responses": {"model": "demo", "input": "hi", "max_output_tokens": 2},
    "/v1/responses/input_tokens": {"model": "demo", "input": "hi"},
    "/v1/chat/completions/input_tokens": {"model": "demo", "messages": CHAT_MESSAGES},
    "/apply-template": {"model": "demo", "messages": CHAT_MESSAGES},
    "/infill": {"model": "demo", "input_prefix": "def f(", "input_suffix": "):", "max_tokens": 2},
    "/v1/rerank": {"model": "demo", "query": "a", "documents": ["a", "b"]},
    "/tokenize": {"model": "demo", "content": "hi"},
    "/detokenize": {"model": "demo", "tokens": [1, 2]},
    "/api/chat": {"model": "demo", "messages": CHAT_MESSAGES, "stream": False, "options": {"num_predict": 2}},
    "/api/generate": {"model": "demo", "prompt": "hi", "stream": False, "options": {"num_predict": 2}},
    "/api/embed": {"model": "demo", "input": "hi"},
    "/api/show": {"model": "demo"},
    "/models/restart": {"model": "no-such-model"},
    "/models/load": {"model": "no-such-model"},
    "/models/unload": {"model": "no-such-model"},
}

FIELDS = (
    # llama-server's completion schema
    "temperature", "top_p", "top_k", "min_p", "typical_p", "top_n_sigma", "xtc_probability", "xtc_threshold",
    "dynatemp_range", "dynatemp_exponent", "repeat_last_n", "repeat_penalty", "frequency_penalty",
    "presence_penalty", "dry_multiplier", "dry_base", "dry_allowed_length", "dry_penalty_last_n",
    "dry_sequence_breakers", "mirostat", "mirostat_tau", "mirostat_eta", "adaptive_target", "adaptive_decay",
    "seed", "n_probs", "min_keep", "n_predict", "max_tokens", "max_completion_tokens", "n_keep", "n_discard",
    "n_indent", "n", "n_cmpl", "n_cache_reuse", "t_max_predict_ms", "sse_ping_interval", "stream",
    "stream_options", "cache_prompt", "return_tokens", "return_progress", "timings_per_token", "verbose",
    "samplers", "stop", "logit_bias", "ignore_eos", "grammar", "json_schema", "grammar_lazy", "grammar_triggers",
    "preserved_tokens", "reasoning_format", "reasoning_budget_tokens", "reasoning_budget_end_tags",
    "reasoning_budget_message", "generation_prompt", "chat_parser", "chat_format", "response_fields", "lora",
    "speculative", "id_slot", "post_sampling_probs", "backend_sampling", "logprobs", "top_logprobs", "echo",
    # OpenAI chat and completions
    "messages", "prompt", "tools", "tool_choice", "parallel_tool_calls", "response_format", "user",
    "chat_template_kwargs", "enable_thinking", "add_generation_prompt", "continue_final_message", "suffix",
    # embeddings, rerank, tokenize
    "input", "encoding_format", "dimensions", "query", "documents", "top_n", "content", "tokens", "add_special",
    "with_pieces", "input_prefix", "input_suffix", "input_extra",
    # Anthropic and Responses
    "system", "max_output_tokens", "thinking", "stop_sequences", "metadata", "instructions", "reasoning", "text",
    "previous_response_id", "store", "background", "include", "truncation",
    # Ollama
    "options", "format", "think", "keep_alive", "raw", "template", "images",
    "model",
)  # fmt: skip

NUMBERS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, -1, 1, 2**31 - 1, 2**31, -(2**31) - 1, 2**32, 2**63, 2**64, 10**400, -(10**310)]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0.5, -0.0, 1e-320, 3.5e38, 1e308, -1e308]),
)
TEXT = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["i", "assistant", "infill", "top_k;infill", "none", "auto", "deepseek", "kmpt", "", "\ud800"]),
)
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, TEXT)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from((*FIELDS, "type", "name", "role")), inner, max_size=3),
    ),
    max_leaves=6,
)
# llama-server's own shapes, so that the fuzz also reaches the checks behind the type checks
SHAPED = st.sampled_from(
    [
        [{}],
        [{"type": ""}],
        [{"type": "function", "function": {}}],
        [{"type": "function", "function": {"name": "f", "parameters": 5}}],
        [{"type": "function", "function": {"name": "f", "parameters": {"type": 5}}}],
        {"type": 5},
        {"n_max": 1},
        {"n_max": -1},
        [{"role": "user"}],
        [{"role": 5, "content": "x"}],
        [{"role": "user", "content": [{"type": "text"}]}],
        [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}],
        [[1, "a"], [999999999]],
        [[-5]],
        {"id": 0, "scale": "x"},
        [{"id": 99, "scale": 1}],
        {"x": 1},
        'root ::= "a"',
        "root ::= (",
    ]
)
VALUES = st.one_of(JSON, SHAPED)

# Nested history: the list each chat-like API carries, whose items (and their parts, tool calls,
# images, sources) get fields of any type
HISTORY = {
    "/v1/chat/completions": "messages",
    "/v1/messages": "messages",
    "/v1/messages/count_tokens": "messages",
    "/v1/responses": "input",
    "/v1/responses/input_tokens": "input",
    "/v1/chat/completions/input_tokens": "messages",
    "/apply-template": "messages",
    "/api/chat": "messages",
}
ITEM_KEYS = (
    "role", "content", "type", "text", "name", "id", "tool_calls", "tool_call_id", "tool_use_id", "tool_name",
    "function", "arguments", "input", "output", "call_id", "images", "image_url", "url", "source", "data",
    "media_type", "thinking", "reasoning_content", "summary", "is_error", "refusal", "file", "input_audio",
)  # fmt: skip
VALID_ITEMS: list[dict[str, Any]] = [
    {"role": "user", "content": "hi"},
    {"role": "user", "content": [{"type": "text", "text": "hi"}]},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "type": "function",
                                                        "function": {"name": "f", "arguments": "{}"}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c",
                                  "content": [{"type": "text", "text": "x"}]}]},
    {"role": "user", "content": [{"type": "image",
                                  "source": {"type": "base64", "media_type": "image/png", "data": "x"}}]},
    {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "c", "output": "ok"},
    {"role": "user", "content": "hi", "images": ["aGk="]},
]  # fmt: skip


@st.composite
def nested(draw: st.DrawFn, value: Any, depth: int = 0) -> Any:
    """``value`` with a few keys of its objects, at any depth, set to arbitrary values."""
    if isinstance(value, list):
        return [draw(nested(item, depth + 1)) for item in value]
    if not isinstance(value, dict):
        return value
    out = {key: draw(nested(item, depth + 1)) if draw(st.booleans()) else item for key, item in value.items()}
    # each altered item gets at least one field of any type; its nested objects maybe more
    keys = st.lists(st.sampled_from(ITEM_KEYS), min_size=int(depth == 0), max_size=2 if depth < 4 else 0, unique=True)
    for key in draw(keys):
        out[key] = draw(VALUES)
    return out


@st.composite
def history(draw: st.DrawFn) -> list[Any]:
    """A history of valid items from every API, some of them altered at any depth."""
    items = draw(st.lists(st.sampled_from(VALID_ITEMS), min_size=1, max_size=4))
    return [draw(nested(item)) if draw(st.booleans()) else item for item in items]


LENGTHS = ("max_tokens", "n_predict", "max_completion_tokens", "max_output_tokens")


def _bounded(route: str, body: dict[str, Any]) -> None:
    """A generation whose length the fuzz dropped gets one (the tiny model never ends by itself)."""
    if route in ("/api/chat", "/api/generate"):
        options = body.get("options")
        if options is None:
            body["options"] = {"num_predict": 16}
        elif isinstance(options, dict) and "num_predict" not in options:
            options["num_predict"] = 16
    else:
        own = next((key for key in LENGTHS if key in BASES[route]), None)
        if own is not None and not any(key in body for key in LENGTHS):
            body[own] = 16


@st.composite
def body_bytes(draw: st.DrawFn, route: str) -> bytes:
    """One request body for ``route`` as the bytes a client would send."""
    body: dict[str, Any] = dict(BASES[route])
    if route in HISTORY and draw(st.booleans()):
        body[HISTORY[route]] = draw(history())
    for name in draw(st.lists(st.sampled_from(FIELDS), max_size=3, unique=True)):
        if draw(st.booleans()) and name in body and name != "model":
            del body[name]
        else:
            body[name] = draw(VALUES)
    # keep generation short where the fuzz picked a valid length: the time bound is for the proxy, and a
    # length beyond int32 must still reach the checks
    for key in ("max_tokens", "n_predict", "max_completion_tokens", "max_output_tokens", "num_predict"):
        value = body.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and (16 < value <= 2**31 - 1 or value < 0):
            body[key] = 16
    _bounded(route, body)
    text = json.dumps(body, ensure_ascii=draw(st.booleans()))
    forms = ["utf-8", "utf-8", "utf-8", "huge-number", "huge-integer", "deep", "utf-8-sig", "utf-16", "latin-1", "junk"]
    form = draw(st.sampled_from(forms))
    if form == "huge-integer":  # 400 digits: beyond every field's range and every float
        return text.replace("{", '{"seed": 1' + "0" * 400 + ", ", 1).encode(errors="surrogatepass")
    if form == "deep":  # nested deeper than any parser's recursion
        return text.replace("{", '{"metadata": ' + "[" * 100_000 + "]" * 100_000 + ", ", 1).encode(
            errors="surrogatepass"
        )
    if form == "huge-number":
        return text.replace("{", '{"temperature": 1e400, ', 1).encode(errors="surrogatepass")
    if form == "junk":
        return text.encode(errors="surrogatepass")[: draw(st.integers(0, max(0, len(text) - 1)))] + draw(
            st.binary(max_size=4)
        )
    if form == "latin-1":
        return text.encode("latin-1", errors="replace")
    return text.encode(form, errors="surrogatepass")
