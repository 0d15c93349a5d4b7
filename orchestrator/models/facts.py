"""Model facts from a GGUF header: architecture, NextN/MTP head, template, tokenizer, memory.

``read_model_facts(path)`` reads only headers (see ``gguf_header``): metadata and tensor infos
of every split part, never tensor data, so a 20 GB model answers as fast as a 20 MB one.
``estimate_memory(facts, ctx)`` turns the facts into bytes for weights, KV cache and recurrent
state. ``cli_inspect`` is ``orchestrator inspect``.

Metadata keys follow the pinned llama.cpp (``src/llama-arch.cpp``, ``LLM_KV_NAMES``): per-model
keys carry the architecture as prefix (``qwen35moe.block_count``); ``_Meta`` adds that prefix in
one place and returns a default when a key is missing (after Ollama's ``fs/ggml/ggml.go``).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from orchestrator.errors import UserError
from orchestrator.models.gguf_header import ArraySummary, GGUFHeader, read_header

MtpKind = Literal["embedded", "draft-only", "none", "unsupported"]

# ``<prefix>-00001-of-00003.gguf``: llama.cpp's split naming (``llama_split_path`` in src/llama.cpp)
SPLIT_RE = re.compile(r"^(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")

# Architectures from llama.cpp forks whose MTP layout the pin cannot load. Model cards for such
# files use ``--spec-type mtp``; the pin's architecture is ``qwen35moe`` with ``draft-mtp``.
FORK_MTP_ARCHS = {"qwen35moe_mtp": "qwen35moe"}

# Hybrid architectures whose non-attention layers are gated-delta-net (recurrent) layers.
HYBRID_ARCHS = {"qwen35", "qwen35moe", "qwen3next"}

# Bytes per element of the KV cache types llama-server accepts (``--cache-type-k/-v``).
KV_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")


@dataclass
class TensorTypeShare:
    """How many tensors of one ggml type a model has and how many bytes they take."""

    count: int = 0
    bytes: int = 0


@dataclass
class TokenizerFacts:
    """The tokenizer as the header describes it (``tokenizer.ggml.*``)."""

    model: str | None = None  # e.g. "gpt2" (BPE), "llama" (SentencePiece)
    pre: str | None = None  # pre-tokenizer, e.g. "qwen35"
    vocab_size: int = 0  # tokens
    bos_id: int | None = None
    bos_text: str | None = None
    eos_id: int | None = None
    eos_text: str | None = None


@dataclass
class TemplateFacts:
    """The embedded chat template (``tokenizer.chat_template``)."""

    present: bool = False
    sha256: str | None = None  # first 12 hex digits of the UTF-8 text's sha256
    family: str | None = None  # "qwen3.5", "qwen3-coder", "qwen3", "chatml" or None (unknown)
    chars: int = 0


@dataclass
class ModelFacts:
    """Facts about a GGUF model, from its header(s) only. Sizes in bytes, lengths in tokens.

    ``mtp`` says where the NextN/MTP head is: ``embedded`` (trunk and head in one file; serve
    with ``--spec-type draft-mtp``), ``draft-only`` (a NextN-only file for ``-md``),
    ``none``, or ``unsupported`` (a fork architecture such as ``qwen35moe_mtp``; see
    ``mtp_message``).
    """

    path: Path
    files: list[Path]
    file_size: int
    gguf_version: int
    architecture: str
    name: str | None
    parameter_count: int
    tensor_types: dict[str, TensorTypeShare]
    context_length: int | None
    embedding_length: int | None
    block_count: int  # all blocks, NextN blocks included
    trunk_layers: int  # blocks the main forward pass runs
    nextn_layers: int
    attention_layers: int  # trunk full-attention layers (own a KV cache)
    recurrent_layers: int  # trunk gated-delta-net / SSM layers (own a recurrent state)
    head_count: int | None
    head_count_kv: int | None
    key_length: int | None  # per head
    value_length: int | None  # per head
    ssm: dict[str, int]  # conv_kernel, inner_size, state_size, time_step_rank, group_count
    expert_count: int | None
    expert_used_count: int | None
    mtp: MtpKind
    mtp_message: str | None
    nextn_bytes: int  # weights of the NextN block(s): loaded only with --spec-type draft-mtp
    weights_bytes: int
    chat_template: TemplateFacts
    tokenizer: TokenizerFacts
    split_count: int = 1

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (paths as strings)."""
        d = asdict(self)
        d["path"] = str(self.path)
        d["files"] = [str(p) for p in self.files]
        return d


@dataclass
class MemoryEstimate:
    """Bytes a llama-server needs for one model (host or device memory), before compute buffers.

    ``total = weights + kv_cache + recurrent_state``; llama.cpp adds compute buffers on top
    (hundreds of MiB on large models), so leave headroom.
    """

    ctx: int  # tokens (llama-server ``-c``)
    n_parallel: int
    kv_type: str
    draft_n_max: int
    weights: int
    kv_cache: int
    recurrent_state: int
    total: int


class _Meta:
    """Typed access to metadata; ``arch_*`` getters add the ``<arch>.`` prefix."""

    def __init__(self, metadata: dict[str, Any], arch: str) -> None:
        self.kv = metadata
        self.arch = arch

    def raw(self, key: str, default: Any = None) -> Any:
        return self.kv.get(key, default)

    def string(self, key: str) -> str | None:
        v = self.kv.get(key)
        return v if isinstance(v, str) else None

    def int(self, key: str, default: int | None = None) -> int | None:
        v = self.kv.get(key)
        if isinstance(v, bool):
            return int(v)
        if isinstance(v, int):
            return v
        if isinstance(v, list) and v and all(isinstance(x, int) for x in v):
            return max(v)  # per-layer arrays (e.g. head_count_kv): the largest bounds memory
        return default

    def arch_int(self, name: str, default: int | None = None) -> int | None:
        return self.int(f"{self.arch}.{name}", default)

    def arch_raw(self, name: str, default: Any = None) -> Any:
        return self.kv.get(f"{self.arch}.{name}", default)


def split_parts(path: Path) -> list[Path]:
    """All files of a split model, given any part; ``[path]`` for an unsplit file.

    Raises ``UserError`` naming the first missing part.
    """
    m = SPLIT_RE.match(path.name)
    if not m:
        return [path]
    count = int(m["count"])
    parts = [path.with_name(f"{m['prefix']}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1)]
    missing = [p for p in parts if not p.exists()]
    if missing:
        raise UserError(
            f"{missing[0]}: split part {parts.index(missing[0]) + 1} of {count} is missing",
            hint=f"download every part of {m['prefix']}-*-of-{count:05d}.gguf into {path.parent}",
        )
    return parts


def template_family(text: str) -> str | None:
    """Name the template family from marks in its text (None when unknown).

    ``qwen3.5`` (also used by Qwen3.6): ChatML with ``<think>`` and the XML tool-call format
    (``<function=``) plus vision markers; ``qwen3-coder``: ChatML with ``<function=`` only;
    ``qwen3``: ChatML with ``<think>``; ``chatml``: any other ``<|im_start|>`` template.
    """
    if "<|im_start|>" not in text:
        return None
    if "<function=" in text and "vision_start" in text and "<think>" in text:
        return "qwen3.5"
    if "<function=" in text:
        return "qwen3-coder"
    if "<think>" in text or "enable_thinking" in text:
        return "qwen3"
    return "chatml"


def _token_text(tokens: Any, idx: int | None) -> str | None:
    if idx is None or not isinstance(tokens, list) or not 0 <= idx < len(tokens):
        return None
    return str(tokens[idx])


def _tokenizer(meta: _Meta) -> TokenizerFacts:
    tokens = meta.raw("tokenizer.ggml.tokens")
    size = len(tokens) if isinstance(tokens, (list, ArraySummary)) else 0
    bos = meta.int("tokenizer.ggml.bos_token_id")
    eos = meta.int("tokenizer.ggml.eos_token_id")
    return TokenizerFacts(
        model=meta.string("tokenizer.ggml.model"),
        pre=meta.string("tokenizer.ggml.pre"),
        vocab_size=size,
        bos_id=bos,
        bos_text=_token_text(tokens, bos),
        eos_id=eos,
        eos_text=_token_text(tokens, eos),
    )


def _template(meta: _Meta) -> TemplateFacts:
    text = meta.string("tokenizer.chat_template")
    if not text:
        return TemplateFacts()
    return TemplateFacts(
        present=True,
        sha256=hashlib.sha256(text.encode("utf-8")).hexdigest()[:12],
        family=template_family(text),
        chars=len(text),
    )


def _layer_kinds(meta: _Meta, arch: str, trunk: int) -> tuple[int, int]:
    """(attention, recurrent) trunk layer counts, by the rule of the pin's qwen35/qwen35moe
    loaders: ``attention.recurrent_layers`` when present, else every ``full_attention_interval``-th
    layer (default 4) is full attention."""
    if arch not in HYBRID_ARCHS:
        return trunk, 0
    flags = meta.arch_raw("attention.recurrent_layers")
    if isinstance(flags, list) and len(flags) >= trunk:
        recurrent = sum(1 for f in flags[:trunk] if f)
        return trunk - recurrent, recurrent
    interval = meta.arch_int("full_attention_interval", 4) or 4
    attention = sum(1 for i in range(trunk) if (i + 1) % interval == 0)
    return attention, trunk - attention


def _mtp(arch: str, nextn: int, block_count: int, names: set[str]) -> tuple[MtpKind, str | None]:
    """Classify the NextN head like the pin does (``load_arch_tensors`` in src/models/qwen35moe.cpp:
    a file with NextN layers but no ``blk.0.attn_norm.weight`` is an MTP-only draft)."""
    if arch in FORK_MTP_ARCHS or arch.endswith("_mtp"):
        upstream = FORK_MTP_ARCHS.get(arch, arch.removesuffix("_mtp"))
        return "unsupported", (
            f"architecture '{arch}' comes from a llama.cpp fork (its model cards say `--spec-type mtp`); "
            f"the pinned llama.cpp loads '{upstream}' with `--spec-type draft-mtp` "
            "and cannot load this file: use a GGUF converted by upstream convert_hf_to_gguf.py"
        )
    if nextn <= 0:
        return "none", None
    head = f"blk.{block_count - 1}.nextn.eh_proj.weight"
    if head not in names:
        return "none", f"declares {nextn} NextN layer(s) but has no {head}: the MTP head was stripped"
    if "blk.0.attn_norm.weight" in names:
        return "embedded", None
    return "draft-only", "NextN-only draft: serve it with `-md` next to its trunk model and `--spec-type draft-mtp`"


def read_model_facts(path: Path) -> ModelFacts:
    """Read the facts of the GGUF model at ``path`` (for split models, any part; all parts are read).

    Reads headers only (metadata and tensor infos), never tensor data.

    Raises:
        UserError: missing file or split part, not a GGUF file, unsupported GGUF version,
            corrupt or truncated file (see ``gguf_header.read_header``), or no
            ``general.architecture`` key.
    """
    path = Path(path)
    files = split_parts(path)
    headers: list[GGUFHeader] = [read_header(p) for p in files]
    first = headers[0]
    arch = first.metadata.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise UserError(f"{files[0]}: GGUF file without general.architecture (a vocab-only or broken file?)")
    meta = _Meta(first.metadata, arch)
    declared = meta.int("split.count", 1) or 1
    if declared != len(files):
        raise UserError(
            f"{files[0]}: header says split.count={declared} but {len(files)} file(s) were found",
            hint="name split parts <name>-00001-of-0000N.gguf and keep them together",
        )

    tensors = [t for h in headers for t in h.tensors]
    names = {t.name for t in tensors}
    types: dict[str, TensorTypeShare] = {}
    for t in tensors:
        share = types.setdefault(t.type_name, TensorTypeShare())
        share.count += 1
        share.bytes += t.nbytes or 0

    block_count = meta.arch_int("block_count", 0) or 0
    nextn = meta.arch_int("nextn_predict_layers", 0) or 0
    trunk = max(block_count - nextn, 0)
    attention, recurrent = _layer_kinds(meta, arch, trunk)
    mtp, mtp_message = _mtp(arch, nextn, block_count, names)
    nextn_prefixes = tuple(f"blk.{i}." for i in range(trunk, block_count))
    nextn_bytes = sum(t.nbytes or 0 for t in tensors if t.name.startswith(nextn_prefixes)) if nextn else 0

    key_length = meta.arch_int("attention.key_length")
    head_count = meta.arch_int("attention.head_count")
    embd = meta.arch_int("embedding_length")
    if key_length is None and head_count and embd:
        key_length = embd // head_count  # llama.cpp's default n_embd_head_k
    value_length = meta.arch_int("attention.value_length", key_length)

    ssm = {
        k: v
        for k in ("conv_kernel", "inner_size", "state_size", "time_step_rank", "group_count")
        if (v := meta.arch_int(f"ssm.{k}")) is not None
    }
    return ModelFacts(
        path=files[0],
        files=files,
        file_size=sum(h.file_size for h in headers),
        gguf_version=first.version,
        architecture=arch,
        name=meta.string("general.name"),
        parameter_count=sum(t.n_elements for t in tensors),
        tensor_types=dict(sorted(types.items(), key=lambda kv: -kv[1].bytes)),
        context_length=meta.arch_int("context_length"),
        embedding_length=embd,
        block_count=block_count,
        trunk_layers=trunk,
        nextn_layers=nextn,
        attention_layers=attention,
        recurrent_layers=recurrent,
        head_count=head_count,
        head_count_kv=meta.arch_int("attention.head_count_kv", head_count),
        key_length=key_length,
        value_length=value_length,
        ssm=ssm,
        expert_count=meta.arch_int("expert_count"),
        expert_used_count=meta.arch_int("expert_used_count"),
        mtp=mtp,
        mtp_message=mtp_message,
        nextn_bytes=nextn_bytes,
        weights_bytes=sum(t.nbytes or 0 for t in tensors),
        chat_template=_template(meta),
        tokenizer=_tokenizer(meta),
        split_count=len(files),
    )


def _kv_type_bytes(kv_type: str) -> float:
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    name = kv_type.lower()
    if name not in KV_TYPES:
        raise UserError(f"unknown KV cache type {kv_type!r}", hint=f"use one of: {', '.join(KV_TYPES)}")
    block, size = GGML_QUANT_SIZES[GGMLQuantizationType[name.upper()]]
    return size / block


def estimate_memory(
    facts: ModelFacts, ctx: int, n_parallel: int = 1, kv_type: str = "f16", *, draft_n_max: int = 0
) -> MemoryEstimate:
    """Estimate the memory (bytes) llama-server needs for ``facts`` at context ``ctx`` tokens.

    Formula (the pinned llama.cpp's ``llama_kv_cache`` and ``llama_memory_recurrent``)::

        weights   = sum of tensor bytes, minus the NextN block unless draft_n_max > 0
                    (llama.cpp loads the NextN tensors only with --spec-type draft-mtp)
        kv_cache  = ctx * A * head_count_kv * (key_length + value_length) * bytes(kv_type)
                    A = trunk full-attention layers, + nextn layers when draft_n_max > 0
                    (the MTP draft context keeps its own KV for the NextN block, ctx cells);
                    -c is the total over all slots, so n_parallel does not change it
        recurrent = R * (r + s) * 4 * max(1, n_parallel) * (1 + n_rs)
                    R = gated-delta-net layers, r = (conv_kernel - 1) * (inner_size +
                    2 * group_count * state_size), s = state_size * inner_size (F32 states);
                    n_rs = draft_n_max snapshots per sequence for draft rollback (cparams.n_rs_seq)
        total     = weights + kv_cache + recurrent

    Compute buffers are not included.

    Args:
        facts: from ``read_model_facts``.
        ctx: total context (tokens), as llama-server's ``-c``.
        n_parallel: slots (``-np``).
        kv_type: ``--cache-type-k/-v``: f16 (default), f32, bf16, q8_0, q4_0, ...
        draft_n_max: ``--spec-draft-n-max`` when serving with ``--spec-type draft-mtp``; 0 = no MTP.

    Raises:
        UserError: unknown ``kv_type`` or a non-positive ``ctx``.
    """
    if ctx <= 0:
        raise UserError(f"context length must be positive, got {ctx}")
    per_elem = _kv_type_bytes(kv_type)
    with_mtp = draft_n_max > 0 and facts.nextn_layers > 0
    weights = facts.weights_bytes - (0 if with_mtp else facts.nextn_bytes)
    attn_layers = facts.attention_layers + (facts.nextn_layers if with_mtp else 0)
    kv_width = (facts.head_count_kv or 0) * ((facts.key_length or 0) + (facts.value_length or 0))
    kv = int(ctx * attn_layers * kv_width * per_elem)
    s = facts.ssm
    conv = max(s.get("conv_kernel", 0) - 1, 0) * (
        s.get("inner_size", 0) + 2 * s.get("group_count", 0) * s.get("state_size", 0)
    )
    state = s.get("state_size", 0) * s.get("inner_size", 0)
    n_rs = draft_n_max if draft_n_max > 0 else 0
    recurrent = facts.recurrent_layers * (conv + state) * 4 * max(1, n_parallel) * (1 + n_rs)
    return MemoryEstimate(
        ctx=ctx,
        n_parallel=n_parallel,
        kv_type=kv_type,
        draft_n_max=draft_n_max,
        weights=weights,
        kv_cache=kv,
        recurrent_state=recurrent,
        total=weights + kv + recurrent,
    )


# --- CLI --------------------------------------------------------------------------------------


def _gib(n: int) -> str:
    if n >= 1 << 30:
        return f"{n / (1 << 30):.2f} GiB"
    return f"{n / (1 << 20):.1f} MiB"


def _load_messages(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"{path}: cannot read ({err})") from None
    except json.JSONDecodeError as err:
        raise UserError(f"{path}:{err.lineno}:{err.colno}: not valid JSON ({err.msg})") from None
    except RecursionError:
        raise UserError(f"{path}: JSON nested too deeply to read") from None
    if isinstance(data, list):
        return {"messages": data}
    if isinstance(data, dict) and "messages" in data:
        return data
    raise UserError(f'{path}: expected a JSON list of messages or an object with "messages"')


def render_prompt(model: Path, messages_file: Path) -> str:
    """The prompt text llama-server will see for the request in ``messages_file`` after the
    proxy's request repair (``orchestrator.serve.request_repair``), rendered with the model's own template.

    Raises ``UserError`` for unreadable JSON, a request the proxy would refuse, or a template
    error (the message quotes the template's rule).
    """
    from orchestrator.errors import ApiError

    body = _load_messages(messages_file)
    messages = body["messages"]
    try:
        from orchestrator.serve.request_repair import RepairPolicy, repair_request
    except ImportError:  # request repair not available: render the messages as given
        pass
    else:
        try:
            body = repair_request(body, RepairPolicy()).body
        except ApiError as err:
            where = f" ({err.param})" if err.param else ""
            raise UserError(f"{messages_file}: the proxy would refuse this request{where}: {err.message}") from None
        messages = body["messages"]
    ctk = body.get("chat_template_kwargs") or {}
    thinking = ctk.get("enable_thinking") if isinstance(ctk, dict) else None
    try:
        from orchestrator.models.runtime import render_chat
    except ImportError:
        raise UserError(
            "cannot render: orchestrator.models.runtime is not available",
            hint="reinstall the orchestrator package",
        ) from None
    tools = body.get("tools") if isinstance(body.get("tools"), list) else None
    return str(render_chat(model, messages, add_generation_prompt=True, enable_thinking=thinking, tools=tools))


def _table(facts: ModelFacts, mem: MemoryEstimate | None, mem_mtp: MemoryEstimate | None) -> Any:
    from rich.table import Table

    t = Table(title=str(facts.path), show_header=False, title_justify="left")
    t.add_column("fact", style="bold")
    t.add_column("value")
    files = f"{facts.split_count} files" if facts.split_count > 1 else "1 file"
    t.add_row("architecture", facts.architecture)
    t.add_row("name", facts.name or "-")
    t.add_row("size", f"{_gib(facts.file_size)} ({facts.file_size:,} bytes, {files}, GGUF v{facts.gguf_version})")
    t.add_row("parameters", f"{facts.parameter_count:,}")
    t.add_row(
        "tensor types", ", ".join(f"{k} x{v.count} ({_gib(v.bytes)})" for k, v in facts.tensor_types.items()) or "-"
    )
    t.add_row("context length", f"{facts.context_length:,}" if facts.context_length else "-")
    t.add_row(
        "layers",
        f"{facts.block_count} blocks: {facts.trunk_layers} trunk "
        f"({facts.attention_layers} attention, {facts.recurrent_layers} recurrent) + {facts.nextn_layers} NextN",
    )
    mtp = facts.mtp + (f" ({facts.mtp_message})" if facts.mtp_message else "")
    t.add_row("NextN/MTP head", mtp)
    if facts.expert_count:
        t.add_row("experts", f"{facts.expert_used_count} of {facts.expert_count} used per token")
    tpl = facts.chat_template
    t.add_row(
        "chat template",
        f"{tpl.family or 'unknown family'} (sha256 {tpl.sha256}, {tpl.chars:,} chars)" if tpl.present else "none",
    )
    tok = facts.tokenizer
    t.add_row(
        "tokenizer",
        f"{tok.model or '-'} / {tok.pre or '-'}, {tok.vocab_size:,} tokens, "
        f"BOS {tok.bos_id} {tok.bos_text!r}, EOS {tok.eos_id} {tok.eos_text!r}",
    )
    if facts.split_count > 1:
        t.add_row("split files", "\n".join(p.name for p in facts.files))
    for label, m in (("memory", mem), ("memory with MTP", mem_mtp)):
        if m is not None:
            t.add_row(
                f"{label} (ctx {m.ctx:,})",
                f"{_gib(m.total)} = weights {_gib(m.weights)} + KV {_gib(m.kv_cache)} ({m.kv_type}) "
                f"+ recurrent {_gib(m.recurrent_state)}" + (f" [draft n_max {m.draft_n_max}]" if m.draft_n_max else ""),
            )
    return t


def _builtin_path(name: str) -> Path:
    """``builtin:tiny-mtp`` -> the generated demo GGUF, as models.yaml resolves it."""
    from orchestrator.config.schema import BUILTIN_MODELS

    if name not in BUILTIN_MODELS:
        raise UserError(f"unknown builtin model {name!r}", hint=f"known: {', '.join(BUILTIN_MODELS)}")
    from orchestrator.models.tiny import demo_model

    return demo_model()


def cli_inspect(path: Path, json_out: bool = False, ctx: int | None = None, render: Path | None = None) -> int:
    """``orchestrator inspect PATH``: print the model's facts (rich table, or JSON with ``--json``).

    ``--ctx N`` sets the context (tokens) of the memory estimate (default: the model's context
    length, capped at 32,768). ``--render messages.json`` prints the prompt instead.
    Returns 0; raises ``UserError`` (exit 2) for every problem with the file.
    """
    if str(path).startswith("builtin:"):
        path = _builtin_path(str(path))
    facts = read_model_facts(path)
    if render is not None:
        print(render_prompt(facts.path, render), end="")
        return 0
    # `--ctx 0` is a mistake to report, not a request for the default
    ctx_used = ctx if ctx is not None else min(facts.context_length or 4096, 32768)
    mem = estimate_memory(facts, ctx_used)
    mem_mtp = estimate_memory(facts, ctx_used, draft_n_max=3) if facts.mtp == "embedded" else None
    if json_out:
        out = facts.to_json()
        out["memory"] = asdict(mem)
        out["memory_mtp"] = asdict(mem_mtp) if mem_mtp else None
        print(json.dumps(out, indent=2))
        return 0
    from rich.console import Console

    Console().print(_table(facts, mem, mem_mtp))
    return 0
