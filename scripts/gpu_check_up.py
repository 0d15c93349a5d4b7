"""Processes for ``scripts/gpu_check.py``: ``orchestrator up`` as a child, and bounded commands.

``RunningUp`` starts ``python -m orchestrator.cli.app up`` in its own session with a private
state folder, waits until every instance in its ``run.json`` is ready, and stops it with
SIGTERM (then SIGKILL for the whole group and every llama-server it recorded), so a run that
is cut short leaves no process behind. ``run_bounded`` runs a command with a time limit and
kills its whole process group when the limit passes.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from orchestrator.host.process import die_with_parent  # scripts/gpu_check.py puts the repo on sys.path

REPO = Path(__file__).resolve().parents[1]


class StepFailed(Exception):
    """A step could not finish; the message says what and what to do."""


def child_env(**extra: str) -> dict[str, str]:
    """This environment plus the repository on PYTHONPATH (the bare GPU box runs it uninstalled)."""
    env = dict(os.environ, **extra)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    return env


def run_bounded(argv: list[str], *, timeout: float, what: str, hint: str) -> None:
    """Run ``argv`` (output streamed to ours) for at most ``timeout`` seconds.

    Raises ``StepFailed`` when it fails or runs out of time (its process group is killed)."""
    if timeout <= 5:
        raise StepFailed(f"no time left for {what}; {hint}")
    proc = subprocess.Popen(argv, env=child_env(), start_new_session=True, preexec_fn=die_with_parent())
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            _kill_group(proc.pid, signal.SIGKILL)
            proc.wait()
        raise StepFailed(f"{what} did not finish within {timeout:.0f} s; {hint}") from None
    if code != 0:
        raise StepFailed(f"{what} failed (exit status {code}); see its output above")


def _kill_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


class RunningUp:
    """``orchestrator up -c config`` with its state (run.json, logs) under ``state``."""

    def __init__(self, config: Path, state: Path) -> None:
        self.config, self.state = config, state
        self.proc: subprocess.Popen[bytes] | None = None
        self.run: dict[str, Any] = {}

    @property
    def endpoint(self) -> str:
        return str(self.run["endpoint"])

    def instance_url(self, model: str) -> str:
        """The base URL of replica 0 of ``model`` (its llama-server, not the proxy)."""
        return str(self.run["instances"][f"{model}-0"]["base_url"])

    def instance_pid(self, model: str) -> int | None:
        """The pid of replica 0 of ``model`` (its llama-server), when recorded."""
        pid = self.run["instances"][f"{model}-0"].get("pid")
        return int(pid) if pid else None

    def start(self, timeout: float) -> None:
        """Start and wait until every instance is ready. Raises ``StepFailed`` (with the log tail)."""
        self.state.mkdir(parents=True, exist_ok=True)
        out = self.state / "up.out"
        with open(out, "wb") as fh:
            argv = [sys.executable, "-m", "orchestrator.cli.app", "up", "--config", str(self.config)]
            self.proc = subprocess.Popen(
                argv,
                env=child_env(ORCHESTRATOR_STATE=str(self.state)),
                stdout=fh,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent(),  # a kill -9 of this script takes `up` (and its children) along
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise StepFailed(f"orchestrator up exited with {self.proc.returncode}: {_tail(out)}")
            try:
                self.run = json.loads((self.state / "run.json").read_text())
            except (OSError, ValueError):
                self.run = {}
            insts = self.run.get("instances") or {}
            if insts and all(i.get("state") == "ready" for i in insts.values()):
                return
            failed = [n for n, i in insts.items() if i.get("state") == "failed"]
            if failed:
                raise StepFailed(f"instance {failed[0]} failed to start: {_tail(out)}")
            time.sleep(0.2)
        raise StepFailed(f"orchestrator up was not ready within {timeout:.0f} s: {_tail(out)}")

    def stop(self, grace: float = 20.0) -> None:
        """SIGTERM, wait up to ``grace`` s, then SIGKILL the group and any recorded llama-server."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                _kill_group(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        for inst in (self.run.get("instances") or {}).values():
            if inst.get("pid") and _is_llama_server(int(inst["pid"])):
                _kill_group(int(inst["pid"]), signal.SIGKILL)


def _is_llama_server(pid: int) -> bool:
    import psutil

    try:
        return "llama-server" in psutil.Process(pid).name()
    except psutil.Error:
        return False


def _tail(path: Path, n: int = 12) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no output)"
