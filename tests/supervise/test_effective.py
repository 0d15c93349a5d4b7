"""``effective_settings``: what llama-server reports it runs with, from its load log's own lines
(formats of the pinned source; ``tests/launch/test_read_back.py`` reads a real one) and ``/props``;
and how ``orchestrator status`` prints them beside what models.yaml asked."""

from __future__ import annotations

from rich.console import Console

from orchestrator.cli.control import _print_settings
from orchestrator.supervise.effective import draft_loaded, effective_settings

LOG = """\
system_info: n_threads = 1 (n_threads_batch = 1) / 2 | CPU : SSE3 = 1 |
srv    load_model: loading model '/m/trunk.gguf'
llama_model_loader: loaded meta data with 40 key-value pairs and 60 tensors from /m/trunk.gguf (version GGUF V3)
llama_context: n_ctx                 = 1536
llama_context: n_batch               = 1024
llama_context: n_ubatch              = 256
llama_kv_cache: size =    6.00 MiB (  1536 cells,   1 layers,  2/1 seqs), K (bf16):    3.00 MiB, V (f32):    3.00 MiB
common_speculative_init_result: loading draft model '/m/trunk.draft.gguf'
llama_model_loader: loaded meta data with 40 key-value pairs and 14 tensors from /m/trunk.draft.gguf (version GGUF V3)
llama_context: n_ctx                 = 1536
spec init: - n_max=5, n_min=2, p_min=0.25, n_embd=32, backend_sampling=0
srv          load: prompt cache is enabled, size limit: 1024 MiB
srv          init: preserve_reasoning kwarg: true
"""


def test_each_key_comes_from_the_line_that_reports_it() -> None:
    got = effective_settings(LOG, {"total_slots": 2})
    assert got == {
        "ctx_size": "1536",
        "threads": "1",
        "batch_size": "1024",
        "ubatch_size": "256",
        "cache_type_k": "bf16",
        "cache_type_v": "f32",
        "parallel": "2",
        "cache_ram": "1024",
        "speculative.n_max": "5",
        "speculative.n_min": "2",
        "speculative.p_min": "0.25",
        "speculative.backend_sampling": "disabled",
        "speculative.draft": "/m/trunk.draft.gguf",
        "preserve_thinking": "enabled",
    }
    assert draft_loaded(LOG) == ("/m/trunk.draft.gguf", 14)


def test_a_draft_loaded_from_the_targets_file_shows_as_the_target() -> None:
    # the line after "loading draft model" names the file the loader really read
    wrong = LOG.replace("14 tensors from /m/trunk.draft.gguf", "60 tensors from /m/trunk.gguf")
    assert draft_loaded(wrong) == ("/m/trunk.gguf", 60)
    assert effective_settings(wrong)["speculative.draft"] == "/m/trunk.gguf"


def test_the_prompt_cache_off_and_unlimited() -> None:
    assert effective_settings("srv load: prompt cache is disabled - use `--cache-ram N`")["cache_ram"] == "0"
    assert effective_settings("prompt cache is enabled, size limit: no limit")["cache_ram"] == "-1"
    assert "cache_ram" not in effective_settings("")


def test_status_prints_asked_default_and_reported() -> None:
    console = Console(width=200, record=True)
    rows = [
        {
            "name": "demo-0",
            "settings": [
                {"key": "batch_size", "asked": "1024", "default": "2048", "effective": "1024"},
                {"key": "ubatch_size", "asked": None, "default": "512", "effective": "512"},
                {"key": "ctx_size", "asked": "4096", "default": "0", "effective": "2048"},
                {"key": "cache_ram", "asked": None, "default": "8192", "effective": None},
                {"key": "preserve_thinking", "asked": "enabled (--chat-template-kwargs {})", "effective": "enabled"},
            ],
        }
    ]
    _print_settings(console, rows)
    text = console.export_text()
    assert "batch_size: 1024 -> 1024\n" in text
    assert "ubatch_size: (left out: llama-server's default 512) -> 512" in text
    assert "preserve_thinking: enabled (--chat-template-kwargs {}) -> enabled\n" in text
    assert "ctx_size: 4096 -> 2048   <- differs" in text and "cache_ram: (left out" in text and "not reported" in text
