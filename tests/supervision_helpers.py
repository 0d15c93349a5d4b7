"""Helpers for the supervisor, up and orphan tests: specs for a real llama-server and for the
fault-injecting fake, a fast supervisor policy, and waiting on instance states."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import httpx
import psutil

from orchestrator.config.schema import Config, ModelConfig, ServerConfig, SpeculativeConfig, Timeouts
from orchestrator.host.process import die_with_parent
from orchestrator.launch.argv import ServerArgs, Speculation
from orchestrator.launch.spec import InstanceSpec
from orchestrator.supervise.supervisor import Instance, ProcessState, SupervisorPolicy

FAKE_SERVER = Path(__file__).with_name("fake_llama_server.py")


def make_config(model: str = "demo", *, load: float = 60.0, speculative: SpeculativeConfig | None = None) -> Config:
    """A config holding one model named ``model`` (the supervisor reads timeouts and spec settings)."""
    return Config(
        server=ServerConfig(timeouts=Timeouts(load=load)),
        models=[ModelConfig(name=model, path="/unused.gguf", speculative=speculative or SpeculativeConfig())],
    )


def fast_policy(**overrides: float) -> SupervisorPolicy:
    """Production rules with short backoffs and polls, so fault tests finish in seconds."""
    base: dict[str, float] = {
        "backoff_base": 0.2,
        "backoff_max": 1.0,
        "watch_interval": 0.25,
        "health_timeout": 1.0,
        "stall_timeout": 30.0,
        "stop_grace": 3.0,
    }
    base.update(overrides)
    return SupervisorPolicy(**base)  # type: ignore[arg-type]


def fake_spec(*flags: str, name: str = "demo-0", alias: str = "demo", spec_type: str | None = None) -> InstanceSpec:
    """A spec that runs ``fake_llama_server.py`` with ``flags`` (faults), on an OS-picked port."""
    server = ServerArgs(
        program=(sys.executable, str(FAKE_SERVER)),
        model=Path(f"/nowhere/{alias}.gguf"),
        alias=alias,
        host="127.0.0.1",
        port=0,
        ctx_size=512,
        parallel=1,
        speculation=Speculation(spec_type, 3, 1) if spec_type else None,
        extra_args=flags,
    )
    return InstanceSpec(name=name, model=alias, replica=0, gpus=(), env={}, server=server)


def real_spec(
    server: Path,
    lib_dir: Path,
    model: Path,
    *,
    name: str = "demo-0",
    alias: str = "demo",
    spec: bool = False,
    extra: Iterable[str] = (),
) -> InstanceSpec:
    """A spec for the real llama-server on ``model`` (CPU, port 0, small context)."""
    args = ServerArgs(
        program=(str(server),),
        model=model,
        alias=alias,
        host="127.0.0.1",
        port=0,
        ctx_size=512,
        parallel=1,
        threads=1,
        speculation=Speculation("draft-mtp", 3, 1) if spec else None,
        extra_args=tuple(extra),
    )
    return InstanceSpec(name=name, model=alias, replica=0, gpus=(), env={"LD_LIBRARY_PATH": str(lib_dir)}, server=args)


async def wait_state(inst: Instance, states: Iterable[ProcessState], timeout: float) -> ProcessState:
    """Wait until ``inst.state`` is one of ``states``; AssertionError with the log tail on timeout."""
    wanted = set(states)
    deadline = time.monotonic() + timeout
    while inst.state not in wanted:
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{inst.name} stayed {inst.state.value} ({inst.message}); wanted {[s.value for s in wanted]}; "
                "log tail:\n" + "\n".join(inst.log_tail(20))
            )
        await asyncio.sleep(0.05)
    return inst.state


async def wait_until(cond: Callable[[], bool], timeout: float, what: str) -> None:
    """Wait until ``cond()`` holds, checking every 50 ms; AssertionError naming ``what`` on timeout.

    Prefer a condition on a counter (``restarts``) over a short-lived state: a state that lasts
    less than a loaded machine's scheduling delay can be missed by polling.
    """
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:g} s: {what}")
        await asyncio.sleep(0.05)


def gone(proc: int | psutil.Process, timeout: float = 10.0) -> bool:
    """True once the process no longer exists (or is a zombie) within ``timeout`` seconds.

    Pass a ``psutil.Process`` taken while the process lived where you can: this machine's
    ``pid_max`` may be 32768, and a bare pid can be reused by an unrelated process, which
    ``psutil.Process.is_running`` tells apart by its start time.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            handle = proc if isinstance(proc, psutil.Process) else psutil.Process(proc)
            if not handle.is_running() or handle.status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def never_a_pid() -> int:
    """A pid no process can have (pids are below ``kernel.pid_max``): a safe "dead" pid to signal."""
    return int(Path("/proc/sys/kernel/pid_max").read_text())


def chat_body(text: str = "hello", max_tokens: int = 8) -> dict[str, object]:
    """A small greedy chat request."""
    return {"messages": [{"role": "user", "content": text}], "max_tokens": max_tokens, "temperature": 0}


def child_env(**extra: str) -> dict[str, str]:
    """``os.environ`` plus ``extra`` (for subprocesses of the tests)."""
    env = dict(os.environ)
    env.update(extra)
    return env


def write_models_yaml(
    path: Path,
    model: Path,
    *,
    port: int = 0,
    model_port: int | None = None,
    extra: str = "",
    shutdown_grace: float = 30,
    threads: int = 1,
) -> Path:
    """A models.yaml serving ``model`` as "demo" on CPU with a small context and ``threads``
    (one: ggml's threads spin while they wait, and test files run side by side); the proxy on
    ``port``; ``shutdown_grace`` seconds for in-flight requests after SIGTERM."""
    lines = [
        "server:",
        "  host: 127.0.0.1",
        f"  port: {port}",
        f"  timeouts: {{load: 120, shutdown_grace: {shutdown_grace:g}}}",
        "models:",
        "  - name: demo",
        f"    path: {model}",
        "    ctx_size: 512",
        f"    threads: {threads}",
    ]
    if model_port is not None:
        lines.append(f"    port: {model_port}")
    path.write_text("\n".join(lines) + "\n" + extra)
    return path


class RunningUp:
    """``orchestrator up`` as a subprocess (the real CLI), with its ``run.json`` once ready.

    Use as a context manager; on exit the orchestrator and any llama-server it recorded are
    killed if still alive, so a failing test leaks nothing.
    """

    def __init__(self, config: Path, state: Path, timeout: float = 180.0, *, until: str = "instances") -> None:
        """``until``: ``"instances"`` waits until every instance serves; ``"health"`` until ``/health``
        answers 200 (models loaded at start settled; on-demand ones stay unloaded)."""
        self.config, self.state, self.timeout, self.until = config, state, timeout, until
        self.out = state / "up.out"
        self.proc: subprocess.Popen[bytes] | None = None
        self.run: dict[str, object] = {}
        self.started = 0.0
        self._children: list[psutil.Process] = []  # the llama-servers, taken while they live

    def env(self) -> dict[str, str]:
        return child_env(ORCHESTRATOR_STATE=str(self.state))

    def cli(self, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """Run another ``orchestrator`` command against this state dir."""
        return subprocess.run(
            [sys.executable, "-m", "orchestrator.cli.app", *args],
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def __enter__(self) -> RunningUp:
        self.state.mkdir(parents=True, exist_ok=True)
        self.started = time.monotonic()
        with open(self.out, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "orchestrator.cli.app", "up", "--config", str(self.config)],
                env=self.env(),
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent(),  # a kill -9 of pytest takes `up` (and so its children) along
            )
        deadline = time.monotonic() + self.timeout
        run_file = self.state / "run.json"
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"orchestrator up exited with {self.proc.returncode}:\n{self.out.read_text()}")
            try:
                self.run = json.loads(run_file.read_text())
            except (OSError, ValueError):
                self.run = {}
            insts = self.run.get("instances") or {}
            if self._ready(insts):
                for pid in self.instance_pids():
                    with contextlib.suppress(psutil.NoSuchProcess):
                        self._children.append(psutil.Process(pid))
                return self
            if time.monotonic() > deadline:
                raise AssertionError(f"not ready after {self.timeout} s:\n{self.out.read_text()}")
            time.sleep(0.1)

    def _ready(self, insts: Any) -> bool:
        if self.until == "health":
            if not self.run.get("endpoint"):
                return False
            try:
                return httpx.get(f"{self.run['endpoint']}/health", timeout=5, trust_env=False).status_code == 200
            except httpx.HTTPError:
                return False
        return bool(insts) and all(i.get("state") in ("ready", "degraded") for i in insts.values())

    def instance_pids(self) -> list[int]:
        return [i["pid"] for i in (self.run.get("instances") or {}).values() if i.get("pid")]  # type: ignore[union-attr]

    def __exit__(self, *exc: object) -> None:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)
        for child in self._children:
            # only our own llama-server's group: its pid may belong to someone else by now
            if child.is_running():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(child.pid, signal.SIGKILL)
