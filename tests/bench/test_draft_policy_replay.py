"""``scripts/bench_draft_policy.py --replay``: the current policy evaluated on a recorded run's
answers, with no server (the run as ``--json`` writes it)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _answer(r: int, cls: str, arm: str, k: int, right: bool) -> dict[str, object]:
    """32 tokens at draft length ``k``: a plain step 20 ms, a drafting step 20 * (1 + 0.3 k) ms;
    every draft right (k + 1 tokens per step) or every draft wrong (one)."""
    steps = 32 // (k + 1) if right else 32
    drafted = steps * k
    ms = steps * 20.0 * (1 + 0.3 * k)
    return {"round": r, "class": cls, "arm": arm, "k": k, "predicted_n": 32, "predicted_ms": ms,
            "draft_n": drafted, "draft_n_accepted": drafted if right else 0, "cpu_s": ms / 1000}  # fmt: skip


def test_replay_chooses_from_the_recorded_answers(tmp_path: Path) -> None:
    """Two classes, K in 0..2: the head is always right on "easy" (K = 2 best, 1.9x) and always
    wrong on "hard" (K = 0 best). The adaptive turns, recorded at K = 0, are replayed with the
    current policy: it probes at K = 2 in the warm-up and then keeps each class at its best K."""
    rows = []
    for r in range(6):
        for cls, right in (("easy", True), ("hard", False)):
            rows += [_answer(r, cls, f"K={k}", k, right) for k in (0, 1, 2)]
            rows.append(_answer(r, cls, "adaptive", 0, right))
    run = tmp_path / "run.json"
    run.write_text(json.dumps(rows))
    out = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "bench_draft_policy.py"), "--replay", str(run)],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    lines = {line.split()[0]: line for line in out.stdout.splitlines() if "adaptive / best K" in line}
    assert "adaptive / best K (K=2): 1.000" in lines["easy"], out.stdout
    assert "adaptive / best K (K=0): 1.000" in lines["hard"], out.stdout
    assert "'K=2 best': 5" in lines["easy"] and "'K=0 best': 5" in lines["hard"], out.stdout
