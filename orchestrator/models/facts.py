"""Model facts from a GGUF header: architecture, NextN/MTP head, template, tokenizer, memory.

``read_model_facts(path)`` reads only headers (see ``gguf_header``): metadata and tensor infos
of every split part, never tensor data, so a 20 GB model answers as fast as a 20 MB one.
``orchestrator.models.memory`` turns the facts into bytes.

Metadata keys follow the pinned llama.cpp (``src/llama-arch.cpp``, ``LLM_KV_NAMES``): per-model
keys carry the architecture as prefix (``qwen35moe.block_count``); ``_Meta`` adds that prefix in
one place and returns a default when a key is missing (after Ollama's ``fs/ggml/ggml.go``).
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from orchestrator.config.model_paths import SPLIT_RE
from orchestrator.errors import UserError
from orchestrator.models.gguf_header import ArraySummary, GGUFHeader, file_stamp, read_header
from orchestrator.models.tensor_facts import TensorTypeShare, expert_layer_bytes, output_rows, tensor_types

MtpKind = Literal["embedded", "draft-only", "none", "unsupported"]


#: Architecture names llama.cpp forks write for a model with its MTP head -> the upstream name
#: the pin knows (src/llama-arch.cpp). Model cards of such files say ``--spec-type mtp``; the pin
#: loads the upstream architecture with ``--spec-type draft-mtp`` and cannot load these files.
FORK_ARCHS = {"qwen35moe_mtp": "qwen35moe", "qwen35_mtp": "qwen35", "qwen3next_mtp": "qwen3next"}


def fork_upstream(arch: str) -> str | None:
    """The upstream architecture for a fork's ``arch`` (any ``*_mtp`` name counts as a fork's),
    or None when ``arch`` is not a fork's."""
    if arch in FORK_ARCHS:
        return FORK_ARCHS[arch]
    return arch.removesuffix("_mtp") if arch.endswith("_mtp") else None


# Hybrid architectures whose non-attention layers are gated-delta-net (recurrent) layers.
HYBRID_ARCHS = {"qwen35", "qwen35moe", "qwen3next"}


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
    output_rows: int = 0  # rows of the output matrix (vocabulary size of the logits), 0 = unknown
    expert_layer_bytes: tuple[int, ...] = ()  # per block: bytes of its routed experts (ffn_*_exps)
    projector: dict[str, Any] | None = None  # a vision/audio projector (mmproj, architecture clip): _projector

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (paths as strings)."""
        d = asdict(self)
        d["path"] = str(self.path)
        d["files"] = [str(p) for p in self.files]
        return d


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

    def integer(self, key: str, default: int | None = None) -> int | None:
        v = self.kv.get(key)
        if isinstance(v, bool):
            return int(v)
        if isinstance(v, int):
            return v
        if isinstance(v, list) and v and all(isinstance(x, int) for x in v):
            return int(max(v))  # per-layer arrays (e.g. head_count_kv): the largest bounds memory
        return default

    def arch_int(self, name: str, default: int | None = None) -> int | None:
        return self.integer(f"{self.arch}.{name}", default)

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
    bos = meta.integer("tokenizer.ggml.bos_token_id")
    eos = meta.integer("tokenizer.ggml.eos_token_id")
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
    upstream = fork_upstream(arch)
    if upstream is not None:
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
    files = split_parts(Path(path))
    try:
        stamps = tuple((str(part), *file_stamp(part)) for part in files)
    except OSError:  # unreadable: read_header says what is wrong
        stamps = ()
    # the same files as last time: the same facts. A plan reads every model's facts, and every
    # reload, `status` or folder scan plans again; a Qwen tokenizer alone is 0.1-0.2 s of Python
    return _facts_of(str(path), stamps) if stamps else _facts_of.__wrapped__(str(path), ())


@functools.lru_cache(maxsize=64)
def _facts_of(name: str, stamps: tuple[tuple[Any, ...], ...]) -> ModelFacts:
    """``read_model_facts`` of ``name`` as of ``stamps`` (each part's stat): shared, never modify it."""
    files, headers, meta = _read_headers(Path(name))
    first, arch = headers[0], meta.arch
    tensors = [t for h in headers for t in h.tensors]
    block_count = meta.arch_int("block_count", 0) or 0
    nextn = meta.arch_int("nextn_predict_layers", 0) or 0
    trunk = max(block_count - nextn, 0)
    attention, recurrent = _layer_kinds(meta, arch, trunk)
    mtp, mtp_message = _mtp(arch, nextn, block_count, {t.name for t in tensors})
    nextn_prefixes = tuple(f"blk.{i}." for i in range(trunk, block_count))
    nextn_bytes = sum(t.nbytes or 0 for t in tensors if t.name.startswith(nextn_prefixes)) if nextn else 0
    head_count, key_length, value_length = _head_dims(meta)
    return ModelFacts(
        path=files[0],
        files=files,
        file_size=sum(h.file_size for h in headers),
        gguf_version=first.version,
        architecture=arch,
        name=meta.string("general.name"),
        parameter_count=sum(t.n_elements for t in tensors),
        tensor_types=tensor_types(tensors),
        context_length=meta.arch_int("context_length"),
        embedding_length=meta.arch_int("embedding_length"),
        block_count=block_count,
        trunk_layers=trunk,
        nextn_layers=nextn,
        attention_layers=attention,
        recurrent_layers=recurrent,
        head_count=head_count,
        head_count_kv=meta.arch_int("attention.head_count_kv", head_count),
        key_length=key_length,
        value_length=value_length,
        ssm=_ssm(meta),
        expert_count=meta.arch_int("expert_count"),
        expert_used_count=meta.arch_int("expert_used_count"),
        mtp=mtp,
        mtp_message=mtp_message,
        nextn_bytes=nextn_bytes,
        weights_bytes=sum(t.nbytes or 0 for t in tensors),
        chat_template=_template(meta),
        tokenizer=_tokenizer(meta),
        split_count=len(files),
        output_rows=output_rows(tensors),
        expert_layer_bytes=expert_layer_bytes(tensors, block_count),
        projector=_projector(meta) if arch == "clip" else None,
    )


def _projector(meta: _Meta) -> dict[str, Any]:
    """What a projector GGUF says of itself (``tools/mtmd/clip.cpp`` ``load_hparams`` reads the same
    keys): its type, the text width it projects to (the model's ``embedding_length`` must equal it),
    the image size and patch it works at, and the tokens one image at that size becomes."""
    image, patch = meta.integer("clip.vision.image_size"), meta.integer("clip.vision.patch_size")
    return {
        "type": meta.string("clip.projector_type") or meta.string("clip.vision.projector_type"),
        "vision": bool(meta.raw("clip.has_vision_encoder")),
        "audio": bool(meta.raw("clip.has_audio_encoder")),
        "projection_dim": meta.integer("clip.vision.projection_dim"),
        "image_size": image,
        "patch_size": patch,
        "vision_blocks": meta.integer("clip.vision.block_count"),
        "tokens_per_image": (image // patch) ** 2 if image and patch else None,
    }


def _head_dims(meta: _Meta) -> tuple[int | None, int | None, int | None]:
    """(head_count, key_length, value_length) per head; key_length defaults to
    ``embedding_length / head_count`` as llama.cpp's ``n_embd_head_k`` does."""
    key_length = meta.arch_int("attention.key_length")
    head_count = meta.arch_int("attention.head_count")
    embd = meta.arch_int("embedding_length")
    if key_length is None and head_count and embd:
        key_length = embd // head_count
    return head_count, key_length, meta.arch_int("attention.value_length", key_length)


def _ssm(meta: _Meta) -> dict[str, int]:
    """The recurrent (gated-delta-net / SSM) sizes present in the header."""
    keys = ("conv_kernel", "inner_size", "state_size", "time_step_rank", "group_count")
    return {k: v for k in keys if (v := meta.arch_int(f"ssm.{k}")) is not None}


def _read_headers(path: Path) -> tuple[list[Path], list[GGUFHeader], _Meta]:
    """Every part's header, and typed access to the first part's metadata."""
    files = split_parts(path)
    headers = [read_header(p) for p in files]
    arch = headers[0].metadata.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise UserError(f"{files[0]}: GGUF file without general.architecture (a vocab-only or broken file?)")
    meta = _Meta(headers[0].metadata, arch)
    declared = meta.integer("split.count", 1) or 1
    if declared != len(files):
        raise UserError(
            f"{files[0]}: header says split.count={declared} but {len(files)} file(s) were found",
            hint="name split parts <name>-00001-of-0000N.gguf and keep them together",
        )
    return files, headers, meta
