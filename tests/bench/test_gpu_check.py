"""The GPU check: its CPU run end to end (pipeline and report, never speed), its time limit, and its parts."""

from __future__ import annotations

import json
import subprocess
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.bench import gpu_check as gc
from orchestrator.bench.gpu_report import REQUIRED_KEYS, markdown
from orchestrator.errors import UserError
from orchestrator.host.gpu_bandwidth import GpuMemory
from orchestrator.models.traffic import Traffic
from orchestrator.native import bundle
from orchestrator.native.pin import Patch, Pin

REPO = Path(__file__).resolve().parents[2]
SMALL = ["--cpu", "--scale", "small", "--k", "1,2", "--n-predict", "16", "--threads", "1"]


def run_check(out: Path, *args: str, timeout: float = 600) -> tuple[subprocess.CompletedProcess[str], float]:
    t0 = time.monotonic()
    proc = subprocess.run(
        ["bash", str(REPO / "scripts" / "gpu_check.sh"), *SMALL, "--out", str(out), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return proc, time.monotonic() - t0


def no_llama_server_left(out: Path) -> bool:
    import psutil

    for p in psutil.process_iter(["name", "cmdline"]):
        if p.info["name"] == "llama-server" and str(out) in " ".join(p.info["cmdline"] or []):
            return False
    return True


@pytest.mark.native
@pytest.mark.slow
def test_cpu_run_writes_complete_reports(tmp_path: Path, bin_info: Any, pinned_source: Path) -> None:
    out = tmp_path / "report"
    proc, _ = run_check(out, "--time-limit", "400", "--max-rounds", "2")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads((out / "gpu-check.json").read_text())
    assert set(REQUIRED_KEYS) <= set(doc) and doc["complete"] is True and doc["gpu"] is None
    assert [s["name"] for s in doc["steps"]] == [
        "detect",
        "build or carried-in build",
        "generate models",
        "start orchestrator up",
        "measure (interleaved)",
        "stop orchestrator up",
        "launch settings (interleaved)",
        "vision with MTP",
        "stop and report",
    ]
    assert {(r["path"], r["q"], r["k"]) for r in doc["rows"]} == {
        (p, q, k) for p in ("direct", "up") for q in (0.1, 0.25) for k in (0, 1, 2)
    } | {("up", q, gc.ADAPTIVE) for q in (0.1, 0.25)}  # the endpoint's policy: a row of its own
    for r in doc["rows"]:
        assert r["decode_tok_s"]["n"] == 1 and r["decode_tok_s"]["median"] > 0  # round 1 (round 0 is warm-up)
        if r["k"] == gc.ADAPTIVE:
            assert r["tokens_per_step"] >= 1 and "bytes_per_token" not in r
            continue
        assert r["bytes_per_token"] > 30e6 and r["bandwidth_fraction"] is None  # no bandwidth bound on CPU
        assert r["server_cpu_ms_per_token"]["median"] > 0  # read from the llama-server process
        if r["k"]:
            assert 0 < r["acceptance"] <= 1 and 1 < r["tokens_per_step"] <= 1 + r["k"]
    assert set(doc["recommended"]) == {"0.90", "0.75"}
    assert doc["manifest"]["scale"] == "small" and doc["manifest"]["models"][0]["bytes_on_disk"] > 0
    assert doc["traffic"]["decode_bytes_per_token"] > doc["traffic"]["draft_step_bytes"] > 0
    assert not list(out.glob("*.gguf"))  # models removed
    md = (out / "gpu-check.md").read_text()
    assert "## Decode speed" in md and "## Where the time went" in md and "| up | 0.75 | 2 |" in md
    assert "| up | 0.75 | adaptive |" in md
    # orchestrator tune's rows: prefill per -ub at depth, decode with and without the draft's backend sampling
    settings = {(r["setting"], r["measure"]): r for r in doc["manifest"]["launch_settings"]}
    wanted = {(s, m) for s in ("ub512", "ub2048") for m in ("prefill@1K", "decode")}
    assert set(settings) == wanted | {("ub512 bs-on", "decode"), ("ub512 bs-off", "decode")}  # each flag passed
    assert all(r["n"] == 2 and r["median"] > 0 for r in settings.values())
    assert settings[("ub512", "decode")]["ratio"] == 1.0
    # vision with MTP: the same questions with and without an image, drafting on both ways
    vision = doc["manifest"]["vision"]
    assert vision["image"]["prompt_tokens"] > vision["text"]["prompt_tokens"]  # the image's tokens
    assert vision["text"]["drafted"] > 0 and vision["image"]["drafted"] > 0
    assert 0 < vision["image"]["acceptance"] <= 1 and "## Vision with MTP" in md
    assert "## Launch settings (orchestrator tune)" in md and "| ub512 bs-off | decode |" in md
    assert "where the time went" not in proc.stdout and "measure (interleaved)" in proc.stdout
    assert no_llama_server_left(out)


@pytest.mark.native
@pytest.mark.slow
def test_time_limit_stops_cleanly_with_a_partial_report(tmp_path: Path, bin_info: Any, pinned_source: Path) -> None:
    """With too little time the run stops before the limit, says so, and leaves no process."""
    out = tmp_path / "report"
    proc, took = run_check(out, "--time-limit", "45", "--max-rounds", "50")
    assert took < 45 + 15, took  # the limit, plus interpreter start-up and the setup's own seconds
    doc = json.loads((out / "gpu-check.json").read_text())
    assert set(REQUIRED_KEYS) <= set(doc)
    if proc.returncode == 1:
        assert doc["complete"] is False and doc["notes"]
    else:  # a fast machine fit two rounds in the time
        assert proc.returncode == 0 and doc["complete"] is True
    assert no_llama_server_left(out)


def _sample(rnd: int, path: str, q: float, k: int, tok_s: float, acc: tuple[int, int] = (0, 0)) -> gc.Sample:
    return gc.Sample(rnd, path, q, k, 64, tok_s, tok_s, 0.01, acc[0], acc[1], server_cpu_s=64 / tok_s)


def test_summary_pairs_speedups_by_round_and_recommends_only_a_sure_k() -> None:
    tr = Traffic(
        dense_trunk=1000, expert_slice_trunk=10, dense_head=500, expert_slice_head=1, n_expert=256, n_expert_used=8
    )
    samples = [_sample(0, "up", 0.1, 0, 1.0), _sample(0, "up", 0.1, 2, 99.0, (20, 18))]  # round 0: warm-up, dropped
    for rnd, (base, k2, k4) in enumerate([(100, 150, 140), (110, 160, 100), (90, 140, 95)], start=1):
        samples += [_sample(rnd, "up", 0.1, 0, base), _sample(rnd, "up", 0.1, 2, k2, (20, 18))]
        samples += [_sample(rnd, "up", 0.1, 4, k4, (40, 30))]
    samples.append(gc.Sample(2, "up", 0.1, 2, 0, 0, 0, 0, 0, 0, error="HTTP 500"))
    rows = gc.summarize(samples, tr, bandwidth=1e6)
    k2 = next(r for r in rows if r["k"] == 2)
    assert k2["decode_tok_s"] == {"n": 3, "median": 150, "min": 140, "max": 160, "iqr": 10.0}
    assert k2["speedup"]["median"] == pytest.approx(1.5) and k2["speedup"]["min"] == pytest.approx(160 / 110)
    assert k2["acceptance"] == pytest.approx(0.9) and k2["tokens_per_step"] == pytest.approx(2.8)
    assert k2["bytes_per_token"] == pytest.approx(tr.per_token(2, 2.8))
    assert k2["bandwidth_fraction"] == pytest.approx(k2["bytes_per_token"] * 150 / 1e6)
    assert k2["bandwidth_bound_speedup"] == pytest.approx(tr.trunk_step(1) / k2["bytes_per_token"])
    assert k2["server_cpu_ms_per_token"]["median"] == pytest.approx(1e3 / 150)
    assert k2["cpu_speedup"]["median"] == pytest.approx(1.5)
    rec = gc.recommend(rows)
    assert rec["0.90"]["k"] == 2
    slow = [s for s in samples if s.k != 2]  # K = 4 beats K = 0 in round 1 only: not sure
    assert gc.recommend(gc.summarize(slow, tr, None))["0.90"]["k"] == 0
    assert "| up | 0.90 | 2 | 150.0 [140.0-160.0]" in markdown({"rows": rows, "recommended": rec})


def test_adaptive_row_counts_tokens_per_step_and_is_never_the_recommended_k() -> None:
    samples = [_sample(1, "up", 0.1, 0, 100.0), _sample(1, "up", 0.1, gc.ADAPTIVE, 180.0, (40, 32))]
    rows = gc.summarize(samples, None, None)
    adaptive = next(r for r in rows if r["k"] == gc.ADAPTIVE)
    assert adaptive["tokens_per_step"] == pytest.approx(64 / 32) and adaptive["speedup"]["median"] == 1.8
    assert gc.recommend(rows)["0.90"]["k"] == 0  # a static K is what the report recommends
    assert "| up | 0.90 | adaptive | 180.0" in markdown({"rows": rows, "recommended": {}})
    ep = gc.Endpoint("up", 0.1, "http://x", "m")
    assert "speculative.n_max" not in gc.request_body(ep, gc.ADAPTIVE, 8, "p")
    assert gc.request_body(ep, 0, 8, "p")["speculative.n_max"] == 0


def test_traffic_of_the_real_shape(tmp_path: Path) -> None:
    """Bytes per token from the Q4_K_M header of the full shape: about 1.7-1.9 GB per decoded token
    (non-expert weights, output and 8 of 256 experts), more when a batch of 5 reads 37.6 experts."""
    import numpy as np

    from orchestrator.models import gguf_write as gw
    from orchestrator.models import shaped
    from orchestrator.models import shaped_echo as se
    from orchestrator.models.shapes import QWEN36_35B_A3B
    from orchestrator.models.traffic import traffic

    echo = se.build(QWEN36_35B_A3B, 1000, np.arange(1000), 0.1, 0)  # a stand-in tokenizer: only shapes matter
    specs = [gw.TensorSpec(t.name, t.shape, t.type_name) for t in shaped.tensor_specs(QWEN36_35B_A3B, "q4_k_m", echo)]
    header = tmp_path / "header.gguf"  # sparse: the data section is one hole
    gw.write_gguf(header, shaped.metadata(QWEN36_35B_A3B, "q4_k_m", [], "", {}), specs)
    tr = traffic(header)
    assert tr.n_expert == 256 and tr.n_expert_used == 8
    assert 1.6e9 < tr.trunk_step(1) < 2.0e9
    assert tr.distinct_experts(5) == pytest.approx(37.58, abs=0.01)
    assert tr.trunk_step(5) - tr.trunk_step(1) == pytest.approx(tr.expert_slice_trunk * (37.577 - 8), rel=1e-3)
    assert 0.3e9 < tr.draft_step() < tr.trunk_step(1) / 2  # the head: its block + the output matrix
    # bandwidth alone caps MTP here: at K = 4 and 0.76 acceptance (a published A100 figure) a step reads
    # 37.6 experts per layer and 4 draft steps, so a decoded token costs only about 1.3x fewer bytes
    assert 1.2 < tr.trunk_step(1) / tr.per_token(4, 1 + 4 * 0.76) < 1.4


def test_peak_bandwidth_from_bus_width_and_memory_clock() -> None:
    h100 = GpuMemory(0, "NVIDIA H100 80GB HBM3", "9.0", None, 5120, 2619, None, None)
    rtx5090 = GpuMemory(0, "NVIDIA GeForce RTX 5090", "12.0", None, 512, 14001, None, None)
    assert h100.peak_bandwidth == pytest.approx(3.35e12, rel=0.01)
    assert rtx5090.peak_bandwidth == pytest.approx(1.79e12, rel=0.01)
    assert GpuMemory(0, "x", None, None, None, 1000, None, None).peak_bandwidth is None


def _pin() -> Pin:
    return Pin("llama-cpp-python", "0.3.36", "ab" * 32, "vendor/llama.cpp", "ggml-org/llama.cpp", "0c1e570" + "0" * 33)


def test_source_bundle_trims_checks_its_pin_and_extracts(tmp_path: Path) -> None:
    src = tmp_path / "src"
    for rel in (
        "CMakeLists.txt",
        "ggml/src/ggml-cuda/x.cu",
        "ggml/src/ggml-vulkan/v.cpp",
        "docs/a.txt",
        "models/ggml-vocab-qwen35.gguf",
        "models/ggml-vocab-llama.gguf",
        "tools/server/s.cpp",
    ):
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(rel)
    patches = [Patch(tmp_path / "0001-x.patch", "cd" * 32)]
    out = bundle.make_source_bundle(src, _pin(), patches, tmp_path / bundle.bundle_name("key"))
    with tarfile.open(out) as tar:
        assert tar.getnames()[0] == bundle.MANIFEST
    dest = tmp_path / "dest"
    bundle.extract_bundle(out, _pin(), patches, dest)
    got = sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file())
    assert got == ["CMakeLists.txt", "ggml/src/ggml-cuda/x.cu", "models/ggml-vocab-qwen35.gguf", "tools/server/s.cpp"]
    with pytest.raises(UserError, match="another pin or patch queue"):
        bundle.extract_bundle(out, _pin(), [], tmp_path / "other")


def test_the_bundle_keeps_every_ggml_backend_a_build_turns_on() -> None:
    """A build with GGML_RPC on read ggml/src/ggml-rpc, which the bundle left out: CMake stopped
    at configure on the H200 before anything was measured."""
    from orchestrator.native.plan import PRESETS

    on = {k for preset in PRESETS.values() for k, v in preset.items() if k.startswith("GGML_") and v == "ON"}
    backends = {k.removeprefix("GGML_").lower() for k in on} - {"native"}
    assert backends >= {"rpc", "cuda"}, backends
    for backend in backends:
        assert bundle._kept(f"ggml/src/ggml-{backend}/CMakeLists.txt"), backend


def test_prepare_source_takes_the_bundle_when_no_sdist_is_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.native import fetch

    monkeypatch.setenv("ORCHESTRATOR_CACHE", str(tmp_path / "cache"))
    src = tmp_path / "src"
    (src / "CMakeLists.txt").parent.mkdir(parents=True)
    (src / "CMakeLists.txt").write_text("project(x)")
    pin, patches = fetch.load_pin(), fetch.list_patches()
    made = bundle.make_source_bundle(src, pin, patches, tmp_path / "b.tar.xz")
    monkeypatch.setenv(bundle.ENV_BUNDLE, str(made))
    got = fetch.prepare_source(pin, patches)
    assert (got / "CMakeLists.txt").read_text() == "project(x)"  # no download, no git apply


def test_models_are_served_one_at_a_time_when_the_gpu_cannot_hold_both() -> None:
    import argparse
    import sys

    sys.path.insert(0, str(REPO / "scripts"))
    import gpu_check

    args = argparse.Namespace(qs=[0.1, 0.25])
    full = 21_650_118_496  # the full-size Q4_K_M file
    assert gpu_check.model_groups(args, None, full) == [[0.1, 0.25]]  # CPU
    assert gpu_check.model_groups(args, {"memory_total": 150_000_000_000}, full) == [[0.1, 0.25]]  # H200
    assert gpu_check.model_groups(args, {"memory_total": 34_190_000_000}, full) == [[0.1], [0.25]]  # RTX 5090
