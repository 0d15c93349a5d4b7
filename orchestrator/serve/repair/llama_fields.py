"""The fields llama-server parses, their types and ranges: a client's mistake is a 400 here, not upstream.

Pure functions, no I/O. The table follows ``tools/server/server-schema.cpp`` at the pin
(``make_llama_cmpl_schema``) and the OpenAI chat parser (``oaicompat_chat_params_parse`` in
``server-common.cpp``). What llama-server does with a bad value, and why we check first:

- a value outside a *hard* limit is a 400 there; outside a *soft* limit it is clamped, which
  silently answers another question (``top_p: 5`` runs as 1): refused here, naming the range;
- an integer beyond int32 is truncated by its JSON library (``max_tokens: 2**32`` runs as 0),
  a float beyond float32 becomes infinity: refused here;
- ``tools`` that are not function tools, a ``parameters`` schema that is not an object, a
  ``reasoning_format`` that is null or unknown: HTTP 500 there (an exception outside the field
  parser), so a client's mistake would read as a server fault;
- ``samplers``: names or letters it does not know are dropped with a log line (a silently
  different sampler chain), and the ``infill`` sampler without a bounded ``top_k`` before it
  compares every pair of the whole vocabulary's candidates (quadratic: minutes to hours on a
  150k vocabulary), freezing the server's main loop for every other request.

``check`` raises the first problem as ``ApiError`` 400 with ``param`` naming the field, and
returns a repaired body (or None) for what llama-server would mishandle but has one obvious
meaning (``reasoning_format: null`` means the server's default). ``client_mistake`` recognises
llama-server's 500 answers that are a client's mistake, for what cannot be checked first.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from orchestrator.errors import ApiError

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MAX = 2**63 - 1
FLOAT32_MAX = 3.4028234663852886e38
MAX_CANDIDATES = 100  # n_probs / top_logprobs / completions' logprobs

Check = Callable[[str, Any], None]  # (param, value) -> None, raises ApiError


def _bad(param: str, message: str) -> ApiError:
    return ApiError(400, f"{param}: {message}", param=param)


def _boolean(param: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise _bad(param, f"must be true or false, not {type(value).__name__}")


def _string(param: str, value: Any) -> None:
    if not isinstance(value, str):
        raise _bad(param, f"must be a string, not {type(value).__name__}")


def integer(lo: int = INT32_MIN, hi: int = INT32_MAX) -> Check:
    """A whole number within ``[lo, hi]`` (llama-server reads it as int32 unless noted)."""

    def check(param: str, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _bad(param, f"must be an integer, not {type(value).__name__}")
        if isinstance(value, float) and not value.is_integer():
            raise _bad(param, f"must be an integer, not {value!r}")
        if not lo <= value <= hi:
            raise _bad(param, f"must be between {lo} and {hi} (got {value:.0f})")

    return check


def number(lo: float = -FLOAT32_MAX, hi: float = FLOAT32_MAX) -> Check:
    """A finite number within ``[lo, hi]`` (llama-server reads it as a 32-bit float)."""

    def check(param: str, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _bad(param, f"must be a number, not {type(value).__name__}")
        if not math.isfinite(value) or not lo <= value <= hi:
            raise _bad(param, f"must be between {lo:g} and {hi:g} (got {value!r})")

    return check


def _string_list(param: str, value: Any) -> None:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _bad(param, "must be a list of strings")


def _stop(param: str, value: Any) -> None:
    if not isinstance(value, str):
        _string_list(param, value)


def _object(param: str, value: Any) -> None:
    if not isinstance(value, dict):
        raise _bad(param, f"must be an object, not {type(value).__name__}")


# common/chat.cpp common_reasoning_format_from_name
REASONING_FORMATS = ("none", "auto", "deepseek", "deepseek-legacy")


def _reasoning_format(param: str, value: Any) -> None:
    if value not in REASONING_FORMATS:
        raise _bad(param, f"must be one of {', '.join(REASONING_FORMATS)} (got {value!r})")


# common/sampling.cpp common_sampler_types_from_names / _from_chars (names are matched lower-cased,
# also kebab-case and without the underscore)
SAMPLER_NAMES = {
    "dry": "dry", "top_k": "top_k", "top_p": "top_p", "top_n_sigma": "top_n_sigma", "typ_p": "typ_p",
    "min_p": "min_p", "temperature": "temperature", "xtc": "xtc", "infill": "infill", "penalties": "penalties",
    "adaptive_p": "adaptive_p", "nucleus": "top_p", "temp": "temperature", "typ": "typ_p",
}  # fmt: skip
SAMPLER_CHARS = {
    "d": "dry", "k": "top_k", "y": "typ_p", "p": "top_p", "s": "top_n_sigma", "m": "min_p", "t": "temperature",
    "x": "xtc", "i": "infill", "e": "penalties", "a": "adaptive_p",
}  # fmt: skip
INFILL_TOP_K_MAX = 1000  # candidates the infill sampler may compare pairwise (1e6 comparisons)


def sampler_chain(value: Any) -> list[str]:
    """The canonical sampler names of a ``samplers`` value, as llama-server reads it.

    Raises:
        ApiError: 400 for a value that is neither a string of sampler letters nor a list of
            names, or that holds a letter or name llama-server does not know.
    """
    if isinstance(value, str):
        unknown = sorted({c for c in value if c not in SAMPLER_CHARS})
        if unknown:
            raise _bad("samplers", f"unknown sampler letter(s) {''.join(unknown)!r}; known: {''.join(SAMPLER_CHARS)}")
        return [SAMPLER_CHARS[c] for c in value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _bad("samplers", "must be a string of sampler letters or a list of sampler names")
    chain = []
    for name in value:
        key = name.lower().replace("-", "_")
        canonical = SAMPLER_NAMES.get(key) or next((n for n in SAMPLER_NAMES if n.replace("_", "") == key), None)
        if canonical is None:
            raise _bad("samplers", f"unknown sampler {name!r}; known: {', '.join(sorted(SAMPLER_NAMES))}")
        chain.append(SAMPLER_NAMES[canonical])
    return chain


def _samplers(body: dict[str, Any]) -> None:
    chain = sampler_chain(body["samplers"])
    if "infill" not in chain:
        return
    top_k = body.get("top_k", 40)  # llama-server's default top_k
    bounded = "top_k" in chain[: chain.index("infill")] and isinstance(top_k, int) and 0 < top_k <= INFILL_TOP_K_MAX
    if not bounded:
        raise _bad(
            "samplers",
            "the infill sampler compares every pair of candidate tokens: put top_k before it and keep top_k "
            f"between 1 and {INFILL_TOP_K_MAX} (as is, llama-server would spin for minutes on this request)",
        )


def _logit_bias(param: str, value: Any) -> None:
    bias_ok = (int, float)
    if isinstance(value, dict):
        for key, bias in value.items():
            if key.lstrip("-").isdigit() and not 0 <= int(key) <= INT32_MAX:  # wrapped to another token there
                raise _bad(f"{param}.{key}", f"a token id must be between 0 and {INT32_MAX}")
            if bias is not False and (isinstance(bias, bool) or not isinstance(bias, bias_ok)):
                raise _bad(f"{param}.{key}", "a bias must be a number, or false to ban the token")
        return
    if not isinstance(value, list):
        raise _bad(param, "must be an object {token: bias} or a list of [token, bias] pairs")
    for i, pair in enumerate(value):
        ok = isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], (int, str))
        if not ok or isinstance(pair[0], bool) or (pair[1] is not False and not isinstance(pair[1], bias_ok)):
            raise _bad(f"{param}[{i}]", "must be a [token id or text, bias number or false] pair")
        if isinstance(pair[0], int) and not 0 <= pair[0] <= INT32_MAX:
            raise _bad(f"{param}[{i}]", f"a token id must be between 0 and {INT32_MAX}")


def _lora(param: str, value: Any) -> None:
    entries = value if isinstance(value, list) else None
    if entries is None or not all(isinstance(e, dict) for e in entries):
        raise _bad(param, "must be a list of {'id': adapter index, 'scale': number}")
    for i, entry in enumerate(entries):
        integer(0)(f"{param}[{i}].id", entry.get("id"))
        number()(f"{param}[{i}].scale", entry.get("scale"))


def _token_limit(param: str, value: Any) -> None:
    integer(-1)(param, value)
    if value == 0:  # llama-server generates one token for a limit of 0, answered as "length"
        raise _bad(param, "must be at least 1, or -1 for no limit (0 still generated one token)")


def _dry_breakers(param: str, value: Any) -> None:
    _string_list(param, value)
    if not value:
        raise _bad(param, "must not be empty")


# Field -> check, for every field of llama-server's completion schema (server-schema.cpp) and the
# OpenAI fields its chat parser reads. Limits are llama-server's own (hard or clamped).
FIELDS: dict[str, Check] = {
    **dict.fromkeys(
        ("verbose", "timings_per_token", "stream", "cache_prompt", "return_tokens", "return_progress",
         "backend_sampling", "post_sampling_probs", "grammar_lazy", "parse_tool_calls", "echo",
         "reasoning_control", "ignore_eos", "parallel_tool_calls", "add_generation_prompt"),
        _boolean,
    ),
    # max_output_tokens: llama-server's Responses conversion reads it as max_tokens, as an int
    # (2**63 - 1 wrapped to -1: an answer without a limit)
    **dict.fromkeys(("n_predict", "max_tokens", "max_completion_tokens", "max_output_tokens"), _token_limit),
    **dict.fromkeys(("n_keep", "sse_ping_interval", "reasoning_budget_tokens"), integer(-1)),
    **dict.fromkeys(("n_indent", "n_discard", "n_cache_reuse", "repeat_last_n", "dry_allowed_length",
                     "dry_penalty_last_n", "min_keep", "top_k"), integer(0)),
    # candidates per generated token: llama-server lists up to the whole vocabulary (14 MB of JSON per
    # token at 151936), so one request for all of them could exhaust memory; OpenAI allows 20
    **dict.fromkeys(("n_probs", "top_logprobs"), integer(0, MAX_CANDIDATES)),
    "logprobs": lambda param, value: None if isinstance(value, bool) else integer(0, MAX_CANDIDATES)(param, value),
    "n": integer(1),
    "n_cmpl": integer(1),
    "prompt": lambda param, value: check_token_ids(param, value),
    "t_max_predict_ms": integer(-1, INT64_MAX),
    "mirostat": integer(0, 2),
    "seed": integer(-1, 2**32 - 1),  # uint32 there; -1 = random
    "id_slot": integer(-1),
    **dict.fromkeys(("top_p", "min_p", "xtc_probability", "xtc_threshold"), number(0.0, 1.0)),
    "temperature": number(0.0),
    "adaptive_target": number(hi=1.0),
    "adaptive_decay": number(0.0, 0.99),
    **dict.fromkeys(("top_n_sigma", "typical_p", "dynatemp_range", "dynatemp_exponent", "repeat_penalty",
                     "frequency_penalty", "presence_penalty", "dry_multiplier", "dry_base", "mirostat_tau",
                     "mirostat_eta"), number()),
    **dict.fromkeys(("reasoning_budget_message", "reasoning_budget_start_tag", "reasoning_budget_end_tag",
                     "generation_prompt", "chat_parser", "grammar"), _string),
    **dict.fromkeys(("response_fields", "preserved_tokens", "reasoning_budget_end_tags"), _string_list),
    "chat_format": integer(0),
    "reasoning_format": _reasoning_format,
    "stop": _stop,
    "logit_bias": _logit_bias,
    "lora": _lora,
    "dry_sequence_breakers": _dry_breakers,
    **dict.fromkeys(("stream_options", "chat_template_kwargs"), _object),
}  # fmt: skip


def _tools(body: dict[str, Any]) -> None:
    tools = body["tools"]
    if not isinstance(tools, list):
        raise _bad("tools", "must be a list of {'type': 'function', 'function': {'name': ..., 'parameters': {...}}}")
    for i, tool in enumerate(tools):
        here = f"tools[{i}]"
        if not isinstance(tool, dict) or tool.get("type") != "function":
            raise _bad(f"{here}.type", "must be 'function' (the only tool type llama-server runs)")
        fn = tool.get("function")
        if not isinstance(fn, dict):
            raise _bad(f"{here}.function", "must be an object with 'name' and 'parameters'")
        if not isinstance(fn.get("name"), str) or not fn["name"]:
            raise _bad(f"{here}.function.name", "must be a non-empty string")
        if fn.get("description") is not None:
            _string(f"{here}.function.description", fn["description"])
        if "parameters" in fn and not isinstance(fn["parameters"], dict):
            raise _bad(f"{here}.function.parameters", "must be a JSON schema object")


def _tool_choice(param: str, value: Any) -> None:
    if isinstance(value, str):
        if value not in ("none", "auto", "required"):
            raise _bad(param, f"must be 'none', 'auto', 'required' or a function choice (got {value!r})")
        return
    if not isinstance(value, dict):
        raise _bad(param, "must be 'none', 'auto', 'required' or {'type': 'function', 'function': {'name': ...}}")


def check(body: dict[str, Any], *, openai_tools: bool = True) -> dict[str, Any] | None:
    """Check every llama-server field of a generation body (chat, completions, infill, Anthropic, Responses).

    ``openai_tools``: check ``tools``/``tool_choice`` in OpenAI chat's shape (Anthropic and
    Responses bodies carry theirs in another shape, checked by their own translation).

    A null value means "the server's default" (llama-server's field parser treats it so); the one
    field whose null llama-server's chat parser turns into a 500 (``reasoning_format``) is dropped.

    Returns:
        A new body when something was dropped, else None.

    Raises:
        ApiError: 400 naming the first field with a wrong type or a value out of range, unknown
            samplers or a freezing sampler chain, malformed ``tools``/``tool_choice``.
    """
    for name, value in body.items():
        field_check = FIELDS.get(name)
        if field_check is not None and value is not None:
            field_check(name, value)
    if body.get("samplers") is not None:
        _samplers(body)
    if openai_tools and body.get("tools") is not None:
        _tools(body)
    if openai_tools and body.get("tool_choice") is not None:
        _tool_choice("tool_choice", body["tool_choice"])
    if "messages" in body and body.get("logprobs") is not None and not isinstance(body["logprobs"], bool):
        # chat reads it as a flag (a number was taken as true or false by its size); completions' is a count
        raise _bad("logprobs", "must be true or false on chat; top_logprobs sets the number of candidates")
    spec = body.get("speculative")
    if isinstance(spec, dict):
        for key in ("n_max", "n_min"):
            if spec.get(key) is not None:
                integer(0)(f"speculative.{key}", spec[key])
    if "reasoning_format" in body and body["reasoning_format"] is None:
        return {k: v for k, v in body.items() if k != "reasoning_format"}
    return None


def check_token_ids(param: str, value: Any) -> None:
    """Token ids in a prompt (``[1, 2]``, ``[[1, 2], "text"]``...): llama-server reads them as int32,
    so 2**40 wrapped to token 0 and was answered as if sent; beyond the vocabulary it refuses."""
    items = value if isinstance(value, list) else []
    for i, item in enumerate(items):
        for j, token in enumerate(item if isinstance(item, list) else [item]):
            if isinstance(token, int) and not isinstance(token, bool) and not 0 <= token <= INT32_MAX:
                where = f"{param}[{i}][{j}]" if isinstance(item, list) else f"{param}[{i}]"
                raise _bad(where, f"a token id must be between 0 and {INT32_MAX} (got {token})")


def check_embedding_input(body: dict[str, Any]) -> None:
    """``input`` of ``/v1/embeddings``: text, a list of texts, token ids, or lists of token ids.

    llama-server answers 500 for any other shape (``tokenize_input_prompts`` throws outside the
    field parser).

    Raises:
        ApiError: 400 naming ``input``.
    """
    value = body.get("input", body.get("content"))
    if isinstance(value, str):
        return
    ok = isinstance(value, list) and all(
        isinstance(v, str)
        or (isinstance(v, int) and not isinstance(v, bool))
        or (isinstance(v, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in v))
        for v in value
    )
    if not ok:
        raise _bad("input", "must be a string, a list of strings, a list of token ids, or a list of such lists")
    check_token_ids("input", value)


# llama-server's 500 answers that are a client's mistake: (start of its message, the field, where).
# They come from exceptions outside its field parser, which it cannot tell from server faults.
# Most are checked before forwarding (above, request_repair, structured); this is the net for the rest.
CLIENT_500S: tuple[tuple[str, str | None, str], ...] = (
    ("Failed to parse tools", "tools", "server-common.cpp oaicompat_chat_params_parse"),
    ("Failed to parse messages", "messages", "server-common.cpp oaicompat_chat_params_parse"),
    ("JSON schema error", "json_schema", "common/json-schema-to-grammar.cpp"),
    ("Unknown reasoning format", "reasoning_format", "common/chat.cpp"),
    ("Cannot use both json_schema and grammar", "grammar", "server-common.cpp"),
    ("image input is not supported", "messages", "server-common.cpp (no mmproj)"),
    ("audio input is not supported", "messages", "server-common.cpp (no mmproj)"),
    ('"prompt" elements must be', "input", "server-common.cpp tokenize_input_prompts"),
    ("[json.exception.", None, "nlohmann::json: a value of the wrong type"),
    ("vector::_M_range_check", "tokens", "server-context.cpp /detokenize: a token id outside the vocabulary"),
    ("\n------------\nWhile executing", "messages", "the chat template raised (jinja)"),
)


def client_mistake(message: str) -> ApiError | None:
    """A 400 naming the field for llama-server's 500 ``message`` when it is a client's mistake, else None."""
    for start, param, _where in CLIENT_500S:
        if message.startswith(start):
            code = "invalid_schema" if param == "json_schema" else None
            return ApiError(400, f"llama-server refused the request: {message.strip()[:500]}", param=param, code=code)
    return None
