"""The ``build:`` block of models.yaml gives ``orchestrator build`` its defaults (it was never read)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli import build as build_cli
from orchestrator.cli.app import app
from orchestrator.errors import UserError


def _yaml(tmp_path: Path, build: str) -> Path:
    path = tmp_path / "models.yaml"
    path.write_text(f"build:\n{build}\nmodels:\n  - name: demo\n    path: builtin:tiny-mtp\n")
    return path


def test_the_build_block_gives_defaults_and_the_command_line_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = _yaml(tmp_path, "  backend: cuda\n  cuda_arch: '120'")
    assert build_cli.build_options(cfg, None, None) == ("cuda", "120")
    assert build_cli.build_options(cfg, "cuda", "89") == ("cuda", "89")
    assert build_cli.build_options(cfg, None, "89") == ("cuda", "89")
    monkeypatch.chdir(tmp_path)  # ./models.yaml is read when no --config is given
    assert build_cli.build_options(None, None, None) == ("cuda", "120")
    (tmp_path / "models.yaml").unlink()
    assert build_cli.build_options(None, None, None) == ("auto", None)  # no file: auto
    with pytest.raises(UserError):
        build_cli.build_options(tmp_path / "missing.yaml", None, None)


def test_build_reads_the_block_from_the_command(tmp_path: Path) -> None:
    """``backend: cpu`` with a ``cuda_arch`` is refused, so the block was read (before: ignored,
    and a default auto build started)."""
    cfg = _yaml(tmp_path, "  backend: cpu\n  cuda_arch: '120'")
    result = CliRunner().invoke(app, ["build", "-c", str(cfg)])
    assert result.exit_code == 2, result.output
    assert "--cuda-arch applies only to a CUDA build" in result.output
    bad = _yaml(tmp_path, "  backend: rocm")
    result = CliRunner().invoke(app, ["build", "-c", str(bad)])
    assert result.exit_code == 2 and "build.backend" in result.output
