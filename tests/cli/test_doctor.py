"""``orchestrator doctor``: one line per check, exit 1 on any FAIL."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from orchestrator.cli import doctor


def test_port_comes_from_the_yaml_with_defaults(tmp_path: Path) -> None:
    cfg = tmp_path / "models.yaml"
    assert doctor.configured_address(cfg) == ("127.0.0.1", 8080)
    cfg.write_text("server:\n  host: 127.0.0.1\n  port: 9123\nmodels: []\n")
    assert doctor.configured_address(cfg) == ("127.0.0.1", 9123)
    cfg.write_text("server: [unclosed\n")  # a broken file still gets the default port checked
    assert doctor.configured_address(cfg) == ("127.0.0.1", 8080)


def test_a_config_that_is_not_utf8_or_has_an_impossible_port_is_a_fail_line_not_a_traceback(tmp_path: Path) -> None:
    import subprocess
    import sys

    cfg = tmp_path / "models.yaml"
    cfg.write_bytes(b"\xff\xfeserver:\n")  # UTF-16 BOM: a file saved by the wrong editor setting
    argv = [sys.executable, "-m", "orchestrator.cli.app", "doctor", "-c", str(cfg)]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert "Traceback" not in result.stderr + result.stdout, result.stderr[-2000:]
    assert result.returncode == 1
    assert any(line.startswith("FAIL") and "config" in line and "UTF-8" in line for line in result.stdout.splitlines())
    cfg.write_text("server:\n  port: 99999\n")
    assert doctor.configured_address(cfg) == ("127.0.0.1", 8080)  # the config check names 99999
    cfg.write_text("server:\n  port: true\n")
    assert doctor.configured_address(cfg) == ("127.0.0.1", 8080)


def test_a_busy_port_fails_with_a_fix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        cfg = tmp_path / "models.yaml"
        cfg.write_text(f"server:\n  port: {port}\n")
        check = doctor.check_port(cfg)
        assert check.status == doctor.FAIL and str(port) in check.detail and "server.port" in (check.fix or "")
        assert doctor.run(cfg) == 1
    lines = capsys.readouterr().out.strip().splitlines()
    names = [c.name for c in doctor.collect(cfg)]
    assert len(lines) == len(names)
    assert all(line.split()[0] in (doctor.OK, doctor.WARN, doctor.FAIL) for line in lines)
    assert any(line.startswith("FAIL") and "port" in line for line in lines)


def test_free_port_and_python_are_ok(tmp_path: Path) -> None:
    cfg = tmp_path / "models.yaml"
    cfg.write_text("server:\n  port: 0\n")
    assert doctor.check_port(cfg).status == doctor.OK
    assert doctor.check_python().status == doctor.OK


def test_missing_build_tool_is_fail_without_a_build_and_warn_with_one() -> None:
    assert doctor.check_tool("no-such-tool-xyz", "--version", False, "install it").status == doctor.FAIL
    assert doctor.check_tool("no-such-tool-xyz", "--version", True, "install it").status == doctor.WARN


def test_build_check_probes_the_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fault injection: a build whose llama-server lacks draft-mtp, then one that cannot run."""
    from orchestrator.native import fetch as native_fetch
    from orchestrator.native.build import BuildInfo

    server = tmp_path / "llama-server"
    server.write_text("#!/bin/sh\necho '--spec-type none,ngram-simple'\n")
    server.chmod(0o755)
    patches = [{"name": p.name, "sha256": p.sha256} for p in native_fetch.list_patches()]
    build = BuildInfo(tmp_path, server, tmp_path, {"backend": "cpu", "patches": patches, "version": "v"})
    check = doctor.check_build(build, gpu_count=0)
    assert check.status == doctor.FAIL and "draft-mtp" in check.detail
    server.write_text("#!/bin/sh\necho broken >&2\nexit 3\n")
    check = doctor.check_build(build, gpu_count=0)
    assert check.status == doctor.FAIL and "exit 3" in check.detail and "broken" in check.detail
