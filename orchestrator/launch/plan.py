"""The launch plan: models.yaml + GPUs + the native build -> one ``InstanceSpec`` per llama-server.

``plan_launch`` decides, for every model and replica, the GPUs, the port, the speculative
flags and the exact argv, and refuses (``UserError``) before anything is started when:

- the GGUF (or draft GGUF) is missing, or comes from a fork (``qwen35moe_mtp``);
- ``speculative.type: draft-mtp`` is asked of a GGUF without a NextN/MTP head and no draft;
- the built llama-server does not know ``--spec-type draft-mtp``;
- a fixed port is taken (the message names the process holding it; case S02);
- the model does not fit the assigned GPUs' free memory (unless ``force``).

Nothing here starts a server. Ports: ``port: null`` becomes ``--port 0``: llama-server
binds a port the OS picks and logs ``listening on http://127.0.0.1:PORT`` (the supervisor
reads it). The plan never binds a port, closes it and hands the number on (that races).
"""

from __future__ import annotations

import dataclasses
import errno
import os
import shlex
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.config.schema import Config, ModelConfig, resolve_draft_path, resolve_model_path
from orchestrator.errors import UserError
from orchestrator.host.gpus import GPU
from orchestrator.launch.fit import FitRequest, check_fit, estimate_bytes

if TYPE_CHECKING:
    from orchestrator.models.facts import ModelFacts
    from orchestrator.native.build import BuildInfo

CHILD_HOST = "127.0.0.1"
# Architecture names that forks write for the same model with the MTP head; the pin
# (src/llama-arch.cpp) knows only the upstream name.
FORK_ARCHS = {"qwen35moe_mtp": "qwen35moe", "qwen35_mtp": "qwen35", "qwen3next_mtp": "qwen3next"}
# Flags (and their value counts) that carry speculation; with_argv_overrides removes them.
SPEC_FLAGS = {"--spec-type": 1, "--spec-draft-n-max": 1, "--spec-draft-n-min": 1, "--spec-draft-p-min": 1, "-md": 1}


@dataclass(frozen=True)
class InstanceSpec:
    """One llama-server process to run.

    ``port`` 0 means llama-server picks one (it logs ``listening on http://127.0.0.1:PORT``).
    ``argv[0]`` is the llama-server path; ``env`` is added to the orchestrator's environment.
    ``notes`` are plan-time remarks for people (CPU fallback, forced fit, ...).
    """

    name: str
    model: str
    replica: int
    gpus: tuple[int, ...]
    host: str
    port: int
    argv: tuple[str, ...]
    env: dict[str, str]
    gguf: Path
    draft: Path | None
    spec_type: str | None
    n_max: int | None
    n_min: int | None
    alias: str
    notes: tuple[str, ...] = field(default=())

    @property
    def command_line(self) -> str:
        """The command for display only (``shlex.join``); never run through a shell."""
        env = [f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()) if k.startswith("CUDA_")]
        return " ".join(env + [shlex.join(self.argv)])


# --------------------------------------------------------------------------- model facts


def read_facts(path: Path) -> Any:
    """``orchestrator.models.facts.read_model_facts(path)`` (imported lazily: it pulls in gguf)."""
    from orchestrator.models import facts as gguf_info

    return gguf_info.read_model_facts(path)


def facts_arch(facts: ModelFacts) -> str:
    """The GGUF's ``general.architecture``."""
    return facts.architecture


def facts_mtp(facts: ModelFacts) -> str:
    """Where the NextN/MTP head is: ``embedded``, ``draft-only``, ``none`` or ``unsupported``."""
    return str(facts.mtp)


# --------------------------------------------------------------------------- the build


_HELP_CACHE: dict[tuple[str, int, int], str] = {}


def server_help(build: BuildInfo) -> str:
    """``llama-server --help`` text, cached per binary (path, mtime, size). Raises UserError
    when the binary cannot run (missing libraries, wrong platform)."""
    server = Path(build.server)
    try:
        st = server.stat()
    except OSError as err:
        raise UserError(f"llama-server not found at {server}: {err}", hint="run `orchestrator build`") from None
    key = (str(server), st.st_mtime_ns, st.st_size)
    if key not in _HELP_CACHE:
        try:
            out = subprocess.run(
                [str(server), "--help"], capture_output=True, text=True, timeout=60, check=False, env=_probe_env(build)
            )
        except (OSError, subprocess.SubprocessError) as err:
            raise UserError(
                f"cannot run {server} --help: {err}", hint="rebuild with `orchestrator build --force`"
            ) from None
        if out.returncode != 0:
            tail = (out.stderr or out.stdout).strip().splitlines()[-3:]
            raise UserError(
                f"{server} --help failed (exit {out.returncode}): " + " / ".join(tail),
                hint="rebuild with `orchestrator build --force`",
            )
        _HELP_CACHE[key] = out.stdout + out.stderr
    return _HELP_CACHE[key]


def supports_draft_mtp(build: BuildInfo) -> bool:
    """True when the built llama-server lists ``--spec-type`` with the ``draft-mtp`` value."""
    text = server_help(build)
    return "--spec-type" in text and "draft-mtp" in text


def build_backend(build: BuildInfo) -> str:
    """``"cuda"`` or ``"cpu"``: the manifest's ``backend``, else whether libggml-cuda is present."""
    backend = (build.manifest or {}).get("backend")
    if backend in ("cpu", "cuda"):
        return str(backend)
    return "cuda" if any(Path(build.lib_dir).glob("libggml-cuda.so*")) else "cpu"


def _probe_env(build: BuildInfo) -> dict[str, str]:
    env = dict(os.environ)
    env.update(_lib_env(build))
    return env


def _lib_env(build: BuildInfo) -> dict[str, str]:
    current = os.environ.get("LD_LIBRARY_PATH")
    lib = str(build.lib_dir)
    return {"LD_LIBRARY_PATH": f"{lib}:{current}" if current else lib}


# --------------------------------------------------------------------------- ports


def check_port_free(host: str, port: int, *, where: str | None = None) -> None:
    """Refuse a fixed port that something else already holds (case S02).

    Binding is the test (SO_REUSEADDR on, so sockets in TIME_WAIT do not count); psutil names
    the holder. Port 0 is always fine. Nothing stays bound afterwards, and the number is not
    handed on: the caller's own process binds it.

    Args:
        host: address to bind, e.g. ``"127.0.0.1"``.
        port: TCP port.
        where: the models.yaml location of the port for the message, e.g. ``"models.yaml:9: models[0].port"``.
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
                hint="stop that process, choose another port, or leave the port out to get an OS-picked one",
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
    import psutil

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


# --------------------------------------------------------------------------- the plan


def plan_launch(
    config: Config,
    *,
    gpus: list[GPU],
    build: BuildInfo,
    force: bool = False,
    facts: dict[str, Any] | None = None,
    check_ports: bool = True,
) -> list[InstanceSpec]:
    """Plan every llama-server: one per model replica.

    Args:
        config: the validated models.yaml.
        gpus: from ``gpus.detect_gpus()``; ignored (CPU) when the build has no CUDA backend.
        build: ``build.locate()``; its llama-server is probed once for ``draft-mtp`` support.
        force: launch even when the fit check says the model will not fit.
        facts: ModelFacts per model name (read from the GGUF header when absent).
        check_ports: check fixed ports (the proxy's ``server.port`` too) are free.
    Returns:
        the specs, in models.yaml order, replica 0 first.
    Raises:
        UserError: see the module docstring; each message names the models.yaml key.
    """
    backend = build_backend(build)
    usable = list(gpus) if backend == "cuda" else []
    placer = _Placer(usable)
    specs: list[InstanceSpec] = []
    requests: list[FitRequest] = []
    for i, model in enumerate(config.models):
        gguf, draft = _files(config, i, model)
        known = facts or {}
        model_facts = known.get(model.name) or known.get(str(gguf)) or _read_facts_at(config, i, model, gguf, ("path",))
        draft_facts = (
            (known.get(str(draft)) or _read_facts_at(config, i, model, draft, ("speculative", "draft")))
            if draft is not None
            else None
        )
        _check_arch(config, i, model, gguf, model_facts, ("path",))
        if draft is not None:
            _check_arch(config, i, model, draft, draft_facts, ("speculative", "draft"))
        spec_type, notes = _decide_spec(config, i, model, gguf, draft, model_facts, draft_facts)
        if spec_type is not None and not supports_draft_mtp(build):
            raise UserError(
                f"{config.where('models', i, 'speculative', 'type')}: {build.server} does not support "
                "--spec-type draft-mtp",
                hint="rebuild from the pinned llama.cpp with `orchestrator build --force`, "
                "or set speculative.type: none",
            )
        if gpus and backend != "cuda":
            notes.append(f"the native build is {backend}-only, so it runs on CPU; build with --backend cuda")
        placements = _placements(config, i, model, usable, placer)
        for r, assigned in enumerate(placements):
            port = 0 if not model.port else model.port + r
            if port > 65535:
                raise UserError(
                    f"{config.where('models', i, 'port')}: replica {r} would get port {port} (> 65535)",
                    hint="choose a lower port",
                )
            argv = _argv(build, model, gguf, draft, spec_type, port, assigned, usable)
            env = _env(build, backend, model, assigned)
            spec = InstanceSpec(
                name=f"{model.name}-{r}",
                model=model.name,
                replica=r,
                gpus=assigned,
                host=CHILD_HOST,
                port=port,
                argv=tuple(argv),
                env=env,
                gguf=gguf,
                draft=draft,
                spec_type=spec_type,
                n_max=model.speculative.n_max if spec_type else None,
                n_min=model.speculative.n_min if spec_type else None,
                alias=model.name,
                notes=tuple(notes),
            )
            specs.append(spec)
            requests.append(
                FitRequest(
                    instance=spec.name,
                    where=config.where("models", i),
                    gpus=assigned,
                    partial_offload=model.gpu_layers != "all",
                    bytes_needed=estimate_bytes(
                        model_facts,
                        model.ctx_size,
                        model.parallel,
                        draft_n_max=model.speculative.n_max if spec_type else 0,
                        draft_facts=draft_facts if spec_type else None,
                    ),
                )
            )
    fit_notes = check_fit(requests, usable, force=force)
    specs = [dataclasses.replace(s, notes=s.notes + tuple(fit_notes.get(s.name, ()))) for s in specs]
    _check_ports(config, specs, check_ports)
    return specs


def _read_facts_at(config: Config, i: int, model: ModelConfig, path: Path, key: tuple[str, ...]) -> Any:
    """``read_facts(path)``; a bad GGUF's UserError gets the models.yaml line and key in front."""
    try:
        return read_facts(path)
    except UserError as err:
        raise UserError(f"{config.where('models', i, *key)}: model {model.name!r}: {err}", hint=err.hint) from None


def _files(config: Config, i: int, model: ModelConfig) -> tuple[Path, Path | None]:
    gguf = resolve_model_path(model, config.config_dir)
    if not gguf.is_file():
        what = f"{gguf} is a directory, not a GGUF file" if gguf.is_dir() else f"no such GGUF file {gguf}"
        raise UserError(
            f"{config.where('models', i, 'path')}: model {model.name!r}: {what}",
            hint="fix the path (relative paths start at the models.yaml folder; split models: give part 00001)",
        )
    draft = resolve_draft_path(model, config.config_dir)
    if draft is not None and not draft.is_file():
        raise UserError(
            f"{config.where('models', i, 'speculative', 'draft')}: model {model.name!r}: no such draft GGUF {draft}",
            hint="fix the path or remove speculative.draft (an embedded MTP head needs no draft file)",
        )
    return gguf, draft


def _check_arch(config: Config, i: int, model: ModelConfig, gguf: Path, facts: Any, key: tuple[str, ...]) -> None:
    """Refuse a fork's GGUF (``qwen35moe_mtp``) before launch: the pin cannot load it."""
    if facts_mtp(facts) != "unsupported":
        return
    arch = facts_arch(facts)
    upstream = FORK_ARCHS.get(arch, arch.removesuffix("_mtp"))
    raise UserError(
        f"{config.where('models', i, *key)}: model {model.name!r}: {gguf} has architecture {arch!r}, written by a "
        f"llama.cpp fork; the pinned llama.cpp knows {upstream!r} (with --spec-type draft-mtp) and cannot load it",
        hint=f"use an upstream GGUF (architecture {upstream!r}, MTP head embedded; `orchestrator inspect FILE` "
        "shows it) or re-convert the original weights with the pinned convert_hf_to_gguf.py",
    )


def _decide_spec(
    config: Config, i: int, model: ModelConfig, gguf: Path, draft: Path | None, facts: Any, draft_facts: Any
) -> tuple[str | None, list[str]]:
    """``"draft-mtp"`` or None, plus notes. type None (auto) = draft-mtp iff the GGUF has an
    embedded NextN/MTP head or ``speculative.draft`` is set."""
    kind = model.speculative.type
    mtp = facts_mtp(facts)
    if mtp == "draft-only":
        raise UserError(
            f"{config.where('models', i, 'path')}: model {model.name!r}: {gguf.name} is a NextN-only draft "
            "(MTP head without the trunk), not a model to serve",
            hint="set path to the trunk GGUF and speculative.draft to this file",
        )
    if draft is not None and facts_mtp(draft_facts) not in ("draft-only", "embedded"):
        raise UserError(
            f"{config.where('models', i, 'speculative', 'draft')}: model {model.name!r}: {draft.name} has no "
            "NextN/MTP head, so it cannot draft with --spec-type draft-mtp",
            hint="point speculative.draft at a NextN-only GGUF, or remove it",
        )
    has_head = mtp == "embedded"
    if kind == "none":
        return None, []
    if kind == "draft-mtp":
        if not has_head and draft is None:
            why = facts.mtp_message or "nextn_predict_layers = 0"
            raise UserError(
                f"{config.where('models', i, 'speculative', 'type')}: model {model.name!r} asks for draft-mtp "
                f"but {gguf} has no NextN/MTP head ({why}) and no speculative.draft is set",
                hint="use a GGUF with the MTP head embedded, set speculative.draft to a NextN-only GGUF, "
                "or set speculative.type: none",
            )
        return "draft-mtp", []
    if model.multimodal:
        return None, ["speculation off: multimodal models run without MTP (llama.cpp: --mmproj and MTP do not mix)"]
    if has_head or draft is not None:
        return "draft-mtp", []
    return None, [f"speculation off: {gguf.name} has no NextN/MTP head"]


class _Placer:
    """Assigns ``gpus: auto`` replicas: the GPU with the fewest instances so far, then the
    most free memory, then the lowest index (plain round-robin on identical GPUs). Explicit
    GPU lists count too, so auto replicas go around them."""

    def __init__(self, gpus: list[GPU]) -> None:
        self.count = {g.index: 0 for g in gpus}
        self.gpus = gpus

    def take(self) -> int:
        best = min(self.gpus, key=lambda g: (self.count[g.index], -(g.memory_free or 0), g.index))
        self.count[best.index] += 1
        return best.index

    def note(self, indices: tuple[int, ...]) -> None:
        for index in indices:
            if index in self.count:
                self.count[index] += 1


def _placements(
    config: Config, i: int, model: ModelConfig, usable: list[GPU], placer: _Placer
) -> list[tuple[int, ...]]:
    known = {g.index for g in usable}

    def check(indices: list[int], loc: tuple[str | int, ...]) -> tuple[int, ...]:
        missing = [x for x in indices if x not in known]
        if missing:
            have = ", ".join(str(x) for x in sorted(known)) if known else "none (no usable GPU or a CPU-only build)"
            raise UserError(
                f"{config.where('models', i, *loc)}: model {model.name!r} asks for GPU {', '.join(map(str, missing))}, "
                f"which is not available; GPUs here: {have}",
                hint="write gpus: auto (CPU when there is no GPU) or list indices that `nvidia-smi -L` shows",
            )
        placer.note(tuple(indices))
        return tuple(indices)

    if isinstance(model.replicas, list):
        return [check(lst, ("replicas", r)) for r, lst in enumerate(model.replicas)]
    if isinstance(model.gpus, list):
        assigned = check(model.gpus, ("gpus",))
        return [assigned] * model.replicas
    if not usable:
        return [()] * model.replicas
    return [(placer.take(),) for _ in range(model.replicas)]


def _argv(
    build: BuildInfo,
    model: ModelConfig,
    gguf: Path,
    draft: Path | None,
    spec_type: str | None,
    port: int,
    assigned: tuple[int, ...],
    usable: list[GPU],
) -> list[str]:
    # Spellings checked against the pin's common/arg.cpp and `llama-server --help`.
    argv = [str(build.server), "-m", str(gguf), "--alias", model.name, "--host", CHILD_HOST, "--port", str(port)]
    argv += ["--metrics", "-c", str(model.ctx_size), "-np", str(model.parallel)]
    if model.threads is not None:
        argv += ["-t", str(model.threads)]
    if assigned:
        argv += ["-ngl", str(model.gpu_layers)]
    if spec_type is not None:
        s = model.speculative
        argv += ["--spec-type", spec_type, "--spec-draft-n-max", str(s.n_max), "--spec-draft-n-min", str(s.n_min)]
        if s.p_min is not None:
            argv += ["--spec-draft-p-min", f"{s.p_min:g}"]
        if draft is not None:
            argv += ["-md", str(draft)]
    if len(assigned) > 1:
        split = _tensor_split(assigned, usable)
        if split:
            argv += ["--tensor-split", split]
    return argv + list(model.extra_args)


def _tensor_split(assigned: tuple[int, ...], usable: list[GPU]) -> str | None:
    """Proportions by total memory in GiB (stable from run to run); None when unknown, so
    llama.cpp splits by free memory itself."""
    by_index = {g.index: g for g in usable}
    totals = [by_index[x].memory_total for x in assigned if x in by_index]
    if len(totals) != len(assigned) or any(t is None for t in totals):
        return None
    return ",".join(str(max(1, round(t / 2**30))) for t in totals if t is not None)


def _env(build: BuildInfo, backend: str, model: ModelConfig, assigned: tuple[int, ...]) -> dict[str, str]:
    env = _lib_env(build)
    if backend == "cuda":
        # PCI order = nvidia-smi/NVML order, so our indices mean the same GPUs to CUDA.
        # An empty CUDA_VISIBLE_DEVICES keeps a CPU replica of a CUDA build off every GPU.
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(x) for x in assigned)
    env.update(model.env)
    return env


def _check_ports(config: Config, specs: list[InstanceSpec], check: bool) -> None:
    taken: dict[int, str] = {}
    if config.server.port:
        taken[config.server.port] = "server.port"
    for spec in specs:
        if not spec.port:
            continue
        i = next(n for n, m in enumerate(config.models) if m.name == spec.model)
        where = config.where("models", i, "port")
        if spec.port in taken:
            raise UserError(
                f"{where}: port {spec.port} of {spec.name} is also {taken[spec.port]}",
                hint="give each model a distinct port range (replica i uses port + i), or leave port out",
            )
        taken[spec.port] = f"the port of {spec.name}"
    if not check:
        return
    if config.server.port:
        check_port_free(config.server.host, config.server.port, where=config.where("server", "port"))
    for spec in specs:
        if spec.port:
            i = next(n for n, m in enumerate(config.models) if m.name == spec.model)
            check_port_free(spec.host, spec.port, where=config.where("models", i, "port") + f" ({spec.name})")


def with_argv_overrides(
    spec: InstanceSpec,
    *,
    spec_off: bool = False,
    n_max: int | None = None,
    n_min: int | None = None,
    port: int | None = None,
) -> InstanceSpec:
    """A copy of ``spec`` relaunched differently.

    Args:
        spec_off: drop every speculative flag (``--spec-type``, ``--spec-draft-n-*``, ``-md``):
            the spec-fallback relaunch and the bench K=0 baseline.
        n_max / n_min: new draft lengths (a relaunch per K; the pin has no per-request n_max
            unless the patch is applied). Ignored with ``spec_off``.
        port: a different port (0 = OS-picked).
    """
    argv = list(spec.argv)
    if spec_off:
        out: list[str] = []
        skip = 0
        for arg in argv:
            if skip:
                skip -= 1
                continue
            if arg in SPEC_FLAGS:
                skip = SPEC_FLAGS[arg]
                continue
            out.append(arg)
        return dataclasses.replace(
            spec,
            argv=tuple(_set_flag(out, "--port", port)),
            spec_type=None,
            n_max=None,
            n_min=None,
            draft=None,
            port=spec.port if port is None else port,
        )
    if n_max is not None and spec.spec_type is not None:
        argv = _set_flag(argv, "--spec-draft-n-max", n_max)
    if n_min is not None and spec.spec_type is not None:
        argv = _set_flag(argv, "--spec-draft-n-min", n_min)
    argv = _set_flag(argv, "--port", port)
    return dataclasses.replace(
        spec,
        argv=tuple(argv),
        n_max=n_max if n_max is not None and spec.spec_type else spec.n_max,
        n_min=n_min if n_min is not None and spec.spec_type else spec.n_min,
        port=spec.port if port is None else port,
    )


def _set_flag(argv: list[str], flag: str, value: int | None) -> list[str]:
    if value is None:
        return list(argv)
    out = list(argv)
    idx = out.index(flag)
    out[idx + 1] = str(value)
    return out


# --------------------------------------------------------------------------- display


def render_plan(specs: list[InstanceSpec]) -> Any:
    """A rich renderable (``up --dry-run``): a table of instances, then each exact command line
    and any notes. Command lines are ``shlex.join``-ed for display; children get list argv."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

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
    parts: list[Any] = [table]
    for s in specs:
        parts.append(Text(f"{s.name}:", style="bold"))
        parts.append(Text(f"  {s.command_line}", no_wrap=True, overflow="ignore"))
        for note in s.notes:
            parts.append(Text(f"  note: {note}", style="yellow"))
    return Group(*parts)


def plan_lines(specs: list[InstanceSpec]) -> list[str]:
    """The plan as plain text lines (for logs and non-terminal output)."""
    lines = []
    for s in specs:
        where = ",".join(map(str, s.gpus)) if s.gpus else "CPU"
        spec = f"{s.spec_type} n_max={s.n_max} n_min={s.n_min}" if s.spec_type else "speculation off"
        lines.append(f"{s.name}: model {s.model} on {where}, port {s.port or 'auto'}, {spec}")
        lines.append(f"  {s.command_line}")
        lines.extend(f"  note: {n}" for n in s.notes)
    return lines
