"""``orchestrator pull`` and ``hf:`` paths against a Hugging Face Hub on 127.0.0.1 (``fake_hub``):
the files a quant means (split parts, MTP head, never a projector), the shared hub cache, the
hub's sha256 checked, a transfer killed mid-way and resumed by the next run (a ``Range``
request), a corrupt file refused, and ``up`` pulling an entry (or refusing with ``--offline``)
and then serving the pulled demo model through a real llama-server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fake_hub import FakeHub, serve_hub
from huggingface_hub.constants import DOWNLOAD_CHUNK_SIZE as CHUNK
from supervision_helpers import RunningUp

from orchestrator.config.model_paths import HfSource, parse_hf_source
from orchestrator.errors import UserError
from orchestrator.hub import cache
from orchestrator.hub.pull import pull
from orchestrator.hub.select import RepoFile, available, quant_of, select, select_projector

QWEN = [
    "README.md",
    "Qwen3.6-35B-A3B-UD-Q4_K_XL.gguf",
    "Qwen3.6-35B-A3B-IQ4_XS.gguf",
    "Qwen3.6-35B-A3B-MTP.gguf",
    "BF16/Qwen3.6-35B-A3B-BF16-00001-of-00002.gguf",
    "BF16/Qwen3.6-35B-A3B-BF16-00002-of-00002.gguf",
    "mmproj-F16.gguf",
]


def _files(names: list[str]) -> list[RepoFile]:
    return [RepoFile(n) for n in names]


# --- which files a quant means (pure) -----------------------------------------------------------


def test_a_quant_means_its_file_and_the_separate_mtp_head() -> None:
    chosen = select(_files(QWEN), "ud-q4_k_xl", "unsloth/Qwen3.6-35B-A3B-GGUF")
    assert [f.name for f in chosen.model] == ["Qwen3.6-35B-A3B-UD-Q4_K_XL.gguf"]
    assert chosen.head is not None and chosen.head.name == "Qwen3.6-35B-A3B-MTP.gguf"
    assert quant_of("BF16/Qwen3.6-35B-A3B-BF16-00002-of-00002.gguf") == "BF16"


def test_a_split_model_means_every_part_and_any_part_names_it() -> None:
    by_quant = select(_files(QWEN), "BF16", "r/m")
    by_file = select(_files(QWEN), "Qwen3.6-35B-A3B-BF16-00002-of-00002.gguf", "r/m")
    assert [f.name for f in by_quant.model] == [f.name for f in by_file.model] == QWEN[4:6]
    with pytest.raises(UserError, match="split into 2 parts but the repository has 1"):
        select(_files(QWEN[:5]), "BF16", "r/m")


def test_a_missing_quant_lists_the_ones_there_are() -> None:
    with pytest.raises(UserError) as err:
        select(_files(QWEN), "Q8_0", "unsloth/Qwen3.6-35B-A3B-GGUF")
    assert "no quant 'Q8_0'" in str(err.value) and "there are: BF16, IQ4_XS, UD-Q4_K_XL" in str(err.value)
    assert available(_files(QWEN)) == ["BF16", "IQ4_XS", "UD-Q4_K_XL"]  # no projector, no head
    with pytest.raises(UserError, match="matches 3 models"):
        select(_files(QWEN), None, "unsloth/Qwen3.6-35B-A3B-GGUF")


def test_a_source_not_downloaded_names_the_pull_to_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    with pytest.raises(UserError, match="hf:o/n:Q8_0 is not downloaded yet") as info:
        cache.require_cached(HfSource("o/n", "Q8_0"))
    assert "`orchestrator pull o/n:Q8_0` first" in (info.value.hint or "") and "--dry-run" in (info.value.hint or "")


def test_hf_sources_parse_and_bad_ones_are_config_errors(tmp_path: Path) -> None:
    assert parse_hf_source("hf:unsloth/Qwen3.6-35B-A3B-GGUF:UD-Q4_K_XL") == HfSource(
        "unsloth/Qwen3.6-35B-A3B-GGUF", "UD-Q4_K_XL"
    )
    assert parse_hf_source("o/n@v1").spec == "o/n@v1"
    # a browser address names the id to write instead of "'https' is not a repository id"
    with pytest.raises(ValueError, match=r"web address; write the repository id: unsloth/Q-GGUF$"):
        parse_hf_source("https://huggingface.co/unsloth/Q-GGUF")
    with pytest.raises(ValueError, match=r"repository id: unsloth/Q-GGUF:UD-Q4_K_XL/q-00001-of-00002\.gguf@v2$"):
        parse_hf_source("https://huggingface.co/unsloth/Q-GGUF/blob/v2/UD-Q4_K_XL/q-00001-of-00002.gguf?download=1")
    from orchestrator.config.load import load_config

    bad = tmp_path / "models.yaml"
    bad.write_text("models:\n  - name: m\n    path: 'hf:not a repo'\n")
    with pytest.raises(UserError, match=r"models.yaml:3.*not a repository id"):
        load_config(bad)


# --- downloads from the local hub ---------------------------------------------------------------

REPO = "test-org/tiny-mtp-GGUF"


@pytest.fixture()
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    """A local hub with one repository: two quants of made-up bytes, one split in two, a
    projector and an MTP head; ``HF_ENDPOINT`` and a private ``HF_HUB_CACHE`` point at it."""
    blob = os.urandom(300_000)
    files = {
        # larger than huggingface_hub's 10 MiB write chunk, so an interrupted transfer leaves bytes on disk
        "tiny-Q8_0.gguf": os.urandom(CHUNK + CHUNK // 2),
        "tiny-MTP.gguf": blob[:5000],
        "F16/tiny-F16-00001-of-00002.gguf": blob[:1000],
        "F16/tiny-F16-00002-of-00002.gguf": blob[1000:3000],
        "mmproj-tiny-F16.gguf": b"projector",
        "README.md": b"# tiny",
    }
    with serve_hub(FakeHub({REPO: files})) as running:
        monkeypatch.setenv("HF_ENDPOINT", running.url)
        monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
        monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
        yield running


def test_pull_puts_model_parts_and_head_in_the_shared_cache(hub: FakeHub) -> None:
    pulled = pull(HfSource(REPO, "F16"))
    names = [p.name for p in pulled.files]
    assert names == ["tiny-F16-00001-of-00002.gguf", "tiny-F16-00002-of-00002.gguf", "tiny-MTP.gguf"]
    assert pulled.head is not None and pulled.head.name == "tiny-MTP.gguf"
    files = hub.repos[REPO]
    for path, name in zip(pulled.files, ["F16/" + names[0], "F16/" + names[1], names[2]], strict=True):
        # huggingface_hub's layout: snapshots/<commit>/<path> -> blobs/<sha256>
        assert path.read_bytes() == files[name]
        assert path.resolve().name == hub.sha256(files[name]) and path.is_symlink()
        assert f"snapshots/{hub.commit(REPO)}" in str(path)
    assert cache.cached(HfSource(REPO, "F16")) == pulled  # found again with no network
    gets = sum(1 for method, path, _ in hub.log if method == "GET" and "/resolve/" in path)
    assert pull(HfSource(REPO, "F16")) == pulled  # nothing downloaded twice
    assert sum(1 for method, path, _ in hub.log if method == "GET" and "/resolve/" in path) == gets


def test_a_corrupt_file_is_refused_and_removed(hub: FakeHub) -> None:
    hub.corrupt.add("tiny-Q8_0.gguf")
    with pytest.raises(UserError) as err:
        pull(HfSource(REPO, "Q8_0"))
    assert "tiny-Q8_0.gguf" in str(err.value) and "corrupt" in str(err.value)
    assert hub.sha256(hub.repos[REPO]["tiny-Q8_0.gguf"]) in str(err.value)
    blobs = cache.repo_dir(REPO) / "blobs"
    assert not [
        p
        for p in blobs.iterdir()
        if p.name.startswith(hub.sha256(hub.repos[REPO]["tiny-Q8_0.gguf"])) and not p.name.endswith(".lock")
    ]
    assert cache.cached(HfSource(REPO, "Q8_0")) is None


def test_a_missing_quant_or_repo_is_a_clear_error(hub: FakeHub) -> None:
    with pytest.raises(UserError) as err:
        pull(HfSource(REPO, "Q4_K_M"))
    assert "no quant 'Q4_K_M'" in str(err.value) and "there are: F16, Q8_0" in str(err.value)
    with pytest.raises(UserError, match="no repository test-org/nothing"):
        pull(HfSource("test-org/nothing", "Q8_0"))


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "orchestrator.cli.app", *args]


def test_an_interrupted_pull_resumes_where_it_stopped(hub: FakeHub, tmp_path: Path) -> None:
    """The real CLI is killed (Ctrl-C) while the hub holds the transfer after 1.2 write chunks;
    the next run asks for the rest with a Range request and the file matches the hub's sha256."""
    name, cut = "tiny-Q8_0.gguf", CHUNK + CHUNK // 5
    hub.stall_after[name] = cut
    partial = cache.repo_dir(REPO) / "blobs" / (hub.sha256(hub.repos[REPO][name]) + ".partial")
    # a long read timeout: huggingface_hub would otherwise resume by itself after 10 s of stall
    env = {**os.environ, "HF_HUB_DOWNLOAD_TIMEOUT": "600"}
    # SIGINT as a terminal leaves it: a job a non-interactive shell started in the background
    # (CI, a loop) inherits it ignored, and the Ctrl-C below would do nothing
    first = subprocess.Popen(
        _cli("pull", f"{REPO}:Q8_0"),
        env=env,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 60
        while not (partial.exists() and partial.stat().st_size >= CHUNK):  # one chunk is on disk
            assert first.poll() is None and time.monotonic() < deadline, "the transfer never reached the cut"
            time.sleep(0.05)
        first.send_signal(signal.SIGINT)  # Ctrl-C
        _, err = first.communicate(timeout=30)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 130 and "Traceback" not in err
    kept = partial.stat().st_size
    assert CHUNK <= kept <= cut
    hub.release.set()
    second = subprocess.run(
        _cli("pull", f"{REPO}:Q8_0"), env=dict(os.environ), capture_output=True, text=True, timeout=60
    )
    assert second.returncode == 0, second.stderr
    assert ("GET", f"/{REPO}/resolve/{hub.commit(REPO)}/{name}", f"bytes={kept}-") in hub.log
    model = cache.require_cached(HfSource(REPO, "Q8_0")).model
    assert model.read_bytes() == hub.repos[REPO][name] and not partial.exists()
    assert "sha256 ok" in second.stderr and "100%" in second.stderr  # the line and the progress bar
    assert f"model: {model}" in second.stdout and "MTP head:" in second.stdout


# --- up pulls what an entry lacks, then serves it -----------------------------------------------


@pytest.fixture()
def demo_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, demo_model: Path) -> Iterator[FakeHub]:
    """A local hub publishing the project's demo model as ``test-org/demo-GGUF:Q8_0``."""
    with serve_hub(FakeHub({"test-org/demo-GGUF": {"demo-Q8_0.gguf": demo_model.read_bytes()}})) as running:
        monkeypatch.setenv("HF_ENDPOINT", running.url)
        monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
        yield running


def _hf_yaml(path: Path) -> Path:
    path.write_text(
        "server: {host: 127.0.0.1, port: 0, timeouts: {load: 120}}\n"
        "models:\n  - {name: demo, path: 'hf:test-org/demo-GGUF:Q8_0', ctx_size: 512, threads: 1}\n"
    )
    return path


@pytest.mark.native
def test_up_offline_refuses_naming_the_pull(demo_hub: FakeHub, tmp_path: Path) -> None:
    config = _hf_yaml(tmp_path / "models.yaml")
    env = {**os.environ, "ORCHESTRATOR_STATE": str(tmp_path / "state")}
    done = subprocess.run(
        _cli("up", "-c", str(config), "--offline"), env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2
    assert "models.yaml:3: models[0].path" in done.stderr
    assert "orchestrator pull test-org/demo-GGUF:Q8_0" in done.stderr
    assert not [e for e in demo_hub.log if "/resolve/" in e[1]]  # nothing was downloaded


@pytest.mark.native
def test_up_pulls_an_hf_entry_then_serves_it(demo_hub: FakeHub, tmp_path: Path, bin_info: object) -> None:
    config = _hf_yaml(tmp_path / "models.yaml")
    with RunningUp(config, tmp_path / "state") as up:
        reply = httpx.post(
            f"{up.run['endpoint']}/v1/chat/completions",
            json={"model": "demo", "max_tokens": 8, "messages": [{"role": "user", "content": "Hello"}]},
            timeout=120,
            trust_env=False,
        )
        assert reply.status_code == 200, reply.text
        assert reply.json()["usage"]["completion_tokens"] > 0
        out = up.out.read_text()
    assert "pulling hf:test-org/demo-GGUF:Q8_0" in out and "sha256 ok" in out
    assert "demo-Q8_0.gguf: 100%" in out  # the download's progress bar, in up's log too
    model = cache.require_cached(HfSource("test-org/demo-GGUF", "Q8_0")).model
    assert str(model.resolve()).startswith(str(tmp_path / "hf-cache"))


@pytest.mark.native
def test_models_dirs_finds_what_pull_put_in_the_cache(demo_hub: FakeHub) -> None:
    """The hub cache is an ordinary folder of GGUF links: a ``models_dirs`` entry finds the pull."""
    from orchestrator.launch.discover import scan

    pulled = pull(HfSource("test-org/demo-GGUF", "Q8_0"))
    found, notes = scan([cache.cache_dir()])
    assert [(f.name, f.path) for f in found] == [("demo-Q8_0", pulled.model)], notes


@pytest.mark.native
def test_up_serves_an_hf_model_with_its_separate_mtp_head(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pinned_source: Path, bin_info: object
) -> None:
    """A repository whose MTP head is its own file: pulled with the model, served as its draft."""
    from orchestrator.models.tiny import draft_path, write_tiny_model

    trunk = write_tiny_model(tmp_path / "sep.gguf", mode="echo", q=0.1, variant="separate")
    files = {"tiny-sep-Q8_0.gguf": trunk.read_bytes(), "tiny-sep-MTP.gguf": draft_path(trunk).read_bytes()}
    with serve_hub(FakeHub({"test-org/sep-GGUF": files})) as running:
        monkeypatch.setenv("HF_ENDPOINT", running.url)
        monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
        config = tmp_path / "models.yaml"
        config.write_text(
            "server: {host: 127.0.0.1, port: 0, timeouts: {load: 120}}\n"
            "models:\n  - {name: sep, path: 'hf:test-org/sep-GGUF', ctx_size: 512, threads: 1, thinking: false}\n"
        )
        with RunningUp(config, tmp_path / "state") as up:
            reply = httpx.post(
                f"{up.run['endpoint']}/v1/chat/completions",
                json={"model": "sep", "max_tokens": 16, "messages": [{"role": "user", "content": "Hello"}]},
                timeout=120,
                trust_env=False,
            )
            rows = json.loads(up.cli("status", "--json").stdout)["instances"]
    assert reply.status_code == 200, reply.text
    assert reply.json()["timings"]["draft_n"] > 0  # the separate head drafts
    head = cache.require_cached(HfSource("test-org/sep-GGUF")).head
    assert head is not None and head.name == "tiny-sep-MTP.gguf"
    assert rows[0]["speculation"] is not None


# --- vision projectors (models.yaml mmproj: hf:...) ---------------------------------------------


def test_a_projector_source_means_the_repositorys_projector() -> None:
    """``mmproj: hf:REPO`` takes the repository's F16 projector; a precision or a file names another;
    a quant never means a projector, and a repository without one says so."""
    files = _files([*QWEN, "mmproj-BF16.gguf", "mmproj-F32.gguf"])
    assert [f.name for f in select_projector(files, None, "r/m").model] == ["mmproj-F16.gguf"]
    assert [f.name for f in select_projector(files, "bf16", "r/m").model] == ["mmproj-BF16.gguf"]
    assert [f.name for f in select_projector(files, "mmproj-F32.gguf", "r/m").model] == ["mmproj-F32.gguf"]
    assert all("mmproj" not in f.name for f in select(files, "UD-Q4_K_XL", "r/m").files)
    with pytest.raises(UserError, match=r"has no projector 'Q4_0'; there are: mmproj-BF16\.gguf"):
        select_projector(files, "Q4_0", "r/m")
    with pytest.raises(UserError, match="has no vision projector"):
        select_projector(_files(QWEN[:4]), None, "r/m")


def test_pull_fetches_a_projector_and_up_finds_it_in_the_cache(hub: FakeHub) -> None:
    source = HfSource(REPO)
    assert cache.cached(source, projector=True) is None
    pulled = pull(source, projector=True)
    assert [p.name for p in pulled.files] == ["mmproj-tiny-F16.gguf"] and pulled.model.read_bytes() == b"projector"
    assert cache.require_cached(source, projector=True).model == pulled.model
    done = subprocess.run(_cli("pull", REPO, "--mmproj"), env=dict(os.environ), capture_output=True, text=True)
    assert done.returncode == 0 and f"projector: {pulled.model}" in done.stdout, done.stderr


@pytest.mark.native
def test_up_pulls_the_projector_and_serves_an_image_with_mtp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, demo_model: Path, bin_info: object
) -> None:
    """``path`` and ``mmproj`` both ``hf:``: ``up`` pulls the model and its projector, and an image
    reaches llama-server as media with drafting on."""
    from orchestrator.models.tiny_mmproj import write_tiny_mmproj

    projector = write_tiny_mmproj(tmp_path / "mmproj-F16.gguf").read_bytes()
    files = {"demo-Q8_0.gguf": demo_model.read_bytes(), "mmproj-F16.gguf": projector}
    with serve_hub(FakeHub({"test-org/eyes-GGUF": files})) as running:
        monkeypatch.setenv("HF_ENDPOINT", running.url)
        monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
        config = tmp_path / "models.yaml"
        config.write_text(
            "server: {host: 127.0.0.1, port: 0, timeouts: {load: 120}}\n"
            "models:\n  - {name: eyes, path: 'hf:test-org/eyes-GGUF:Q8_0', mmproj: 'hf:test-org/eyes-GGUF', "
            "ctx_size: 2048, threads: 1, thinking: false}\n"
        )
        png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
        content = [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png}"}},
        ]
        with RunningUp(config, tmp_path / "state") as up:
            reply = httpx.post(
                f"{up.run['endpoint']}/v1/chat/completions",
                json={"model": "eyes", "max_tokens": 16, "messages": [{"role": "user", "content": content}]},
                timeout=120,
                trust_env=False,
            )
    assert reply.status_code == 200, reply.text
    assert reply.json()["timings"]["draft_n"] > 0
    pulled = cache.require_cached(HfSource("test-org/eyes-GGUF"), projector=True).model
    assert pulled.name == "mmproj-F16.gguf" and pulled.read_bytes() == projector
