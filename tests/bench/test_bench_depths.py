"""``orchestrator bench`` at agent depths: the depth list, the deep prompts, energy per token
from NVML (a fake NVML here: no GPU on this machine), the warning when acceptance and speed
disagree, and a real sweep with a 1K-token prompt on the tiny echo model."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import pytest

from orchestrator.bench import sweep
from orchestrator.bench.args import parse_depths
from orchestrator.bench.prompts import CHARS_PER_TOKEN, Prompt, at_depths, context_text, depth_label
from orchestrator.bench.summary import RequestResult, Summary, disagreements, summarize
from orchestrator.errors import UserError
from orchestrator.host.energy import EnergyMeter


def test_parse_depths() -> None:
    assert parse_depths("32k, 0,8K,8192") == [0, 8192, 32768]
    for bad in ("", "x", "-1", "2000k"):
        with pytest.raises(UserError, match="--depths"):
            parse_depths(bad)


def test_deep_prompts_carry_context_before_the_question() -> None:
    base = [Prompt("code", "Write a function.")]
    out = at_depths(base, [0, 8192])
    assert [p.domain for p in out] == ["code", "code@8K"] and depth_label(1000) == "1000"
    assert out[1].prompt.endswith("Write a function.") and out[0] == base[0]
    text = context_text(8192)
    assert len(text) == pytest.approx(8192 * CHARS_PER_TOKEN, rel=0.02) and text == context_text(8192)
    assert len(set(text.splitlines())) > 500  # varied, not one line repeated


@pytest.mark.native
@pytest.mark.parametrize("depth", [1024, 8192, 32768])
def test_a_depth_is_at_most_that_many_tokens_of_qwens_vocabulary(pinned_source: Path, depth: int) -> None:
    """The filler of a depth fits a context of that depth (plus the question and answer): at 3.6
    characters per token "8k" was 9,077 tokens, and the GPU check's prefill rows got a 400."""
    from orchestrator.models import runtime

    vocab = runtime.load_vocab(pinned_source / "models" / "ggml-vocab-qwen35.gguf")
    n = len(vocab.tokenize(context_text(depth, seed=depth)))
    assert 0.95 * depth <= n <= depth, n


def test_options_ask_for_the_context_of_the_deepest_prompt() -> None:
    opts = sweep.check_options(
        k="0,1", seeds="0", prompts="math", prompts_file=None, n_predict=64, reps=1, temperature=0, depths="0,32k"
    )
    assert opts.depths == (0, 32768) and opts.ctx_needed == 32768 + 64 + 512
    assert len(opts.prompts) == 2 * 4
    short = sweep.check_options(k="0", seeds="0", prompts="math", prompts_file=None, n_predict=8, reps=1, temperature=0)
    assert short.ctx_needed == 0


class FakeNvml:
    """The pynvml calls EnergyMeter makes, over a counter the test advances (mJ per GPU)."""

    class NVMLError(Exception):
        pass

    def __init__(self, gpus: int = 2, energy_counter: bool = True) -> None:
        self.mj = [1000.0 * (i + 1) for i in range(gpus)]
        self.energy_counter = energy_counter
        self.shutdown = 0

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        self.shutdown += 1

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        if i >= len(self.mj):
            raise self.NVMLError("invalid argument")
        return i

    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> float:
        if not self.energy_counter:
            raise self.NVMLError("not supported")
        return self.mj[h]


def test_energy_meter_sums_the_gpus_counters() -> None:
    nvml = FakeNvml()
    meter = EnergyMeter.open([0, 1], nvml=nvml)
    assert meter is not None and meter.joules() == pytest.approx(3.0)
    nvml.mj[0] += 2500.0
    nvml.mj[1] += 500.0
    assert meter.joules() == pytest.approx(6.0)
    meter.close()
    assert nvml.shutdown == 1


def test_no_energy_meter_without_gpu_or_counter() -> None:
    assert EnergyMeter.open([], nvml=FakeNvml()) is None
    assert EnergyMeter.open([5], nvml=FakeNvml()) is None
    old = FakeNvml(energy_counter=False)
    assert EnergyMeter.open([0], nvml=old) is None and old.shutdown == 1


def _r(k: int, rep: int, ms: float, drafted: int, accepted: int, energy: float | None) -> RequestResult:
    return RequestResult(
        k, "d", 0, rep, 0, 0.1, 5.0, 100, ms, 100_000 / ms, drafted, accepted, k or None, "x", "t", energy
    )


def test_joules_per_token_and_the_disagreement_warning() -> None:
    rows = [_r(0, i, 1000.0, 0, 0, 50.0) for i in range(3)] + [_r(2, i, 1100.0, 80, 60, 40.0) for i in range(3)]
    by_k = {s.k: s for s in summarize(rows)}
    assert by_k[0].joules_per_token == pytest.approx(0.5) and by_k[2].joules_per_token == pytest.approx(0.4)
    lines = disagreements(list(by_k.values()))
    assert len(lines) == 1 and lines[0].startswith("d K=2: 2.50 tokens per step but 0.91x K=0")
    no_energy = summarize([_r(0, 0, 1000.0, 0, 0, None)])
    assert no_energy[0].joules_per_token is None


def test_speed_without_acceptance_is_called_noise() -> None:
    fields: dict[str, Any] = dict.fromkeys(Summary.__dataclass_fields__, math.nan)
    fields.update(k=1, domain="d", speedup=1.2, acceptance=0.02, tokens_per_step=1.01, same_text_as_baseline=None)
    lines = disagreements([Summary(**fields)])
    assert len(lines) == 1 and "noise or load" in lines[0]


@pytest.mark.native
def test_bench_at_depth_on_the_echo_model(tmp_path: Path, bin_info, echo_model) -> None:  # type: ignore[no-untyped-def]
    """A sweep with a 1K-token prompt: the server got the context it needs (ctx_size 512 in the
    file), the deep prompt is reported apart with its TTFT and tok/s."""
    from orchestrator.cli.bench import run_bench

    cfg = tmp_path / "models.yaml"
    cfg.write_text(f"models:\n  - name: echo\n    path: {echo_model}\n    ctx_size: 512\n    threads: 1\n")
    out = tmp_path / "results"
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"domain": "q", "prompt": "Say something."}) + "\n")
    code = run_bench(
        None, config=cfg, k="0,2", prompts="", prompts_file=prompts, n_predict=16, reps=1, seeds="0",
        temperature=0.0, out=out, apply=False, depths="0,1k",
    )  # fmt: skip
    assert code == 0
    data = json.loads((out / "results.json").read_text())
    assert data["settings"]["depths"] == [0, 1024]
    with (out / "summary.csv").open() as fh:
        cells = {(s["domain"], int(s["k"])): s for s in csv.DictReader(fh)}
    assert {("q", 0), ("q", 2), ("q@1K", 0), ("q@1K", 2)} <= set(cells)
    deep = [r for r in data["requests"] if r["domain"] == "q@1K"]
    assert len(deep) == 2 and all(r["predicted_n"] == 16 for r in deep)  # 1K tokens fit: ctx was raised
    assert all(float(c["ttft_median"]) > 0 and float(c["tps_median"]) > 0 for c in cells.values())
    assert all(r["energy_j"] is None for r in data["requests"])  # no GPU here
