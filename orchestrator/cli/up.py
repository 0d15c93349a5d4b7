"""``orchestrator up``: refuse early, then run the endpoint and show its instances.

Order matters: everything that can refuse (config, build, GPU detection, launch plan, fixed
ports, a second orchestrator) refuses before any model is loaded; ``--dry-run`` prints the plan
and stops there. ``orchestrator.serve.run.serve_up`` then runs everything; ``UpDisplay`` shows
it: a live rich table on a terminal, one line per state change otherwise, and once ready the
endpoint with ready-to-paste examples.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from orchestrator.cli.format import STATE_STYLES, duration
from orchestrator.errors import UserError
from orchestrator.host import disk, statefile
from orchestrator.launch.settings import defaults_line

if TYPE_CHECKING:
    from orchestrator.config.schema import Config
    from orchestrator.host.gpus import GPU
    from orchestrator.launch.spec import InstanceSpec
    from orchestrator.native.build import BuildInfo
    from orchestrator.native.capabilities import ServerCapabilities
    from orchestrator.serve.reload import Prepare
    from orchestrator.supervise.supervisor import Supervisor


def run_up(
    config_path: Path,
    dry_run: bool = False,
    force: bool = False,
    offline: bool = False,
    llama_server: Path | None = None,
) -> int:
    """Run ``orchestrator up`` until SIGINT/SIGTERM (see ``orchestrator.serve.run.serve_up``).

    Args:
        config_path: models.yaml.
        dry_run: print the launch plan and return 0 without starting anything.
        force: launch even when the fit check says a model will not fit.
        offline: never download; an ``hf:`` model the hub cache lacks is an error naming the pull.
        llama_server: serve through this llama-server (see ``_server_build``).

    Returns 0 after a clean shutdown, 1 when every instance failed to start.

    Raises:
        UserError: bad config, no native build, busy port, or an orchestrator already running.
    """
    from orchestrator.cli.pull import pull_missing
    from orchestrator.config.load import load_config
    from orchestrator.host import gpus
    from orchestrator.launch import discover
    from orchestrator.launch import plan as launch
    from orchestrator.native.capabilities import probe_capabilities

    console = Console(highlight=False)
    config = load_config(Path(config_path))
    build_info = _server_build(config, llama_server)
    if not dry_run:
        pull_missing(config, offline=offline, console=console)
    found, source = gpus.detect_gpus()
    if not dry_run:
        statefile.claim()
    capabilities = probe_capabilities(build_info)
    if build_info.manifest.get("adopted"):
        _say_adopted(console, build_info, capabilities)
    config, notes = discover.expand(config)
    for note in notes:
        console.print(f"models_dirs: {note}", markup=False, soft_wrap=True)
    specs = launch.plan_launch(
        config,
        gpus=found,
        build=build_info,
        capabilities=capabilities,
        force=force,
        check_ports=not dry_run,
        gpu_source=source,
        rpc_free=_probe_workers(config),
    )
    if dry_run:
        console.print(f"GPUs: {source}" if not found else f"GPUs ({source}): " + ", ".join(g.name for g in found))
        console.print(render_plan(specs), soft_wrap=True)
        return 0
    from orchestrator.serve.run import serve_up

    prepare = _preparer(found, build_info, capabilities, force)
    return serve_up(config, specs, lambda supervisor: UpDisplay(console, supervisor, config), prepare)


def _server_build(config: Config, llama_server: Path | None) -> BuildInfo:
    """The llama-server to serve through: ``--llama-server``, else ``build.llama_server`` (relative
    to models.yaml), else the last ``orchestrator build``.

    Raises:
        UserError: the named binary is not executable, or there is no build.
    """
    from orchestrator.native import build

    if llama_server is not None:
        return build.adopt(llama_server)
    if config.build.llama_server:
        path = Path(config.build.llama_server).expanduser()
        return build.adopt(path if path.is_absolute() else config.config_dir / path)
    try:
        return build.locate()
    except UserError as err:
        raise UserError(
            f"{err} — the native llama.cpp build is missing, so nothing can be launched yet",
            hint="run `orchestrator build` first (about 8 minutes on 2 CPU cores; it shows progress), "
            "or set build.llama_server in models.yaml to a llama-server you have",
        ) from None


def _say_adopted(console: Console, build_info: BuildInfo, capabilities: ServerCapabilities) -> None:
    """One line on the adopted llama-server, its upstream build, what it lacks, and a known-bad window."""
    from orchestrator.native.build import server_version
    from orchestrator.native.versions import known_bad, parse_version

    said = parse_version(server_version(build_info.server))
    upstream = f"{said.tag} ({said.commit})" if said else "unknown upstream build"
    off = len(capabilities.features_off)
    console.print(
        f"llama-server: {build_info.server} (yours, {upstream}); "
        + (f"{off} feature(s) of our patches off, see `orchestrator status`" if off else "all our features on"),
        markup=False,
        soft_wrap=True,
    )
    for bad in known_bad(said.build) if said else []:
        console.print(f"[yellow]warning:[/] {bad.what}; use another llama.cpp build or `orchestrator build`")


def _preparer(found: list[GPU], build_info: BuildInfo, capabilities: ServerCapabilities, force: bool) -> Prepare:
    """What a reload runs: read models.yaml, add ``models_dirs``, plan with the same build and GPUs
    (no port check: the running instances hold their fixed ports)."""
    from orchestrator.config.load import load_config
    from orchestrator.launch import discover
    from orchestrator.launch.plan import plan_launch

    def prepare(path: Path) -> tuple[Config, list[InstanceSpec], list[str]]:
        fresh, notes = discover.expand(load_config(path))
        plan = plan_launch(
            fresh, gpus=found, build=build_info, capabilities=capabilities, force=force, check_ports=False
        )
        return fresh, plan, notes

    return prepare


def render_plan(specs: list[InstanceSpec]) -> Group:
    """A rich renderable (``up --dry-run``): a table of instances, then each exact command line
    and any notes. Command lines are ``shlex.join``-ed for display; children get list argv."""
    table = Table(title="launch plan", title_justify="left")
    for col in ("instance", "model", "GPUs", "port", "speculation", "n_max/n_min"):
        table.add_column(col)
    for s in specs:
        table.add_row(
            s.name,
            s.model,
            ",".join(map(str, s.gpus)) if s.gpus else "CPU",
            str(s.port) if s.port else "auto",
            s.spec_type or "off",
            f"{s.n_max}/{s.n_min}" if s.spec_type else "-",
        )
    parts: list[Table | Text] = [table]
    for s in specs:
        parts.append(Text(f"{s.name}:", style="bold"))
        parts.append(Text(f"  {s.command_line}", no_wrap=True, overflow="ignore"))
        left = defaults_line(s.settings)
        if left:
            parts.append(Text(f"  {left}"))
        for note in s.notes:
            parts.append(Text(f"  note: {note}", style="yellow"))
    return Group(*parts)


def examples(config: Config, url: str) -> str:
    """Ready-to-paste curl and Python (openai client) streamed examples for the endpoint."""
    model = config.models[0].name
    key_header = ' -H "Authorization: Bearer $ORCHESTRATOR_API_KEY"' if config.server.api_keys else ""
    key_arg = 'os.environ["ORCHESTRATOR_API_KEY"]' if config.server.api_keys else '"none"'
    body = json.dumps(
        {"model": model, "max_tokens": 64, "messages": [{"role": "user", "content": "Hello!"}], "stream": True}
    )
    lines = [f"endpoint: {url}/v1  (OpenAI-compatible; models: {', '.join(m.name for m in config.models)})"]
    if config.server.api_keys:
        lines.append("export ORCHESTRATOR_API_KEY=<one of server.api_keys in models.yaml>")
    lines += [
        "",
        "curl:",
        f"  curl -N {url}/v1/chat/completions -H 'Content-Type: application/json'{key_header} \\",
        f"    -d '{body}'",
        "",
        "Python (pip install openai):",
    ]
    if config.server.api_keys:
        lines.append("  import os")
    lines += [
        "  from openai import OpenAI",
        f'  client = OpenAI(base_url="{url}/v1", api_key={key_arg})',
        f'  stream = client.chat.completions.create(model="{model}", max_tokens=64, '
        'messages=[{"role": "user", "content": "Hello!"}], stream=True)',
        "  for chunk in stream:",
        '      print(chunk.choices[0].delta.content or "", end="", flush=True)',
    ]
    return "\n".join(lines)


def status_table(supervisor: Supervisor) -> Table:
    """A rich table of the instances: state, pid, port, model, uptime, restarts, requests."""
    table = Table(title="instances", title_justify="left")
    for col in ("instance", "state", "pid", "port", "GPUs", "model", "uptime", "restarts", "requests", "note"):
        table.add_column(col)
    for row in supervisor.snapshot():
        state = row["state"]
        note = row["message"] or "; ".join(row["warnings"]) or ""
        table.add_row(
            row["name"],
            f"[{STATE_STYLES.get(state, 'white')}]{state}[/]",
            str(row["pid"] or "-"),
            str(row["port"] or "-"),
            ",".join(map(str, row["gpus"])) or "CPU",
            row["model"],
            duration(row["uptime_s"]),
            str(row["restarts"]),
            str(row["requests"]),
            Text(note.splitlines()[0][:80] if note else ""),
        )
    return table


class UpDisplay:
    """``up``'s ``Display`` (``orchestrator.serve.run.Display``): a rich Live table on a terminal,
    one line per state change otherwise."""

    def __init__(self, console: Console, supervisor: Supervisor, config: Config) -> None:
        self.console = console
        self.supervisor = supervisor
        self.config = config
        self._live: Live | None = None
        self._seen: dict[str, str] = {}

    def loading(self, url: str, instances: int, log_dir: Path) -> None:
        self._print(f"orchestrator: endpoint {url}, loading {instances} instance(s); logs in {log_dir}")

    def start(self) -> None:
        if self.console.is_terminal:
            self._live = Live(status_table(self.supervisor), console=self.console, refresh_per_second=2)
            self._live.start()
        self.refresh()

    def refresh(self) -> None:
        if self._live is not None:
            self._live.update(status_table(self.supervisor))
            return
        for inst in self.supervisor.instances:
            text = inst.state.value + (f" ({inst.message.splitlines()[0]})" if inst.message else "")
            if inst.name not in self._seen and text == "stopped":
                self._seen[inst.name] = text  # not launched yet: "stopped" before "loading" only confuses
                continue
            if self._seen.get(inst.name) != text:
                self._seen[inst.name] = text
                port = inst.base_url.rsplit(":", 1)[1] if inst.base_url else "-"
                self._print(f"{inst.name}: {text} (pid {inst.pid or '-'}, port {port})")

    def failed(self, name: str, message: str | None) -> None:
        self._print(f"{name} failed: {message}")

    def ready(self, url: str, seconds: float) -> None:
        self._print(f"[green]ready[/] in {seconds:.1f} s", markup=True)
        self._print(examples(self.config, url))

    def none_started(self) -> None:
        self._print("[red]no instance could start; see the messages above and `orchestrator logs NAME`[/]", markup=True)

    def note(self, text: str) -> None:
        self._print(text)

    def stop(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def stopped(self) -> None:
        self._print("orchestrator stopped")

    def _print(self, text: str, *, markup: bool = False) -> None:
        # an output file on a full or read-only disk (`up > up.log`) must not stop the serving
        try:
            # soft_wrap: commands stay on their lines, so they can be pasted even from a pipe or log
            self.console.print(text, markup=markup, soft_wrap=True)
            sys.stdout.flush()
        except OSError as err:
            if not disk.is_disk_error(err):
                raise
            disk.failed("up's output", "stdout", err)


def _probe_workers(config: Config) -> dict[str, int]:
    """Free bytes of each RPC worker of models.yaml that answers now (for the fit check)."""
    import asyncio

    from orchestrator.native import rpc

    endpoints = sorted({ep for m in config.models for ep in m.rpc})

    async def probe_all() -> dict[str, int]:
        found = await asyncio.gather(*(rpc.probe(ep, 3.0) for ep in endpoints), return_exceptions=True)
        return {
            ep: info.free_bytes
            for ep, info in zip(endpoints, found, strict=True)
            if isinstance(info, rpc.RpcWorkerInfo)
        }

    return asyncio.run(probe_all()) if endpoints else {}
