"""GPU detection: the nvidia-smi parser on literal strings, CUDA_VISIBLE_DEVICES, the CPU answer."""

from __future__ import annotations

import shutil

import pytest

from orchestrator.host import gpus
from orchestrator.host.gpus import GPU, MIB, detect_gpus, filter_visible, parse_nvidia_smi

TWO_CARDS = (
    "0, NVIDIA GeForce RTX 5090, GPU-8d6c2f3e-1111-2222-3333-444455556666, 32607, 31842, 12.0\n"
    "1, NVIDIA GeForce RTX 4090, GPU-0a1b2c3d-aaaa-bbbb-cccc-ddddeeeeffff, 24564, 1024, 8.9\n"
)


def test_parses_two_cards_in_bytes() -> None:
    got = parse_nvidia_smi(TWO_CARDS)
    assert got == [
        GPU(0, "NVIDIA GeForce RTX 5090", "GPU-8d6c2f3e-1111-2222-3333-444455556666", 32607 * MIB, 31842 * MIB, "12.0"),
        GPU(1, "NVIDIA GeForce RTX 4090", "GPU-0a1b2c3d-aaaa-bbbb-cccc-ddddeeeeffff", 24564 * MIB, 1024 * MIB, "8.9"),
    ]


def test_not_available_fields_stay_none() -> None:
    # unified-memory boards (GB10) and some vGPUs report no memory figures
    text = "0, NVIDIA GB10, GPU-aa, [N/A], [N/A], 12.1\n1, Tesla T4, [Not Supported], 15360, N/A, \n"
    got = parse_nvidia_smi(text)
    assert got[0] == GPU(0, "NVIDIA GB10", "GPU-aa", None, None, "12.1")
    assert got[1] == GPU(1, "Tesla T4", None, 15360 * MIB, None, None)


def test_old_driver_without_compute_cap_and_junk_lines() -> None:
    fields = ("index", "name", "uuid", "memory.total", "memory.free")
    text = "\nNo devices were found\n0, A100-SXM4-80GB, GPU-ff, 81920, 81000\n"
    assert parse_nvidia_smi(text, fields) == [GPU(0, "A100-SXM4-80GB", "GPU-ff", 81920 * MIB, 81000 * MIB, None)]
    assert parse_nvidia_smi("") == []
    assert parse_nvidia_smi("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.") == []


def test_cuda_visible_devices_filter() -> None:
    cards = parse_nvidia_smi(TWO_CARDS)
    assert [g.index for g in filter_visible(cards, "1")] == [1]
    assert [g.index for g in filter_visible(cards, "1,0")] == [1, 0]
    assert [g.index for g in filter_visible(cards, "GPU-0a1b")] == [1]
    # CUDA stops at the first entry it cannot match
    assert [g.index for g in filter_visible(cards, "0,7,1")] == [0]
    assert filter_visible(cards, "") == []
    assert filter_visible(cards, "-1") == []


def test_no_driver_means_cpu_said_plainly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpus, "_from_nvml", lambda: (None, "NVML Shared Library Not Found"))
    monkeypatch.setattr(shutil, "which", lambda name: None)
    found, source = detect_gpus()
    assert found == []
    assert source.startswith("none (CPU)")
    assert "NVML Shared Library Not Found" in source and "nvidia-smi: not installed" in source


def test_nvidia_smi_fallback_and_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpus, "_from_nvml", lambda: (None, "driver not loaded"))
    monkeypatch.setattr(gpus, "_from_nvidia_smi", lambda: (parse_nvidia_smi(TWO_CARDS), ""))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    found, source = detect_gpus()
    assert [g.index for g in found] == [1]
    assert source == "nvidia-smi (CUDA_VISIBLE_DEVICES='1')"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    found, source = detect_gpus()
    assert found == [] and "hides every GPU" in source


def test_this_machine_answers_without_raising() -> None:
    found, source = detect_gpus()
    assert isinstance(found, list)
    assert source.startswith(("nvml", "nvidia-smi", "none (CPU)"))
    for g in found:
        assert g.memory_free is None or g.memory_free <= (g.memory_total or g.memory_free)
