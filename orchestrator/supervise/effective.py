"""What a running llama-server reports it runs with, per models.yaml key: read back, not assumed.

``effective_settings(log, props)`` reads the lines llama-server prints while it loads (its log at
verbosity 4, which every instance gets: ``launch.argv``) and its ``GET /props``. Each key maps to
the line that reports the value llama.cpp really took, so a flag that was renamed, dropped or
clamped shows up as a difference between what models.yaml asked for and what runs. The sources:

===============================  ==========================================================
``ctx_size``                     ``llama_context: n_ctx = N`` (the target's context: first)
``parallel``                     ``/props`` ``total_slots``
``threads``                      ``system_info: n_threads = N``
``batch_size`` / ``ubatch_size`` ``llama_context: n_batch = N`` / ``n_ubatch = N``
``cache_type_k`` / ``_v``        ``llama_kv_cache: ... K (TYPE): ..., V (TYPE): ...``
``cache_ram``                    ``prompt cache is enabled, size limit: N MiB`` (or disabled)
``speculative.*``                the draft's ``- n_max=N, n_min=N, p_min=P, ..., backend_sampling=B``
``speculative.draft``            ``llama_model_loader: loaded meta data ... from PATH`` after
                                 ``loading draft model``: the file the draft really came from
``preserve_thinking``            ``preserve_reasoning kwarg: true`` (the pin's switch behind the
                                 template's ``preserve_thinking``; ``not supported by template``)
``mmproj``                       ``loaded multimodal model, 'PATH'`` (the projector it loaded)
===============================  ==========================================================

Pure functions over text: the instance reads its log once it is ready.
"""

from __future__ import annotations

import re
from typing import Any

_PATTERNS: dict[str, re.Pattern[str]] = {
    "ctx_size": re.compile(r"llama_context: n_ctx\s+= (\d+)"),
    "threads": re.compile(r"system_info: n_threads = (\d+)"),
    "batch_size": re.compile(r"llama_context: n_batch\s+= (\d+)"),
    "ubatch_size": re.compile(r"llama_context: n_ubatch\s+= (\d+)"),
    "cache_type_k": re.compile(r"llama_kv_cache: size = .*?K \((\w+)\)"),
    "cache_type_v": re.compile(r"llama_kv_cache: size = .*?V \((\w+)\)"),
}
_CACHE_RAM = re.compile(r"prompt cache is (enabled, size limit: (?:(\d+) MiB|(no limit))|disabled)")
_SPEC = re.compile(r"- n_max=(\d+), n_min=(\d+), p_min=([\d.]+), n_embd=\d+, backend_sampling=(\d)")
_PRESERVE = re.compile(r"preserve_reasoning kwarg: (true|false|unset|not supported)")
_DRAFT = re.compile(r"loading draft model '([^']*)'")
_MMPROJ = re.compile(r"loaded multimodal model, '([^']*)'")
_LOADED = re.compile(r"llama_model_loader: loaded meta data with \d+ key-value pairs and (\d+) tensors from (.+?) \(")


def effective_settings(log: str, props: dict[str, Any] | None = None) -> dict[str, str]:
    """Per models.yaml key (``launch.settings.KEYS``), the value llama-server reports in its load
    log ``log`` and ``/props`` ``props``; a key it does not report is absent."""
    out: dict[str, str] = {}
    for key, pattern in _PATTERNS.items():
        found = pattern.search(log)
        if found:
            out[key] = found.group(1)
    if isinstance(props, dict) and isinstance(props.get("total_slots"), int):
        out["parallel"] = str(props["total_slots"])
    ram = _CACHE_RAM.search(log)
    if ram:
        out["cache_ram"] = ram.group(2) or ("-1" if ram.group(3) else "0")
    spec = _SPEC.search(log)
    if spec:
        out["speculative.n_max"], out["speculative.n_min"] = spec.group(1), spec.group(2)
        out["speculative.p_min"] = f"{float(spec.group(3)):g}"
        out["speculative.backend_sampling"] = "enabled" if spec.group(4) == "1" else "disabled"
    preserve = _PRESERVE.search(log)
    if preserve:
        word = preserve.group(1)
        out["preserve_thinking"] = {"true": "enabled", "false": "disabled"}.get(word, word)
    draft = draft_loaded(log)
    if draft is not None:
        out["speculative.draft"] = draft[0]
    projector = _MMPROJ.search(log)
    if projector:
        out["mmproj"] = projector.group(1)
    return out


def draft_loaded(log: str) -> tuple[str, int] | None:
    """``(path, tensors)`` of the file llama.cpp's model loader read after ``loading draft model``:
    the draft's real source, whatever the log line before it names; None without a draft."""
    asked = _DRAFT.search(log)
    if asked is None:
        return None
    loaded = _LOADED.search(log, asked.end())
    return (loaded.group(2), int(loaded.group(1))) if loaded else None
