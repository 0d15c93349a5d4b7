"""Shared fixtures: the native build, generated tiny models, and real llama-server processes.

- ``bin_info``: ``orchestrator.native.build.locate()`` (session); skips the test when there is no build.
- ``echo_model`` / ``echo_model_q02``: echo tiny models with acceptance 1.0 / 0.8 (session).
- ``demo_model``: ``orchestrator.models.tiny.demo_model()`` (echo, q = 0.1, cached).
- ``llama_server``: a factory; ``llama_server(model, *extra_args)`` starts a real llama-server on
  an OS-chosen port (``--port 0``), waits for ``/health`` 200 and returns a ``LlamaServer``.
  Every server it started is stopped at teardown (SIGTERM to its process group, then SIGKILL).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from orchestrator.errors import UserError

SERVER_START_TIMEOUT = 90.0  # seconds; a 16 MB model loads in about 1 s on 2 cores

# Test modules are rewritten for pytest's assertions on every import; with bytecode writing off
# (PYTHONDONTWRITEBYTECODE, as on this project's machines) that is redone by every run and every
# xdist worker, about 8 s each. The suite keeps its own bytecode in __pycache__ (git-ignored).
sys.dont_write_bytecode = False

# Every llama-server a test starts without ``-t`` runs one thread (llama-server reads the variable
# unless ``-t`` is given; children inherit it through ``orchestrator up``). Its default is one thread
# per core, and ggml's threads spin while they wait: with test files running side by side
# (pytest-xdist), two such servers on two cores contend for every core (a compaction that takes 20 s
# alone ran past its test's 120 s timeout in one such run).
os.environ.setdefault("LLAMA_ARG_THREADS", "1")
# The launch plan passes --fit off (launch/plan.py: its -c and -ngl leave llama-server's fit nothing to
# change); a llama-server a test starts by hand gets the same through the variable, which saves a
# second load of the model's metadata and vocabulary per start (1.3 -> 0.5 CPU-s for the demo model).
# test_planned_command_really_serves_with_drafting runs without it and reads the plan's flag back.
os.environ.setdefault("LLAMA_ARG_FIT", "off")

# scripts/test.sh (and so CI) sets this: there a missing build is a failure, never a silent skip.
REQUIRE_NATIVE = os.environ.get("ORCHESTRATOR_REQUIRE_NATIVE") == "1"


def _missing(what: str) -> None:
    if REQUIRE_NATIVE:
        pytest.fail(f"{what} (ORCHESTRATOR_REQUIRE_NATIVE=1)")
    pytest.skip(what)


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto`` (pyproject's addopts): one worker more than cores. A test spends part of its time
    waiting on a llama-server, a port or a clock, and a third worker uses that time: on 2 cores the
    full run took 519 s with 2 workers and 469 s with 3, and used about as much CPU."""
    import psutil

    return (psutil.cpu_count(logical=False) or os.cpu_count() or 1) + 1


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Refuse a test that needs a tier's part (the build, an agent client, the browser) without the
    tier's marker: before ``-m`` deselects anything, so the fast tier never runs one (tests/tiers.py)."""
    from tests.tiers import unmarked

    problems = unmarked(items)
    if problems:
        raise pytest.UsageError("tests without their tier's marker:\n  " + "\n  ".join(problems))


@pytest.fixture(autouse=True, scope="session")
def _saved_prompt_caches(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Saved slots (``kv_persist``) of every test go to a session folder, never the user's cache,
    so one test's saved prompts are never restored into another's llama-server."""
    os.environ["ORCHESTRATOR_KV"] = str(tmp_path_factory.mktemp("kv"))


@pytest.fixture(autouse=True, scope="session")
def _state_folder(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The state folder (stored Responses, ``up``'s run files) of every test is a session folder,
    never the user's; tests that need their own set ``ORCHESTRATOR_STATE`` themselves."""
    os.environ["ORCHESTRATOR_STATE"] = str(tmp_path_factory.mktemp("state"))


@pytest.fixture(autouse=True, scope="session")
def _no_registry() -> None:
    """``doctor`` and ``build --show`` ask PyPI how old the pin is; tests never reach the network:
    the registry's URL is a closed local port (the offline answer), unless a test serves one."""
    os.environ.setdefault("ORCHESTRATOR_PYPI_JSON", "http://127.0.0.1:9/pypi/{package}/json")


@pytest.fixture(scope="session")
def bin_info() -> Any:
    """The native build (``BuildInfo``); skips when there is none."""
    from orchestrator.native import build

    try:
        return build.locate()
    except UserError as err:
        _missing(f"no native llama-server build: {err}")


@pytest.fixture(scope="session")
def pinned_source() -> Path:
    """Root of the pinned llama.cpp source (tokenizer and template for tiny models)."""
    from orchestrator.native import build

    try:
        return build.pinned_source()
    except UserError as err:
        _missing(f"pinned llama.cpp source unavailable: {err}")


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tiny-models")


@pytest.fixture(scope="session")
def echo_model(tiny_dir: Path, pinned_source: Path) -> Path:
    """Echo model, head embedded, q = 0: every NextN draft is right."""
    from orchestrator.models.tiny import write_tiny_model

    return write_tiny_model(tiny_dir / "echo-q0.gguf", mode="echo", q=0.0)


@pytest.fixture(scope="session")
def echo_model_q02(tiny_dir: Path, pinned_source: Path) -> Path:
    """Echo model, head embedded, q = 0.2: per-token draft acceptance 0.8."""
    from orchestrator.models.tiny import write_tiny_model

    return write_tiny_model(tiny_dir / "echo-q0.2.gguf", mode="echo", q=0.2)


@pytest.fixture(scope="session")
def demo_model(pinned_source: Path) -> Path:
    """The cached demo model (echo, q = 0.1, embedded head)."""
    from orchestrator.models.tiny import demo_model as make_demo

    return make_demo()


@dataclass
class LlamaServer:
    """A running llama-server started by the ``llama_server`` fixture."""

    argv: list[str]
    process: subprocess.Popen[bytes]
    port: int
    log_path: Path
    _stopped: bool = field(default=False, repr=False)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        """The server's combined stdout/stderr so far."""
        return self.log_path.read_text(errors="replace")

    def post(self, path: str, body: dict[str, Any], timeout: float = 120.0) -> dict[str, Any]:
        """POST JSON, assert 200, return the JSON answer."""
        r = httpx.post(self.base_url + path, json=body, timeout=timeout)
        assert r.status_code == 200, f"{path} -> {r.status_code}: {r.text[:500]}"
        data: dict[str, Any] = r.json()
        return data

    def stop(self, grace: float = 5.0) -> None:
        """SIGTERM the process group, SIGKILL after ``grace`` seconds; always reaps."""
        if self._stopped:
            return
        self._stopped = True
        from orchestrator.host.process import signal_group

        if self.process.poll() is None:
            signal_group(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                signal_group(self.process.pid, signal.SIGKILL)
                self.process.wait()
        signal_group(self.process.pid, signal.SIGKILL)  # stragglers in the group


def _start_server(
    bin_info: Any, log_path: Path, model: Path, args: tuple[str, ...], ctx: int, threads: int
) -> LlamaServer:
    from orchestrator.host.process import die_with_parent
    from orchestrator.supervise.readiness import failure_lines, parse_listening_port

    argv = [
        str(bin_info.server),
        "-m", str(model),
        "--host", "127.0.0.1",
        "--port", "0",  # the server binds an OS-chosen port and logs it
        "-c", str(ctx),
        "-t", str(threads),
        *args,
    ]  # fmt: skip
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(bin_info.lib_dir), env.get("LD_LIBRARY_PATH", "")) if p)
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=die_with_parent(),
        )
    server = LlamaServer(argv=argv, process=proc, port=0, log_path=log_path)
    deadline = time.monotonic() + SERVER_START_TIMEOUT
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                lines = server.log().splitlines()
                why = failure_lines(lines) or lines[-5:]
                raise AssertionError(f"llama-server exited with {proc.returncode}: " + " | ".join(why))
            if not server.port:
                for line in server.log().splitlines():
                    if (port := parse_listening_port(line)) is not None:
                        server.port = port
                        break
            if server.port:
                try:
                    if httpx.get(server.base_url + "/health", timeout=2.0).status_code == 200:
                        return server
                except httpx.TransportError:
                    pass
            time.sleep(0.05)
        raise AssertionError(
            f"llama-server not healthy after {SERVER_START_TIMEOUT:.0f} s; log tail: {server.log()[-1000:]}"
        )
    except BaseException:
        server.stop()
        raise


@pytest.fixture
def llama_server(bin_info: Any, tmp_path: Path) -> Iterator[Callable[..., LlamaServer]]:
    """Factory: ``llama_server(model, *args, ctx=512, threads=1) -> LlamaServer``.

    ``args`` are extra llama-server flags (e.g. ``"--spec-type", "draft-mtp"``). The server is
    healthy when returned; all servers are stopped when the test ends, pass or fail.

    One thread by default: ggml's worker threads spin while waiting, and with two of them per
    context (target + MTP draft) on a busy 2-core machine a 96-token request was measured at
    10 s instead of 0.25 s.
    """
    started: list[LlamaServer] = []

    def start(model: Path, *args: str, ctx: int = 512, threads: int = 1) -> LlamaServer:
        log_path = tmp_path / f"llama-server-{len(started)}.log"
        server = _start_server(bin_info, log_path, Path(model), args, ctx, threads)
        started.append(server)
        return server

    try:
        yield start
    finally:
        for server in started:
            server.stop()


@pytest.fixture(scope="session")
def agent_clients() -> Any:
    """The real agent clients (Claude Code, Codex CLI, opencode, Qwen Code, Kilo CLI, Continue's cn,
    aider) at pinned versions (``tests/agent_clients.py``): installed by
    ``scripts/install_agent_clients.sh`` into the cache; skips only when npm, its registry or PyPI is
    unreachable."""
    from tests.agent_clients import ClientsUnavailable, install

    try:
        return install()
    except ClientsUnavailable as err:
        pytest.skip(f"the agent clients cannot be installed: {err}")
