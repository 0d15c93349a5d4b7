"""Write the smallest vision projector GGUF ("mmproj") that the pinned llama.cpp loads and runs:
``orchestrator make-tiny-model --mmproj OUT`` and the vision tests pair it with the tiny MTP model.

Projector type: ``"mlp"`` (LLaVA-1.5 style: CLIP ViT -> mm.0 -> GELU -> mm.2).
Image size 28 px, patch size 14 px, so every image becomes (28/14)**2 = **4 image tokens**
of width ``n_embd`` (no class embedding, no pinpoints/slicing, fixed-size preprocessing).
Vision tower: hidden 32, FFN 64, 1 block, 2 heads (d_head 16), all tensors f32.

Every choice below comes from the pinned source (``tools/mtmd``, line numbers at b11434):

* keys ``clip.has_vision_encoder`` (clip.cpp:1221, asserted at 1257) and
  ``clip.projector_type = "mlp"`` (clip.cpp:1270, name table clip-impl.h:514, unknown -> 1288).
* required u32/f32 keys ``clip.vision.{embedding_length, attention.head_count,
  feed_forward_length, block_count, projection_dim, attention.layer_norm_epsilon}``
  (clip.cpp:1306-1312) and ``clip.vision.{image_size, patch_size}`` (clip.cpp:1319-1320).
* ``clip.vision.image_mean`` / ``image_std`` must have >= 3 floats (clip.cpp:1406-1410).
* ``clip.use_gelu`` selects FFN_GELU instead of gelu_quick (clip.cpp:1378-1390); optional.
* MLP picks the llava graph (clip.cpp:1058) and fixed-size preprocessing when there are no
  ``image_grid_pinpoints`` (mtmd.cpp:646, mtmd-image.cpp:756-762): resize to image_size.
* Token count: n_patches = (nx/patch)*(ny/patch), unchanged for MLP (clip.cpp:4144-4155).
* The llava graph (models/llava.cpp:15-29) runs layers ``0 .. n_layer-2`` unless a
  ``clip.vision.feature_layer`` is given; we write ``[1]`` so that our single block is actually
  executed and its output (index n_layer = 1, allowed by clip.cpp:1419-1425) feeds the projector.
* per-layer tensors ``v.blk.0.{attn_q,attn_k,attn_v,attn_out,ln1,ln2,ffn_up,ffn_down}``
  (clip.cpp:2280-2316; attn_out.weight and ffn_up/ffn_down.weight are hard-required, q/k/v are
  used unconditionally by models/llava.cpp:72-86).  n_ff (64) != n_embd (32) so the legacy
  "ffn up/down swapped" heuristic (clip.cpp:2335-2350, ``ff_down_w->ne[0] == n_embd``) stays off.
* ``v.patch_embd.weight`` (conv kernel, clip.cpp:574), ``v.position_embd.weight`` (rows
  gathered per patch, models/llava.cpp:43), ``mm.0.*`` and ``mm.2.*`` (optional in
  clip.cpp:2371-2378, but used unconditionally by models/llava.cpp:165-172);
  ``mm.2.weight`` is mandatory because ``clip_n_mmproj_embd`` returns its ne[1]
  (clip.cpp:5984-5991), which mtmd.cpp:604 compares with the text model's n_embd.
"""

from __future__ import annotations

import pathlib

import gguf
import numpy as np

from orchestrator.models.tiny_weights import N_EMBD

IMAGE_SIZE = 28
PATCH_SIZE = 14
N_IMAGE_TOKENS = (IMAGE_SIZE // PATCH_SIZE) ** 2  # 4
V_EMBD = 32
V_FF = 64
V_HEAD = 2
V_BLOCKS = 1


def _tensors(n_embd: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Numpy arrays in PyTorch order (out, in); GGUFWriter reverses them into ggml ne order."""

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    def zeros(n: int) -> np.ndarray:
        return np.zeros(n, dtype=np.float32)

    def ones(n: int) -> np.ndarray:
        return np.ones(n, dtype=np.float32)

    t: dict[str, np.ndarray] = {
        # conv kernel, torch (OC, IC, KH, KW) -> ggml ne [KW, KH, IC, OC]
        "v.patch_embd.weight": w(V_EMBD, 3, PATCH_SIZE, PATCH_SIZE),
        "v.patch_embd.bias": zeros(V_EMBD),
        # ggml ne [V_EMBD, n_pos]
        "v.position_embd.weight": w(N_IMAGE_TOKENS, V_EMBD),
        "v.pre_ln.weight": ones(V_EMBD),
        "v.pre_ln.bias": zeros(V_EMBD),
    }
    for il in range(V_BLOCKS):
        p = f"v.blk.{il}"
        for name in ("attn_q", "attn_k", "attn_v", "attn_out"):
            t[f"{p}.{name}.weight"] = w(V_EMBD, V_EMBD)
            t[f"{p}.{name}.bias"] = zeros(V_EMBD)
        for name in ("ln1", "ln2"):
            t[f"{p}.{name}.weight"] = ones(V_EMBD)
            t[f"{p}.{name}.bias"] = zeros(V_EMBD)
        t[f"{p}.ffn_up.weight"] = w(V_FF, V_EMBD)  # ne [V_EMBD, V_FF]
        t[f"{p}.ffn_up.bias"] = zeros(V_FF)
        t[f"{p}.ffn_down.weight"] = w(V_EMBD, V_FF)  # ne [V_FF, V_EMBD]
        t[f"{p}.ffn_down.bias"] = zeros(V_EMBD)
    t["v.post_ln.weight"] = ones(V_EMBD)
    t["v.post_ln.bias"] = zeros(V_EMBD)
    # llava projector: mm.0 (V_EMBD -> n_embd), GELU, mm.2 (n_embd -> n_embd)
    t["mm.0.weight"] = w(n_embd, V_EMBD)
    t["mm.0.bias"] = zeros(n_embd)
    t["mm.2.weight"] = w(n_embd, n_embd)  # ne[1] == n_embd == text n_embd
    t["mm.2.bias"] = zeros(n_embd)
    return t


def write_tiny_mmproj(out: pathlib.Path, n_embd: int = N_EMBD, seed: int = 0) -> pathlib.Path:
    """Write a tiny random "mlp" mmproj GGUF for a text model of width ``n_embd``.

    Each image is resized to 28x28 and becomes 4 embeddings of width ``n_embd``.
    Returns ``out``.
    """
    out = pathlib.Path(out)
    rng = np.random.default_rng(seed)

    wr = gguf.GGUFWriter(str(out), "clip")  # general.architecture = "clip"
    wr.add_type("mmproj")
    wr.add_name("tiny-mmproj")
    wr.add_description("tiny random llava-style (mlp) vision projector for tests")
    wr.add_file_type(int(gguf.LlamaFileType.ALL_F32))
    wr.add_bool("clip.has_vision_encoder", True)
    wr.add_string("clip.projector_type", "mlp")
    wr.add_bool("clip.use_gelu", True)
    wr.add_uint32("clip.vision.image_size", IMAGE_SIZE)
    wr.add_uint32("clip.vision.patch_size", PATCH_SIZE)
    wr.add_uint32("clip.vision.embedding_length", V_EMBD)
    wr.add_uint32("clip.vision.feed_forward_length", V_FF)
    wr.add_uint32("clip.vision.block_count", V_BLOCKS)
    wr.add_uint32("clip.vision.attention.head_count", V_HEAD)
    wr.add_uint32("clip.vision.projection_dim", n_embd)
    wr.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-5)
    wr.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    wr.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])
    wr.add_array("clip.vision.feature_layer", [V_BLOCKS])  # run the block(s), see docstring

    for name, arr in _tensors(n_embd, rng).items():
        wr.add_tensor(name, arr)

    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()
    return out
