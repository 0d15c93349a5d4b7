"""Config limits refused before launch with file, line and key: ``orchestrator up --dry-run`` on real files.

- ``ctx_size`` beyond int32 (llama-server reads ``-c`` as an int32): a schema error;
- beyond ``parallel`` x the GGUF's trained context (the demo model's is 4096 tokens): the plan
  refuses unless ``allow_ctx_beyond_trained: true``;
- beyond the machine's RAM for a CPU instance (even when allowed beyond the trained context):
  the fit check refuses unless ``--force``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def dry_run(tmp_path: Path, model_lines: str, *flags: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "models.yaml"
    path.write_text("models:\n  - name: demo\n    path: builtin:tiny-mtp\n" + model_lines)
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli.app", "up", "--dry-run", "-c", str(path), *flags],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_ctx_size_beyond_int32_is_a_located_error(tmp_path: Path) -> None:
    r = dry_run(tmp_path, "    ctx_size: 1000000000000\n")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"{tmp_path / 'models.yaml'}:4" in r.stderr and "ctx_size" in r.stderr, r.stderr


@pytest.mark.native
def test_ctx_size_beyond_the_trained_context_is_refused_before_launch(tmp_path: Path, bin_info: object) -> None:
    r = dry_run(tmp_path, "    ctx_size: 2000000000\n")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"{tmp_path / 'models.yaml'}:4: models[0].ctx_size" in r.stderr, r.stderr
    assert "trained context (4096 tokens)" in r.stderr and "allow_ctx_beyond_trained" in r.stderr


@pytest.mark.native
def test_ctx_size_beyond_ram_is_refused_even_when_allowed(tmp_path: Path, bin_info: object) -> None:
    r = dry_run(tmp_path, "    ctx_size: 2000000000\n    allow_ctx_beyond_trained: true\n")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "of RAM" in r.stderr and "models.yaml:2: models[0]" in r.stderr, r.stderr


@pytest.mark.native
def test_within_the_limits_the_plan_passes(tmp_path: Path, bin_info: object) -> None:
    r = dry_run(tmp_path, "    ctx_size: 8192\n    parallel: 2\n")  # 2 slots x 4096 trained
    assert r.returncode == 0, r.stderr


@pytest.mark.native
def test_allow_ctx_beyond_trained_raises_the_trained_context(tmp_path: Path, bin_info: object) -> None:
    """llama-server caps each slot at the GGUF's context_length: the plan overrides that key."""
    r = dry_run(tmp_path, "    ctx_size: 32768\n    parallel: 2\n    allow_ctx_beyond_trained: true\n")
    assert r.returncode == 0, r.stderr
    assert "--override-kv qwen35moe.context_length=int:16384" in r.stdout, r.stdout
    within = dry_run(tmp_path, "    ctx_size: 8192\n    parallel: 2\n    allow_ctx_beyond_trained: true\n")
    assert within.returncode == 0 and "--override-kv" not in within.stdout
