"""llama-server's command line, rendered from ``ServerArgs`` by small pure functions.

The argv is never edited after rendering: a different launch (speculation off, another draft
length, another port) is a new ``ServerArgs`` made with ``dataclasses.replace``, rendered again.
Flag spellings are checked against the pin's common/arg.cpp (``llama-server --help``); every
flag rendered here is in ``orchestrator.config.plan_flags.PLAN_FLAGS`` (a test checks), so
``extra_args`` cannot fight the plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Speculation:
    """MTP speculative decoding flags. Draft lengths in tokens; ``draft`` is a NextN-only GGUF."""

    type: str  # "draft-mtp", "ngram-mod" or "draft-mtp,ngram-mod" (--spec-type takes a list)
    n_max: int
    n_min: int
    p_min: float | None = None
    draft: Path | None = None
    ngram_mod: tuple[int, int, int] | None = None  # n_match, n_min, n_max of the ngram-mod drafter
    # the draft sampled on the GPU: True --spec-draft-backend-sampling, False --no-spec-draft-backend-sampling,
    # None neither (llama-server's default, on at the pin: common/common.h)
    backend_sampling: bool | None = None
    sampling: str | None = None  # --spec-draft-sampling greedy|probabilistic; None: llama-server's default


@dataclass(frozen=True)
class ServerArgs:
    """Everything the command line of one llama-server says.

    ``program`` is the executable (the build's llama-server; tests put an interpreter and a
    script here). ``gpu_layers`` None leaves ``-ngl`` out (a CPU instance); ``port`` 0 lets
    llama-server bind a port the OS picks. ``extra_args`` (models.yaml) come last.
    """

    program: tuple[str, ...]
    model: Path
    alias: str
    host: str
    port: int
    ctx_size: int
    parallel: int
    threads: int | None = None
    batch_size: int | None = None  # -b (logical batch); None: llama-server's default
    ubatch_size: int | None = None  # -ub (physical batch: prefill tokens per step)
    cache_type_k: str | None = None  # --cache-type-k; None: llama-server's default (f16)
    cache_type_v: str | None = None  # --cache-type-v
    cache_ram: int | None = None  # --cache-ram (MiB); None: llama-server's default (8192)
    gpu_layers: str | None = None
    mmproj: Path | None = None  # --mmproj: the vision projector (models.yaml mmproj)
    speculation: Speculation | None = None
    tensor_split: str | None = None
    slot_save_path: Path | None = None  # kv_persist: where POST /slots/{id}?action=save writes
    rpc: tuple[str, ...] = ()  # RPC workers (host:port) sharing the layers: --rpc a,b
    sse_ping: int | None = None  # --sse-ping-interval (s): a silent stream gets an SSE comment this often
    fit: bool | None = None  # --fit on|off; None: neither (llama-server's default: on at the pin)
    chat_template_file: Path | None = None  # a cache-stable rewrite of the GGUF's template
    template_kwargs: str | None = None  # --chat-template-kwargs (JSON): {"preserve_thinking": true}
    # False: --no-reasoning-preserve (preserve_thinking: false). The pin keeps earlier turns' reasoning
    # by default (common/arg.cpp sets the preserve_reasoning kwarg, which sets the template's
    # preserve_thinking), so leaving the flag out could not turn it off. None: neither.
    reasoning_preserve: bool | None = None
    extra_args: tuple[str, ...] = ()


def render_argv(args: ServerArgs) -> tuple[str, ...]:
    """The argv (a list for ``exec``, never a shell string) for ``args``."""
    return (
        *args.program,
        *_identity(args),
        *_resources(args),
        *(("--mmproj", str(args.mmproj)) if args.mmproj else ()),
        *_speculation(args.speculation),
        *(("--tensor-split", args.tensor_split) if args.tensor_split else ()),
        *(("--slot-save-path", str(args.slot_save_path)) if args.slot_save_path else ()),
        *(("--rpc", ",".join(args.rpc)) if args.rpc else ()),
        *(("--sse-ping-interval", str(args.sse_ping)) if args.sse_ping is not None else ()),
        *(("--fit", "on" if args.fit else "off") if args.fit is not None else ()),
        *(("--chat-template-file", str(args.chat_template_file)) if args.chat_template_file else ()),
        *(("--chat-template-kwargs", args.template_kwargs) if args.template_kwargs else ()),
        *(_on_off("reasoning-preserve", args.reasoning_preserve)),
        *args.extra_args,
    )


def _on_off(name: str, value: bool | None) -> tuple[str, ...]:
    """``--NAME`` for True, ``--no-NAME`` for False, nothing for None (llama-server's default)."""
    return () if value is None else (f"--{name}" if value else f"--no-{name}",)


def _identity(args: ServerArgs) -> tuple[str, ...]:
    return ("-m", str(args.model), "--alias", args.alias, "--host", args.host, "--port", str(args.port), "--metrics")


def _resources(args: ServerArgs) -> tuple[str, ...]:
    out: tuple[str, ...] = ("-c", str(args.ctx_size), "-np", str(args.parallel))
    if args.threads is not None:
        out += ("-t", str(args.threads))
    if args.batch_size is not None:
        out += ("-b", str(args.batch_size))
    if args.ubatch_size is not None:
        out += ("-ub", str(args.ubatch_size))
    if args.cache_type_k is not None:
        out += ("--cache-type-k", args.cache_type_k)
    if args.cache_type_v is not None:
        out += ("--cache-type-v", args.cache_type_v)
    if args.cache_ram is not None:
        out += ("--cache-ram", str(args.cache_ram))
    if args.gpu_layers is not None:
        out += ("-ngl", args.gpu_layers)
    # verbosity 4 makes llama.cpp log its model buffers (CUDA0 or CPU): how readiness tells a GPU
    # instance that really loaded on the GPU from one that fell back to the CPU; and the settings
    # it took (the draft's n_max/p_min/backend sampling, the prompt cache's size): how `status`
    # reads them back (supervise/effective.py). A handful of lines per request, not per token.
    return (*out, "-lv", "4")


def _speculation(spec: Speculation | None) -> tuple[str, ...]:
    if spec is None:
        return ()
    out: tuple[str, ...] = (
        "--spec-type",
        spec.type,
        "--spec-draft-n-max",
        str(spec.n_max),
        "--spec-draft-n-min",
        str(spec.n_min),
    )
    if spec.p_min is not None:
        out += ("--spec-draft-p-min", f"{spec.p_min:g}")
    if spec.draft is not None:
        out += ("-md", str(spec.draft))
    out += _on_off("spec-draft-backend-sampling", spec.backend_sampling)
    if spec.sampling is not None:
        out += ("--spec-draft-sampling", spec.sampling)
    if spec.ngram_mod is not None:
        n_match, n_min, n_max = spec.ngram_mod
        out += ("--spec-ngram-mod-n-match", str(n_match), "--spec-ngram-mod-n-min", str(n_min))
        out += ("--spec-ngram-mod-n-max", str(n_max))
    return out
