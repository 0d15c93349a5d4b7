"""Run the real llama-server from the native build for a test, and always stop it.

``running_server(model, *flags)`` starts llama-server on an OS-picked port (``--port 0``;
the port is read from its ``listening on http://127.0.0.1:PORT`` line), waits for
``/health`` 200 and yields the base URL. The child runs in its own session and the whole
group is killed on exit, pass or fail; a ``kill -9`` of pytest kills it too (parent-death signal).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from orchestrator.errors import UserError
from orchestrator.host.process import die_with_parent
from orchestrator.native.build import BuildInfo, locate
from orchestrator.supervise.readiness import parse_listening_port

START_TIMEOUT_S = 60.0


def native_build() -> BuildInfo:
    """The native build, or skip the test with the command that makes one."""
    try:
        return locate()
    except UserError as err:
        pytest.skip(f"{err} (needs the native build)")


@contextmanager
def running_server(model: Path, *flags: str) -> Iterator[str]:
    """Serve ``model`` with llama-server (extra ``flags`` appended); yield ``http://127.0.0.1:PORT``."""
    build = native_build()
    argv = [str(build.server), "-m", str(model), "--host", "127.0.0.1", "--port", "0", "-t", "1", "-c", "1024", *flags]
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=die_with_parent(),  # a kill -9 of pytest takes the server with it
    )
    tail: deque[str] = deque(maxlen=40)
    port: list[int] = []

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            tail.append(line.rstrip())
            found = parse_listening_port(line)
            if found and not port:
                port.append(found)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        url = _wait_ready(proc, port, tail)
        yield url
    finally:
        _stop(proc)
        reader.join(timeout=5)


def _wait_ready(proc: subprocess.Popen[str], port: list[int], tail: deque[str]) -> str:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"llama-server exited with {proc.returncode}:\n" + "\n".join(tail))
        if port:
            url = f"http://127.0.0.1:{port[0]}"
            try:
                if httpx.get(f"{url}/health", timeout=2.0).status_code == 200:
                    return url
            except httpx.TransportError:
                pass
        time.sleep(0.1)
    raise AssertionError("llama-server did not become ready:\n" + "\n".join(tail))


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    if proc.stderr is not None:
        proc.stderr.close()
