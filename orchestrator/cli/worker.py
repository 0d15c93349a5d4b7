"""``orchestrator worker``: expose this machine's devices to another machine's llama-server.

Runs llama.cpp's ``ggml-rpc-server`` from our build under supervision
(``orchestrator.supervise.worker``), prints its devices and free memory once it answers, and
stops it on Ctrl-C / SIGTERM. The RPC protocol has no authentication: anything that reaches the
port can run computations on the devices and read what is in their memory, so it binds to
loopback unless told otherwise, and says so loudly when told otherwise.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from rich.console import Console

from orchestrator import paths
from orchestrator.errors import UserError
from orchestrator.native.build import RPC_SERVER, loader_path, locate
from orchestrator.supervise.states import ProcessState
from orchestrator.supervise.worker import RpcWorker, WorkerOptions

LOOPBACK = ("127.0.0.1", "localhost", "::1")
TRUST_WARNING = (
    "warning: ggml-rpc-server has no authentication and no encryption; anyone who can reach "
    "{host}:{port} can use this machine's devices and read their memory. Make the port reachable "
    "only from machines you trust (a private network or a firewall rule), never from the internet."
)


def run(*, host: str, port: int, devices: list[str], threads: int | None) -> int:
    """Run the worker until interrupted. Returns 0 after Ctrl-C, 1 when it could not be kept running.

    Raises:
        UserError: no build, or a build without ggml-rpc-server (built before RPC was added).
    """
    console = Console(stderr=True, soft_wrap=True, highlight=False)
    info = locate()
    binary = info.bin_dir / RPC_SERVER
    if not binary.is_file():
        raise UserError(
            f"the current build has no {RPC_SERVER} ({info.bin_dir})", hint="run `orchestrator build` to rebuild"
        )
    if host not in LOOPBACK:
        console.print(f"[bold yellow]{TRUST_WARNING.format(host=host, port=port)}[/]")
    options = WorkerOptions(
        binary=binary,
        host=host,
        port=port,
        devices=devices,
        threads=threads,
        protocol=info.manifest.get("rpc_protocol"),
        env=loader_path([str(info.bin_dir), *info.manifest.get("runtime_lib_dirs", [])]),
    )
    log_dir = paths.state_dir() / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"worker-{port}.log"
    console.print(f"orchestrator worker: starting {RPC_SERVER} on {host}:{port}; log {log}")
    return asyncio.run(_serve(options, log, console))


async def _serve(options: WorkerOptions, log: Path, console: Console) -> int:
    shown: list[ProcessState] = []

    def changed(worker: RpcWorker) -> None:
        if shown and shown[-1] is worker.state:
            return
        shown.append(worker.state)
        if worker.state is ProcessState.READY:
            _print_ready(worker, console)
        elif worker.state in (ProcessState.RESTARTING, ProcessState.FAILED):
            console.print(f"worker {worker.state.value}: {worker.message}")

    worker = RpcWorker(options, log, on_change=changed)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, worker.stop)
    code = await worker.run()
    console.print("worker stopped" if code == 0 else "worker failed; see the log above")
    return code


def _print_ready(worker: RpcWorker, console: Console) -> None:
    info = worker.info
    protocol = info.protocol if info else "?"
    console.print(f"worker ready: {worker.endpoint} (pid {worker.pid}, RPC protocol {protocol})")
    for dev in info.devices if info else ():
        console.print(f"  device {dev.index}: {dev.free / 2**30:.1f} GiB free of {dev.total / 2**30:.1f} GiB")
    port = (worker.endpoint or ":").rsplit(":", 1)[1]
    console.print(f'  use it from the machine running `orchestrator up`: rpc: ["<this machine\'s address>:{port}"]')
