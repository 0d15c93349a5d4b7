"""Spawning and stopping child processes so that none is ever orphaned.

Three layers keep children from outliving us (after llama-swap ``runtime_unix.go`` and
Supervisor's ``kill()``):

- each child starts in its own session (``start_new_session=True``), so one ``killpg`` reaches
  it and anything it forks;
- ``stop_process`` sends SIGTERM to the group, then SIGKILL after a grace period, and reaps;
- each child asks the kernel for SIGKILL when its parent dies (``prctl(PR_SET_PDEATHSIG)``), which
  is the only thing that works against ``kill -9`` of the orchestrator. The kernel delivers it
  when the *thread* that forked the child exits, so spawn from the event-loop (main) thread,
  never from a worker thread.

Linux only for the parent-death signal; elsewhere it is skipped (process groups still apply).

Only asyncio's child watcher may reap a child started by ``spawn``: never call ``proc.kill()``,
``proc.terminate()`` or ``proc.send_signal()`` on it, nor ``os.waitpid`` / ``psutil.Process.wait``.
The ``Popen`` methods poll (``waitpid``) before signalling; when they win the race against the
watcher, the real exit status is lost and asyncio reports 255. Signal with ``signal_group``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _pdeathsig_preexec(parent_pid: int) -> Callable[[], None]:
    """Return a preexec function (runs in the child between fork and exec).

    It sets SIGKILL as the parent-death signal, then closes the race where the parent died
    before the ``prctl`` call: if our parent is no longer ``parent_pid``, exit at once.
    """
    libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None

    def preexec() -> None:
        if libc is None:
            return
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent_pid:
            os._exit(1)

    return preexec


def die_with_parent() -> Callable[[], None]:
    """A ``preexec_fn`` for ``subprocess.Popen``: the child is SIGKILLed when we die, even by ``kill -9``.

    For helpers (tests, scripts) that start long-lived children with plain ``Popen``; ``spawn``
    already does this. Call it, and start the child, from the thread that lives as long as the
    child should: the kernel sends the signal when the *forking thread* exits (normally the main
    thread). Linux only; a no-op elsewhere.
    """
    return _pdeathsig_preexec(os.getpid())


async def spawn(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    unset: Iterable[str] = (),
) -> asyncio.subprocess.Process:
    """Start ``argv`` (list argv, never a shell) as a supervised child.

    The child gets its own session/process group and the parent-death signal; its stdout and
    stderr are merged into one pipe (``proc.stdout``) for the caller to read. Must be awaited
    from the event-loop thread (see the module docstring).

    Args:
        argv: program and arguments; ``argv[0]`` is an executable path.
        env: extra environment variables, layered over ``os.environ``.
        cwd: working directory, default the current one.
        unset: variables of ``os.environ`` the child must not inherit (secrets meant for others).

    Returns:
        The ``asyncio.subprocess.Process``.

    Raises:
        OSError: the executable is missing or not executable.
    """
    dropped = set(unset)
    full_env = {k: v for k, v in os.environ.items() if k not in dropped}
    if env:
        full_env.update(env)
    return await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=full_env,
        cwd=cwd,
        start_new_session=True,
        preexec_fn=_pdeathsig_preexec(os.getpid()),
    )


def signal_group(pid: int, sig: int) -> bool:
    """Send ``sig`` to the process group led by ``pid``; False when the group is gone.

    Safe after the leader was reaped: a pid is not reused while a process group with that id
    still exists, so the signal reaches only our own stragglers or nobody.
    """
    try:
        os.killpg(pid, sig)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return False


async def stop_process(proc: asyncio.subprocess.Process, grace: float) -> int | None:
    """Stop a child started by ``spawn``: SIGTERM its group, SIGKILL after ``grace`` seconds.

    Also sends SIGCONT so a stopped (SIGSTOP) child can act on the SIGTERM. Always reaps the
    child and SIGKILLs any leftover group members.

    Args:
        proc: the process returned by ``spawn``.
        grace: seconds to wait after SIGTERM before SIGKILL.

    Returns:
        The child's exit status (negative signal number when killed), or None if unknown.
    """
    if proc.returncode is None:
        signal_group(proc.pid, signal.SIGTERM)
        signal_group(proc.pid, signal.SIGCONT)
        try:
            await asyncio.wait_for(proc.wait(), timeout=max(0.0, grace))
        except TimeoutError:
            if not signal_group(proc.pid, signal.SIGKILL):
                _kill_leader(proc)
            await proc.wait()
    # the leader is gone; make sure nothing it forked lingers in its group
    signal_group(proc.pid, signal.SIGKILL)
    return proc.returncode


def _kill_leader(proc: asyncio.subprocess.Process) -> None:
    """SIGKILL the child itself (it left its process group) with ``os.kill``, which never reaps.

    Not ``proc.kill()``: ``subprocess.Popen.send_signal`` first calls ``poll()``, a
    ``waitpid(WNOHANG)`` that reaps a child that has just died, behind the back of asyncio's child
    watcher, whose own ``waitpid`` then fails with ECHILD and reports exit code 255 instead of the
    real status (``asyncio.unix_events.ThreadedChildWatcher``).
    """
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)


def pid_alive(pid: int) -> bool:
    """True when ``pid`` exists and is not a zombie."""
    import psutil

    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def listening_ports(pid: int) -> list[int]:
    """TCP ports that process ``pid`` listens on (empty when unknown or not permitted)."""
    import psutil

    try:
        proc = psutil.Process(pid)
        # psutil >= 6 calls it net_connections; older releases only have connections
        conns = getattr(proc, "net_connections", None) or proc.connections
        conns = conns(kind="tcp")
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return []
    return sorted({c.laddr.port for c in conns if c.status == psutil.CONN_LISTEN and c.laddr})


def connection_states(pid: int) -> list[tuple[str, int, str]]:
    """``(remote ip, remote port, state)`` of each connected TCP socket of process ``pid``.

    ``state`` is psutil's (``ESTABLISHED``, ``CLOSE_WAIT``: the other end closed, ...). Empty
    when the process is gone or not readable.
    """
    import psutil

    try:
        proc = psutil.Process(pid)
        conns = getattr(proc, "net_connections", None) or proc.connections
        found = conns(kind="tcp")
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return []
    return [(c.raddr.ip, c.raddr.port, c.status) for c in found if c.raddr]
