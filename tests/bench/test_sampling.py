"""``orchestrator bench sampling``: greedy against probabilistic drafting per temperature, on real
llama-servers serving the echo model (q = 0.1: the head is right on about 90 % of tokens)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from orchestrator.bench import sampling as bs
from orchestrator.bench.summary import RequestResult
from orchestrator.errors import UserError


def _result(rep: int, seed: int, drafted: int, accepted: int, n: int = 10, ms: float = 100.0) -> RequestResult:
    return RequestResult(3, "general", 0, rep, seed, 0.1, 5.0, n, ms, 100.0, drafted, accepted, 3, "x", "sha")


def test_a_cell_pools_drafts_and_takes_the_median_rate() -> None:
    cell = bs.cell("probabilistic", 0.6, [_result(0, 0, 6, 3), _result(0, 1, 4, 4, ms=50.0), _result(1, 0, 0, 0)])
    assert (cell.drafted, cell.accepted, cell.acceptance) == (10, 7, 0.7)
    assert cell.tps_median == 100.0  # 100, 200 and 100 tok/s per (rep, seed)
    assert math.isclose(cell.tokens_per_step, 30 / (30 - 7))
    assert bs.parse_temperatures("0, 0.6,1") == [0.0, 0.6, 1.0]
    for bad in ("", "-1", "hot"):
        with pytest.raises(UserError):
            bs.parse_temperatures(bad)


@pytest.mark.native
@pytest.mark.slow
def test_bench_sampling_measures_both_modes_at_each_temperature(tmp_path: Path, bin_info, demo_model) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.cli.bench import run_sampling

    cfg = tmp_path / "models.yaml"
    cfg.write_text(
        f"models:\n  - name: demo\n    path: {demo_model}\n    ctx_size: 1024\n    threads: 1\n"
        "    speculative:\n      type: draft-mtp\n      n_max: 3\n"
    )
    out = tmp_path / "results"
    code = run_sampling(
        None, config=cfg, k=2, temperatures="0,1.0", prompts="general", n_predict=16, reps=1, seeds="0", out=out
    )
    assert code == 0
    data = json.loads((out / "sampling.json").read_text())
    cells = {(c["mode"], c["temperature"]): c for c in data["cells"]}
    assert set(cells) == {(m, t) for m in ("greedy", "probabilistic") for t in (0.0, 1.0)}
    for c in cells.values():
        assert c["drafted"] > 0 and 0 <= c["accepted"] <= c["drafted"] and c["tps_median"] > 0
    # at temperature 0 rejection sampling is not used: both modes verify by matching the argmax
    assert cells[("greedy", 0.0)]["acceptance"] == cells[("probabilistic", 0.0)]["acceptance"]
    # one instance per mode, every temperature measured on it (a request field): one launch log each
    logs = {p.name: sorted(f.name for f in p.iterdir()) for p in (out / "logs").iterdir()}
    assert set(logs) == {"greedy", "probabilistic"}, logs
    assert all(len(files) == 1 for files in logs.values()), logs
