"""A tiny ``qwen35moe`` GGUF with a NextN/MTP head: the demo and test model.

``write_tiny_model(out)`` writes a 16 MB model that the pinned llama-server loads on CPU and
serves with ``--spec-type draft-mtp``: 4 trunk layers (3 gated-delta-net + 1 full attention,
``full_attention_interval = 4``), MoE with 4 experts (2 used) plus a shared expert, one NextN
block (``blk.4.nextn.*``, ``nextn_predict_layers = 1``), the Qwen tokenizer copied from the
pinned source (``models/ggml-vocab-qwen35.gguf``) and the Qwen3.5 chat template
(``models/templates/Qwen3.5-4B.jinja``). Tensor names and shapes follow
``src/models/qwen35moe.cpp`` (``load_arch_tensors``) and ``src/models/qwen35.cpp`` (dense).

Modes
-----
``echo`` (default): known output and tunable acceptance.

* The trunk's greedy next token is ``f(t)``: **the next "clean" token id after t** (clean: a
  normal token whose text is valid UTF-8 without control characters and that llama.cpp does
  not turn into a control/EOG token by name, like ``</s>``; wraps around). So a
  generation counts upward through the vocabulary from the prompt's last token, and never
  produces a control/EOG token. A non-clean input token (``<|im_end|>``, a lone byte) behaves
  like the clean token just below it.
* How: every embedding is a codeword of the extended BCH [32, 21, 6] code scaled to a unit
  vector, so two tokens' embeddings have cosine <= 0.625; the output row of ``f(t)`` is
  ``t``'s embedding (rows of non-clean tokens are zero); every write into the residual stream
  is scaled by 1e-3, so the final hidden state stays ~``embed(t)``; ``output_norm`` = 16
  makes the argmax margin >= 34 logits.
* The NextN block's ``eh_proj = [I | 0]`` keeps only the embedding half of
  ``concat(enorm(embed(x[p+1])), hnorm(h[p]))`` (src/models/qwen35moe.cpp, ``graph_mtp``), so
  the head predicts ``f(x[p+1]) = x[p+2]`` exactly.
* Acceptance ``1 - q``: a seeded fraction ``q`` of clean tokens is "flagged"; a flagged token's
  codeword has bit 0 set (embedding coordinate 0 > 0). In the NextN block the shared expert
  computes ``silu(16 * x0) * x0`` (about 16 when flagged, about 2e-6 otherwise) and writes it
  along a fixed "junk" direction, so the head's draft for the token after a flagged token is
  wrong and gets rejected. Each draft input is a token never seen before, so acceptance is
  Bernoulli(1 - q) per drafted token. (The same thing could zero head rows, but that needs a
  third vocabulary-sized matrix: 5 MB more.)

``random``: seeded random weights at ordinary scales (acceptance about 0); ``q`` is ignored.

Variants
--------
``embedded``: one file, head inside (the NextN tensors load only with ``--spec-type``).
``separate``: ``out`` holds the trunk (``block_count = 4``, no NextN) and
``out.with_suffix(".draft.gguf")`` a NextN-only draft (``token_embd``, ``output_norm``,
``output`` and ``blk.4.*``, ``block_count = 5``, ``nextn_predict_layers = 1``), the layout
``convert_hf_to_gguf.py --mtp`` writes (``mtp-<name>.gguf``). The pin loads it with
``-md DRAFT --spec-type draft-mtp`` (or ``-md`` alone: ``common_speculative_types_from_gguf``
infers draft-mtp from the last block's ``nextn.eh_proj``): ``load_arch_tensors`` treats a file
with NextN layers and no ``blk.0.attn_norm`` as MTP-only, and
``common_speculative_init_result`` builds the MTP context on the draft model.
``dense``: the ``qwen35`` architecture (dense FFN instead of MoE), head embedded.

Sizes: two Q8_0 matrices of 151,936 x 32 (5.2 MB each) + the tokenizer (5.9 MB) + 0.2 MB of
F32 tensors: about 16 MB per file. Same arguments -> same bytes.
"""

from __future__ import annotations

import functools
import os
import re
import tempfile
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.errors import UserError
from orchestrator.models.gguf_header import read_header
from orchestrator.models.packing_writer import packing_writer
from orchestrator.models.tiny_echo import EchoMap, echo_map
from orchestrator.models.tiny_weights import (
    CONTEXT_LENGTH,
    FULL_ATTENTION_INTERVAL,
    HEAD_DIM,
    N_EMBD,
    N_EXPERT,
    N_EXPERT_USED,
    N_FF_DENSE,
    N_FF_EXP,
    N_FF_SHEXP,
    N_HEAD,
    N_HEAD_KV,
    N_ROT,
    N_TRUNK,
    RMS_EPS,
    ROPE_FREQ_BASE,
    ROPE_SECTIONS,
    SSM_CONV,
    SSM_DT_RANK,
    SSM_GROUPS,
    SSM_INNER,
    SSM_STATE,
    Weights,
    build_weights,
)
from orchestrator.native.build import pinned_source
from orchestrator.paths import demo_model_dir

if TYPE_CHECKING:
    import numpy as np

# Bump whenever the bytes written for the same arguments change: cached demo models regenerate.
GENERATOR_VERSION = 2

MODES = ("echo", "random")
VARIANTS = ("embedded", "separate", "dense")
DEMO_Q = 0.1

# the end-of-generation tokens a tuple of ``stop_after`` tokens end answers with, in order
EOG_TEXTS = ("<|im_end|>", "<|endoftext|>")
VOCAB_FILE = "models/ggml-vocab-qwen35.gguf"
TEMPLATE_FILE = "models/templates/Qwen3.5-4B.jinja"
# llama.cpp's vocab loader marks tokens as control/EOG by their text (``t.first == "</s>"``
# etc.), whatever their type in the GGUF; the echo map must never produce one.
VOCAB_LOADER_FILE = "src/llama-vocab.cpp"
_SPECIAL_TEXT_RE = re.compile(r't\.first\s*==\s*"((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class _Vocab:
    """The copied tokenizer and what the echo map needs from it."""

    kv: list[tuple[str, Any, int, int | None]]  # (key, value, GGUF type, item type)
    n_vocab: int
    clean: np.ndarray  # sorted clean token ids


# --- sources ---------------------------------------------------------------------------------


def _source_file(rel: str, source: Path | None = None) -> Path:
    if source is None:
        source = pinned_source()
    path = source / rel
    if not path.is_file():
        raise UserError(
            f"{path} is missing from the pinned llama.cpp source", hint="run `orchestrator build` to re-extract it"
        )
    return path


def _bytes_decoder() -> dict[str, int]:
    """GPT-2 byte-level BPE: the printable stand-in character of each byte -> the byte."""
    keep = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars = keep[:]
    n = 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(keep, chars, strict=True)}


def special_texts(source: Path | None = None) -> frozenset[str]:
    """Token texts that the pinned llama.cpp's vocab loader turns into control/EOG tokens by name
    (every ``t.first == "..."`` literal in src/llama-vocab.cpp, e.g. ``</s>``, ``<|im_end|>``)."""
    text = _source_file(VOCAB_LOADER_FILE, source).read_text(encoding="utf-8")
    found = frozenset(_SPECIAL_TEXT_RE.findall(text))
    if not found:
        raise UserError(f"no special-token names found in {VOCAB_LOADER_FILE} of the pinned source")
    return found


def _is_clean(text: str, decoder: dict[str, int]) -> bool:
    try:
        raw = bytes(decoder[ch] for ch in text)
        s = raw.decode("utf-8")
    except (KeyError, UnicodeDecodeError):
        return False
    return bool(s) and all(ch in "\n\t" or not unicodedata.category(ch).startswith("C") for ch in s)


def _load_vocab() -> _Vocab:
    return _load_vocab_from(pinned_source())


@functools.lru_cache(maxsize=2)
def _load_vocab_from(source: Path) -> _Vocab:
    # cached per process: parsing 300,000 tokenizer strings is most of a model's write time
    import numpy as np

    path = _source_file(VOCAB_FILE, source)
    header = read_header(path, keep_string_arrays=("tokenizer.ggml.tokens", "tokenizer.ggml.merges"))
    kv = [
        (key, value, *header.value_types[key])
        for key, value in header.metadata.items()
        if key.startswith("tokenizer.") and key != "tokenizer.chat_template"
    ]
    tokens: list[str] = header.metadata["tokenizer.ggml.tokens"]
    types = header.metadata["tokenizer.ggml.token_type"]
    decoder = _bytes_decoder()
    special = special_texts(source)
    clean = np.array(
        [
            i
            for i, (tok, ty) in enumerate(zip(tokens, types, strict=False))
            if ty == 1 and tok not in special and _is_clean(tok, decoder)
        ],
        dtype=np.int64,
    )
    return _Vocab(kv=kv, n_vocab=len(tokens), clean=clean)


def load_echo_map(q: float, seed: int = 0) -> EchoMap:
    """The echo map of the model ``write_tiny_model(..., mode="echo", q=q, seed=seed)`` writes
    (reads the tokenizer from the pinned source). Raises ``UserError`` as ``write_tiny_model``."""
    vocab = _load_vocab()
    return echo_map(vocab.clean, vocab.n_vocab, q, seed)


@dataclass(frozen=True)
class _Contents:
    """What every file of one tiny model shares."""

    arch: str
    vocab: _Vocab
    template: str
    weights: Weights
    dense: bool


@dataclass(frozen=True)
class _Part:
    """One file: which tensors, its block counts, and its provenance (metadata keys written under
    the orchestrator namespace)."""

    names: list[str]
    block_count: int
    nextn: int
    provenance: dict[str, Any]


def _write_gguf(path: Path, model: _Contents, part: _Part) -> None:
    """Write one GGUF file atomically (a temp file in the same folder, then ``os.replace``)."""

    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        wr = packing_writer()(tmp_name, model.arch)
        _add_hparams(wr, model, part)
        _add_vocab_and_provenance(wr, model, part)
        _add_tensors(wr, model.weights, part.names)
        wr.write_header_to_file()
        wr.write_kv_data_to_file()
        wr.write_tensors_to_file()
        wr.close()
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp_name, 0o666 & ~umask)  # mkstemp creates 0600
        os.replace(tmp_name, path)
    finally:
        if os.path.exists(tmp_name):
            os.unlink(tmp_name)


def _add_hparams(wr: Any, model: _Contents, part: _Part) -> None:
    import gguf

    wr.add_name(f"orchestrator tiny {part.provenance['mode']} ({part.provenance['variant']})")
    wr.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    wr.add_quantization_version(gguf.GGML_QUANT_VERSION)
    wr.add_context_length(CONTEXT_LENGTH)
    wr.add_embedding_length(N_EMBD)
    wr.add_block_count(part.block_count)
    if part.nextn:
        wr.add_nextn_predict_layers(part.nextn)
    wr.add_head_count(N_HEAD)
    wr.add_head_count_kv(N_HEAD_KV)
    wr.add_key_length(HEAD_DIM)
    wr.add_value_length(HEAD_DIM)
    wr.add_layer_norm_rms_eps(RMS_EPS)
    wr.add_rope_dimension_count(N_ROT)
    wr.add_rope_dimension_sections(ROPE_SECTIONS)
    wr.add_rope_freq_base(ROPE_FREQ_BASE)
    wr.add_full_attention_interval(FULL_ATTENTION_INTERVAL)
    wr.add_ssm_conv_kernel(SSM_CONV)
    wr.add_ssm_state_size(SSM_STATE)
    wr.add_ssm_group_count(SSM_GROUPS)
    wr.add_ssm_time_step_rank(SSM_DT_RANK)
    wr.add_ssm_inner_size(SSM_INNER)
    if model.dense:
        wr.add_feed_forward_length(N_FF_DENSE)
    else:
        wr.add_expert_count(N_EXPERT)
        wr.add_expert_used_count(N_EXPERT_USED)
        wr.add_expert_feed_forward_length(N_FF_EXP)
        wr.add_expert_shared_feed_forward_length(N_FF_SHEXP)


def _add_vocab_and_provenance(wr: Any, model: _Contents, part: _Part) -> None:
    from gguf import GGUFValueType as V

    for key, value, vtype, item_type in model.vocab.kv:
        wr.add_key_value(key, value, V(vtype), V(item_type) if item_type is not None else None)
    wr.add_chat_template(model.template)
    for key, value in part.provenance.items():
        if isinstance(value, float):
            wr.add_float32(f"orchestrator.tiny.{key}", value)
        elif isinstance(value, int):
            wr.add_uint32(f"orchestrator.tiny.{key}", value)
        else:
            wr.add_string(f"orchestrator.tiny.{key}", str(value))


def _add_tensors(wr: Any, weights: Weights, names: list[str]) -> None:
    import gguf
    import numpy as np

    for name in names:
        arr, qtype = weights.tensors[name]
        if qtype is not None:
            wr.add_tensor(name, gguf.quants.quantize(arr, qtype), raw_dtype=qtype)
        else:
            wr.add_tensor(name, np.ascontiguousarray(arr, dtype=np.float32))


def draft_path(out: Path) -> Path:
    """Where the ``separate`` variant writes its NextN-only draft: ``out`` with suffix ``.draft.gguf``."""
    return Path(out).with_suffix(".draft.gguf")


def _check_args(mode: str, q: float, seed: int, variant: str) -> None:
    if mode not in MODES:
        raise UserError(f"unknown tiny-model mode {mode!r}", hint=f"use one of: {', '.join(MODES)}")
    if variant not in VARIANTS:
        raise UserError(f"unknown tiny-model variant {variant!r}", hint=f"use one of: {', '.join(VARIANTS)}")
    if not 0.0 <= q < 1.0:
        raise UserError(
            f"q must be in [0, 1), got {q}", hint="q is the fraction of drafts made wrong: acceptance = 1 - q"
        )
    if seed < 0:
        raise UserError(f"seed must be >= 0, got {seed}")


def write_tiny_model(
    out: Path,
    *,
    mode: str = "echo",
    q: float = 0.0,
    seed: int = 0,
    variant: str = "embedded",
    stop_after: int | tuple[int, ...] = -1,
) -> Path:
    """Write the tiny model (see the module docstring) to ``out`` and return ``out``.

    Args:
        out: output path (.gguf); parent directories are created. Written atomically.
        mode: ``echo`` (known output, acceptance 1 - q) or ``random``.
        q: echo mode: fraction of tokens whose NextN draft is wrong, 0 <= q < 1.
        seed: seeds the random weights and the choice of flagged tokens.
        variant: ``embedded``, ``separate`` (also writes ``draft_path(out)``) or ``dense``.
        stop_after: echo mode: a clean token id after which the model emits ``<|im_end|>`` instead
            of its successor, so an answer passing it ends (tests of clients that need a finished
            answer); -1 (default): never.

    Returns: ``out``. Same arguments give the same bytes (about 16 MB per file).

    Raises:
        UserError: bad mode/variant/q, or the pinned source's tokenizer/template is missing.
    """
    _check_args(mode, q, seed, variant)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    vocab = _load_vocab()
    template = _source_file(TEMPLATE_FILE).read_text(encoding="utf-8")
    dense = variant == "dense"
    stop: tuple[int, int] | list[tuple[int, int]] | None = None
    if isinstance(stop_after, tuple):
        if len(stop_after) > len(EOG_TEXTS):
            raise UserError(f"at most {len(EOG_TEXTS)} stop tokens (one per end-of-generation token)")
        stop = [(t, _token_id(vocab, eog)) for t, eog in zip(stop_after, EOG_TEXTS, strict=False)]
    elif stop_after >= 0:
        stop = (stop_after, _token_id(vocab, "<|im_end|>"))
    weights = build_weights(vocab.clean, vocab.n_vocab, mode, q, seed, dense, stop)
    model = _Contents("qwen35" if dense else "qwen35moe", vocab, template, weights, dense)
    provenance: dict[str, Any] = {
        "generator_version": GENERATOR_VERSION,
        "mode": mode,
        "q": float(q),
        "seed": seed,
        "variant": variant,
        **({"stop_after": stop_after} if isinstance(stop_after, int) and stop_after >= 0 else {}),
        **({"stop_after": ",".join(map(str, stop_after))} if isinstance(stop_after, tuple) else {}),
    }
    head = f"blk.{N_TRUNK}."
    if variant != "separate":
        _write_gguf(out, model, _Part(list(weights.tensors), N_TRUNK + 1, 1, provenance))
        return out
    trunk_names = [n for n in weights.tensors if not n.startswith(head)]
    _write_gguf(out, model, _Part(trunk_names, N_TRUNK, 0, {**provenance, "part": "trunk"}))
    draft_names = ["token_embd.weight", "output_norm.weight", "output.weight"]
    draft_names += [n for n in weights.tensors if n.startswith(head)]
    _write_gguf(draft_path(out), model, _Part(draft_names, N_TRUNK + 1, 1, {**provenance, "part": "draft"}))
    return out


def _token_id(vocab: _Vocab, text: str) -> int:
    tokens = next(value for key, value, *_ in vocab.kv if key == "tokenizer.ggml.tokens")
    return int(tokens.index(text))


def demo_model() -> Path:
    """The cached demo model (echo, q = 0.1, embedded head), generated on first use under
    ``paths.demo_model_dir()``; the file name carries the generator version, so a new
    generator writes a new file. Raises ``UserError`` as ``write_tiny_model``."""
    path = demo_model_dir() / f"tiny-echo-q{DEMO_Q}-v{GENERATOR_VERSION}.gguf"
    if not path.is_file():
        write_tiny_model(path, mode="echo", q=DEMO_Q, seed=0, variant="embedded")
    return path
