"""TCP ports of this machine: is a fixed port free, and who holds it."""

from __future__ import annotations

import errno
import socket

import psutil

from orchestrator.errors import UserError

#: what to do about a model's fixed port that is taken (``models[i].port``: absent means OS-picked)
MODEL_PORT_FIX = "stop that process, choose another port, or leave the port out to get an OS-picked one"
#: the same for the endpoint's own port, which is 8080 when absent
SERVER_PORT_FIX = "stop that process, or set server.port in models.yaml to a free port (0: an OS-picked one)"


def check_port_free(host: str, port: int, *, where: str | None = None, fix: str = MODEL_PORT_FIX) -> None:
    """Refuse a fixed port that something else already holds.

    Binding is the test (SO_REUSEADDR on, so sockets in TIME_WAIT do not count); psutil names
    the holder. Port 0 is always fine. Nothing stays bound afterwards, and the number is not
    handed on: the caller's own process binds it.

    Args:
        host: address to bind, e.g. ``"127.0.0.1"``.
        port: TCP port.
        where: the models.yaml location of the port for the message, e.g. ``"models.yaml:9: models[0].port"``.
        fix: what to do when the port is taken (``SERVER_PORT_FIX`` for ``server.port``).
    Raises:
        UserError: ``"port 8080 on 127.0.0.1 is in use by pid 4242 (python3 -m http.server)"``.
    """
    if port == 0:
        return
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as err:
        raise UserError(
            f"{where + ': ' if where else ''}cannot resolve host {host!r}: {err}",
            hint="use an IP address such as 127.0.0.1",
        ) from None
    family, _, _, _, addr = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
    except OSError as err:
        prefix = f"{where}: " if where else ""
        if err.errno == errno.EADDRINUSE:
            raise UserError(
                f"{prefix}port {port} on {host} is already in use by {port_holder(port)}",
                hint=fix,
            ) from None
        if err.errno == errno.EACCES:
            raise UserError(f"{prefix}port {port} needs privileges to bind", hint="use a port above 1023") from None
        if err.errno == errno.EADDRNOTAVAIL:
            raise UserError(
                f"{prefix}{host} is not an address of this machine", hint="use 127.0.0.1 or a local address"
            ) from None
        raise UserError(f"{prefix}cannot bind {host}:{port}: {err}") from None
    finally:
        sock.close()


def port_holder(port: int) -> str:
    """``"pid 4242 (python3 -m http.server 8080)"`` for the process listening on TCP ``port``,
    or ``"an unknown process"`` when the OS does not say (another user's process)."""
    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.AccessDenied, OSError):
        return "an unknown process (not permitted to list sockets)"
    pids = sorted(
        {c.pid for c in conns if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid}
    )
    if not pids:
        return "an unknown process (not permitted to see it; try `sudo ss -ltnp`)"
    names = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            cmd = " ".join(proc.cmdline()) or proc.name()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            cmd = "?"
        if len(cmd) > 120:
            cmd = cmd[:117] + "..."
        names.append(f"pid {pid} ({cmd})")
    return ", ".join(names)


def pick_free_port(host: str) -> int:
    """A TCP port on ``host`` that was free a moment ago (the OS picks it).

    Only for a child that cannot bind port 0 itself (ggml-rpc-server refuses ``--port 0``):
    another process may take the port before the child binds it, so the caller must be ready to
    pick again when the child fails to bind.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
